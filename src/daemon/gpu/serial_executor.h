// SerialExecutor: runs tasks one at a time, in submission order, on its own
// thread. The daemon has one per GPU so that commands for a GPU never overlap
// or reorder, while different GPUs proceed in parallel.
//
// Thread-safe. Destruction (or Stop) runs every task already queued, then
// joins the thread; tasks submitted after Stop are refused.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "common/thread_annotations.h"

namespace gpuslice::daemon {

class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `task`; false (and `task` not run) after Stop.
  bool Submit(std::function<void()> task);
  // Runs what is queued, then ends the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpuslice::daemon
