// Signaller: how the compute backstop stops and continues processes
// (SIGSTOP/SIGCONT duty cycle, DESIGN.md section 4 "Backstop"). An interface
// so unit tests record the signals instead of sending them.
//
// A process is named by its host pid and its start time (field 22 of
// /proc/<pid>/stat): a pid that was reused by another process is never
// signalled.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace gpuslice::daemon {

struct ProcessRef {
  pid_t pid = 0;
  uint64_t start_time = 0;  // 0: unknown, and then the process is never signalled

  bool operator==(const ProcessRef&) const = default;
  bool operator<(const ProcessRef& o) const {
    return pid != o.pid ? pid < o.pid : start_time < o.start_time;
  }
};

class Signaller {
 public:
  virtual ~Signaller() = default;
  // Sends `sig` to `process`. False (nothing sent) when the pid is not > 0,
  // names the caller itself, or no longer names that process.
  virtual bool Send(const ProcessRef& process, int sig) = 0;
};

// The production signaller: a pidfd is opened on the pid, the start time is
// read after that (the pidfd pins one process), and the signal goes through
// pidfd_send_signal only if it matches. Never signals pid <= 1 or the daemon.
class PidfdSignaller final : public Signaller {
 public:
  explicit PidfdSignaller(std::string proc_root = "/proc");
  bool Send(const ProcessRef& process, int sig) override;

 private:
  const std::string proc_root_;
};

}  // namespace gpuslice::daemon
