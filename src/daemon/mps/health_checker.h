// MpsHealthChecker: calls MpsManager::CheckHealth every `interval` on its own
// thread, from construction until destruction (or Stop()).
//
// Thread safety: Stop() and the destructor may be called from any one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <thread>

#include "common/thread_annotations.h"
#include "daemon/mps/mps_manager.h"

namespace gpuslice::daemon::mps {

class MpsHealthChecker {
 public:
  // `manager` must outlive the checker. REQUIRES: interval > 0.
  MpsHealthChecker(MpsManager& manager, std::chrono::milliseconds interval);
  ~MpsHealthChecker();

  MpsHealthChecker(const MpsHealthChecker&) = delete;
  MpsHealthChecker& operator=(const MpsHealthChecker&) = delete;

  // Ends the thread after the check in progress, if any. Idempotent.
  void Stop();

 private:
  void Loop();

  MpsManager& manager_;
  const std::chrono::milliseconds interval_;
  Mutex mu_;
  std::condition_variable_any wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpuslice::daemon::mps
