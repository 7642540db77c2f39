// For tests of the readers of GroupSnapshot::ledger_evictions (the daemon's
// API and metrics, `gpuslice status`): a real eviction, not a counter set by
// hand. A child process opens the group, dies holding its ledger lock, and
// the caller's handle, the next locker, evicts it once the deadline passes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "shm/group_segment.h"

namespace gpuslice::testing {

// Evicts one dead holder of `group`'s ledger lock (in `dir`) through
// `segment`, a handle on that group with a device attached. Returns whether
// the eviction was counted.
inline bool EvictADeadLedgerHolder(GroupSegment& segment, const std::string& dir,
                                   const std::string& group) {
  const uint64_t before = segment.Snapshot().ledger_evictions;
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    auto own = GroupSegment::Open(dir, group, false);
    if (!own.ok()) _exit(1);
    const GroupSegment::LedgerHold hold(**own);
    raise(SIGKILL);  // inside the hold
    _exit(2);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFSIGNALED(status)) return false;
  segment.set_ledger_deadline_ns(10'000'000);
  // Taking the lock (attaching a device does) finds the dead holder.
  if (!segment.AttachDevice("GPU-00000000-dead-0000-0000-000000000000").ok()) return false;
  return segment.Snapshot().ledger_evictions == before + 1;
}

}  // namespace gpuslice::testing
