// PidWatcher: tells when watched processes exit, without polling: one pidfd
// per process (pidfd_open(2), which works for processes that are not our
// children) in an epoll set, served by one thread. A pidfd becomes readable
// when its process exits, so an exit is reported within one epoll wake-up.
//
// A watch names a process by (pid, start time): Watch opens the pidfd and
// then checks the start time, so a pid reused by another process before the
// pidfd was opened is refused instead of being watched in its stead.
//
// Thread-safe: Watch and Unwatch from any thread. The exit callback runs on
// the watcher's thread, with every exit of one wake-up in one batch; it may
// call Watch/Unwatch but must not call Stop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace gpuslice::daemon {

// The registry's view of liveness (a fake in unit tests).
class LivenessWatcher {
 public:
  virtual ~LivenessWatcher() = default;
  // Starts watching `pid`, which must have started at `start_time` (clock
  // ticks since boot, 0: unchecked). kNotFound when it is not (or no longer)
  // that process. Watching a pid already watched replaces the old watch.
  virtual Status Watch(pid_t pid, uint64_t start_time) = 0;
  // Stops watching `pid` (no effect if not watched).
  virtual void Unwatch(pid_t pid) = 0;
};

class PidWatcher final : public LivenessWatcher {
 public:
  using ExitCallback = std::function<void(const std::vector<pid_t>& exited)>;

  // `proc_root` is where start times are read ("/proc").
  explicit PidWatcher(std::string proc_root = "/proc");
  ~PidWatcher() override;
  PidWatcher(const PidWatcher&) = delete;
  PidWatcher& operator=(const PidWatcher&) = delete;

  // REQUIRES: before Start.
  void SetExitCallback(ExitCallback callback) { callback_ = std::move(callback); }
  // Creates the epoll set and starts the thread. kUnavailable naming the
  // cause (e.g. a kernel without pidfd_open, before Linux 5.3).
  Status Start();
  // Joins the thread and closes every pidfd. Idempotent.
  void Stop();

  Status Watch(pid_t pid, uint64_t start_time) override;
  void Unwatch(pid_t pid) override;
  size_t WatchCount() const;

 private:
  void Loop();

  const std::string proc_root_;
  ExitCallback callback_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop wakes the thread
  mutable Mutex mu_;
  struct Watched {
    int fd;
    uint32_t generation;  // tells a stale event of a replaced watch from a live one
  };
  std::map<pid_t, Watched> fds_ GUARDED_BY(mu_);
  uint32_t next_generation_ GUARDED_BY(mu_) = 1;
  std::thread thread_;
};

}  // namespace gpuslice::daemon
