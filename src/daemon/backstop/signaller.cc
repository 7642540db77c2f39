#include "daemon/backstop/signaller.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/tenants/identity.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace gpuslice::daemon {

PidfdSignaller::PidfdSignaller(std::string proc_root) : proc_root_(std::move(proc_root)) {}

bool PidfdSignaller::Send(const ProcessRef& process, int sig) {
  // Never kill(-1), a process group, init or ourselves.
  if (process.pid <= 1 || process.pid == getpid() || process.start_time == 0) return false;
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, process.pid, 0));
  if (fd < 0) return false;
  bool sent = false;
  if (ReadStartTime(proc_root_, process.pid) == process.start_time) {
    sent = syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0;
  }
  close(fd);
  return sent;
}

}  // namespace gpuslice::daemon
