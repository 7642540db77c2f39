#include "shm/control_role.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "shm/segment_fields.h"

namespace gpuslice {

using segment_fields::Atomic;
using segment_fields::ErrnoText;
using segment_fields::Load;
using segment_fields::OfdLock;

void ControlRole::Took() {
  held_ = true;
  Atomic(layout_.controller_pid).store(getpid());
}

bool ControlRole::TryBecomeController() {
  if (held_) return true;
  if (OfdLock(os_, fd_, kControllerLockOffset, F_WRLCK, false) != 0) return false;
  Took();
  return true;
}

Status ControlRole::WaitToBecomeController() {
  if (held_) return Status::Ok();
  if (int err = OfdLock(os_, fd_, kControllerLockOffset, F_WRLCK, true); err != 0) {
    return Unavailable(ErrnoText("cannot take the controller lock of " + path_, err));
  }
  Took();
  return Status::Ok();
}

void ControlRole::ResignController() {
  if (!held_) return;
  int32_t me = getpid();
  Atomic(layout_.controller_pid).compare_exchange_strong(me, 0);
  OfdLock(os_, fd_, kControllerLockOffset, F_UNLCK, false);
  held_ = false;
}

void ControlRole::Beat(int64_t now_ns) {
  Atomic(layout_.controller_heartbeat_ns).store(now_ns, std::memory_order_release);
}

void ControlRole::BeatAsDaemon(pid_t pid, int64_t now_ns) {
  Atomic(layout_.daemon_pid).store(pid);
  Atomic(layout_.daemon_heartbeat_ns).store(now_ns, std::memory_order_release);
}

bool ControlRole::DaemonClaims(int64_t now_ns) const {
  if (Load(layout_.daemon_pid) == 0) return false;
  return now_ns - Load(layout_.daemon_heartbeat_ns) < kDaemonStaleNs;
}

bool ControlRole::ControllerIsDaemon() const {
  const int32_t daemon = Load(layout_.daemon_pid);
  return daemon != 0 && Load(layout_.controller_pid) == daemon;
}

int32_t ControlRole::DaemonPid() const { return Load(layout_.daemon_pid); }

void ControlRole::EndDaemonClaim(pid_t pid) {
  int32_t expected = pid;
  Atomic(layout_.daemon_pid).compare_exchange_strong(expected, 0);
}

}  // namespace gpuslice
