// For tests of the group segment's ledger lock (LedgerLock), and of the
// readers of GroupSnapshot::ledger_evictions (the daemon's
// API and metrics, `gpuslice status`): a real eviction, not a counter set by
// hand. A child process opens the group, dies holding its ledger lock, and
// the caller's handle, the next locker, evicts it once the deadline passes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <string>

#include "shm/group_segment.h"

namespace gpuslice::testing {

// The ledger lock as its tests reach it (GroupSegment's friend): a hold of
// it, and the deadline after which a locker evicts a holder.
struct LedgerLock {
  using Hold = GroupSegment::LedgerHold;
  static void SetDeadline(GroupSegment& segment, int64_t ns) {
    segment.ledger_deadline_ns_.store(ns, std::memory_order_relaxed);
  }
};

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
    const LedgerLock::Hold hold(**own);
    raise(SIGKILL);  // inside the hold
    _exit(2);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFSIGNALED(status)) return false;
  LedgerLock::SetDeadline(segment, 10'000'000);
  // Taking the lock (attaching a device does) finds the dead holder.
  if (!segment.AttachDevice("GPU-00000000-dead-0000-0000-000000000000").ok()) return false;
  return segment.Snapshot().ledger_evictions == before + 1;
}

}  // namespace gpuslice::testing
