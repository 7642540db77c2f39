// ControlLoop: a thread that calls `tick` again after the nanoseconds each
// call returns (or at once when woken), until Stop(). The daemon runs
// GroupControllers::Tick on it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/thread_annotations.h"

namespace gpuslice::daemon {

class ControlLoop {
 public:
  explicit ControlLoop(std::function<int64_t()> tick) : tick_(std::move(tick)) {}
  ~ControlLoop() { Stop(); }
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  void Start() {
    thread_ = std::thread([this] {
      MutexLock lock(mu_);
      while (!stopping_) {
        lock.Unlock();
        const int64_t next_ns = tick_();
        lock.Lock();
        cv_.wait_for(lock, std::chrono::nanoseconds(next_ns),
                     [this]() REQUIRES(mu_) { return stopping_ || woken_; });
        woken_ = false;
      }
    });
  }
  // Runs the next tick now (or at once after the running one), whatever the
  // last tick returned. Any thread; harmless before Start and after Stop.
  void Wake() {
    {
      MutexLock lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }
  // Waits for the running tick to end; no tick runs after it. Idempotent.
  void Stop() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::function<int64_t()> tick_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool woken_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpuslice::daemon
