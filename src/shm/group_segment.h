// GroupSegment: one process's handle on a group's shared segment
// (include/gpuslice/group_segment.h has the layout and its invariants).
//
// The handle owns the file: opening, validating and removing it (every
// system call through a SegmentOs), the devices, the limits, the change
// word, the members' slots and the ledger lock that guards them. Each
// member holds a slot for its whole life; a dead member's slot and memory
// are reclaimed by ReapDead() (run by the group controller, by a member
// whose allocation would fail, by a joining member and by `gpuslice
// status`). The rest is reached through views, each a narrow interface to
// one part of the layout:
//  - ledger():   the memory ledger (memory_ledger.h);
//  - schedule(): what gpusliced's scheduler sets (compute_schedule.h);
//  - usage():    what members record of their launches and the controller
//                publishes back, and the launch path's budget (compute_usage.h);
//  - control():  the controller role and gpusliced's claim (control_role.h).
//
// Thread-safe: every method may be called from any thread (the controller
// role: see control_role.h). Not fork-safe by itself: a forked child must
// call ReopenAfterFork() before anything else.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpuslice/group_segment.h"
#include "shm/compute_schedule.h"
#include "shm/compute_usage.h"
#include "shm/control_role.h"
#include "shm/memory_ledger.h"
#include "shm/segment_os.h"

namespace gpuslice {
namespace testing {
struct LedgerLock;  // ledger_eviction_testing.h
}  // namespace testing

// A reading of a group segment, field by field (each field atomically; not
// one transaction: a member may allocate between two fields). What readers
// (status, the daemon's metrics) get instead of the raw layout.
struct GroupSnapshot {
  struct Device {
    int index;                                        // in the segment (not a CUDA ordinal)
    std::string uuid;                                 // "GPU-…"
    uint64_t memory_used, memory_limit, memory_peak;  // bytes; limit kUnlimitedBytes: none
    uint64_t alloc_failures;                          // allocations refused for the limit
    uint32_t compute_limit;                           // percent; kUnlimitedPercent: none
    uint32_t grant_bp;      // gpusliced's scheduler's grant, basis points; 0: none
    int64_t burst_ns;       // the scheduler's burst tolerance; 0: the default
    int32_t share_bp;       // measured share of the device, basis points; -1: never measured
    int64_t charge_ns;      // estimated device time of one launch; 0: not known yet
    uint64_t launches;      // launches paced
    uint64_t throttled;     // launches that waited for budget
    uint64_t throttled_ns;  // their total wait
  };
  struct Member {
    int slot;
    int32_t pid;  // in the member's own pid namespace
    std::string name;
    std::vector<uint64_t> memory;  // bytes per device, parallel to `devices`
  };
  std::string group;
  bool paused = false;  // launches wait (gpusliced paused the group)
  // Holders of the ledger lock evicted for holding it past a locker's
  // deadline (stopped, hung or dead inside; GroupSegmentLayout::ledger_evictions).
  uint64_t ledger_evictions = 0;
  std::vector<Device> devices;
  std::vector<Member> members;  // live ones (SlotLive), by slot
};

// Idle time after which a group's segment is removed (by `gpuslice status
// --gc` and by gpusliced): no process attached and no controller heartbeat.
inline constexpr int64_t kDefaultGroupGcGraceS = 600;

// How long a locker of a group's ledger lock waits for one holder before it
// evicts it (include/gpuslice/group_segment.h, "Concurrency"): far beyond
// the sections' microseconds, short enough that a member stopped (SIGSTOP),
// hung or killed inside delays the others' joins and reaping by little.
inline constexpr int64_t kLedgerLockDeadlineNs = 200'000'000;

class GroupSegment {
 public:
  // Opens the segment of `group` under `dir`, creating both when `create`.
  // A file with a wrong magic, version or size is re-initialised (a crashed
  // creator's leftovers are never trusted). Fails with kNotFound when the
  // group has no segment and `create` is false.
  //
  // With `create` the handle is *attached*: it holds the group's attach lock
  // until it is destroyed (or its process dies), which keeps the segment from
  // being collected (RemoveIfAbandoned). Members open with `create`;
  // observers (status, limit set, the daemon's readers) without.
  //
  // Every system call goes through `os` (segment_os.h; a test's may fail
  // any of them), which must outlive the handle.
  static StatusOr<std::unique_ptr<GroupSegment>> Open(const std::string& dir,
                                                      std::string_view group, bool create,
                                                      SegmentOs& os = SegmentOs::Real());

  // The file of `group` under `dir`.
  static std::string PathFor(const std::string& dir, std::string_view group);

  // Group ids that have a segment under `dir` (sorted; empty if none).
  static std::vector<std::string> ListGroups(const std::string& dir);

  ~GroupSegment();
  GroupSegment(const GroupSegment&) = delete;
  GroupSegment& operator=(const GroupSegment&) = delete;

  const std::string& group() const { return group_; }
  const std::string& path() const { return path_; }

  // ---- views (valid while this handle is) ----
  //
  // A const handle still gives writable views: constness is the handle's
  // (its file description, its slot, its role), not the shared mapping's,
  // which every member writes.

  MemoryLedger ledger() const { return {*this, *layout_}; }
  ComputeSchedule schedule() const { return ComputeSchedule(*layout_); }
  ComputeUsage usage() const { return ComputeUsage(*layout_); }
  ControlRole& control() { return control_; }
  const ControlRole& control() const { return control_; }

  // ---- devices ----

  // The entry for the GPU with `uuid`, added if new. kResourceExhausted when
  // the segment has no room for another device.
  StatusOr<int> AttachDevice(std::string_view uuid);
  // Index of `uuid`, or -1.
  int FindDevice(std::string_view uuid) const;
  int device_count() const;
  // The UUID of `dev` ("GPU-…"). REQUIRES: dev < device_count().
  std::string DeviceUuid(int dev) const;

  // ---- limits ----

  // Lowers the memory limit of `dev` to `bytes` (no effect if already lower).
  void LowerMemoryLimit(int dev, uint64_t bytes);
  // Sets the memory limit of `dev` (may raise it); kUnlimitedBytes clears it.
  // Usage above a lowered limit stays; new allocations fail until it drops.
  void SetMemoryLimit(int dev, uint64_t bytes);
  void LowerComputeLimit(int dev, uint32_t percent);
  void SetComputeLimit(int dev, uint32_t percent);
  uint64_t MemoryLimit(int dev) const;
  uint32_t ComputeLimit(int dev) const;

  // The word bumped on every change of the limits and of the schedule: read
  // it, decide, then WaitForChange(seen, timeout) sleeps until it moves or
  // the timeout passes (a futex on the shared segment; spurious returns are
  // allowed).
  uint32_t ChangeWord() const;
  void WaitForChange(uint32_t seen, int64_t timeout_ns) const;

  // ---- membership ----

  // Claims a free (or dead member's) slot for this process, reclaiming
  // whatever the dead member left. Returns the slot index; kResourceExhausted
  // when every slot belongs to a live member.
  StatusOr<int> Join(pid_t pid, uint64_t start_time, std::string_view name);
  // Gives back the slot and all memory it holds.
  void Leave(int slot);
  // True if a live process owns `slot`.
  bool SlotLive(int slot) const;
  // True if `pid` (as its own namespace numbers it) owns a live slot.
  bool IsLiveMember(int32_t pid) const;
  // Reclaims the slots of members that died; returns how many.
  int ReapDead() const;

  // A live member: its slot, its pid (in its own namespace) and when it
  // joined (CLOCK_MONOTONIC; tells a slot's successive owners apart).
  struct MemberRef {
    int slot;
    int32_t pid;
    int64_t joined_ns;
  };
  std::vector<MemberRef> Members() const;
  // The pids of the members' slots (in each member's own pid namespace).
  std::vector<int32_t> MemberPids() const;

  // ---- readers ----

  // Devices with their limits, usage and compute counters, and the live
  // members. Call ReapDead() first so that dead members' memory is not counted.
  GroupSnapshot Snapshot() const;

  // ---- liveness and collection ----

  // True if a process other than this handle's is attached to the group.
  bool HasAttachedProcess() const;
  // When the group was last known alive: its controller's last heartbeat, or
  // its creation if it never had one (CLOCK_MONOTONIC ns).
  int64_t LastAliveNs() const;

  // Removes the segment of `group` under `dir` if no process is attached to
  // it and it has not been alive for `grace_ns` at `now_ns` (CLOCK_MONOTONIC);
  // a file that is not a valid segment and has nobody attached is removed at
  // once. True if it removed the file; false if it is in use, within its
  // grace period, or already gone. Safe against concurrent attachers: they
  // either keep it alive or open a fresh segment after it is gone.
  static StatusOr<bool> RemoveIfAbandoned(const std::string& dir, std::string_view group,
                                          int64_t grace_ns, int64_t now_ns,
                                          SegmentOs& os = SegmentOs::Real());

  // ---- fork ----

  // In a forked child: drops the parent's locks from this handle (a new open
  // file description) so the child can join as itself. The mapping is kept.
  Status ReopenAfterFork();

 private:
  friend struct testing::LedgerLock;

  // A hold of the group's ledger lock, for its lifetime: what Join, Leave,
  // ReapDead and AttachDevice take inside. Taking it waits for the holder,
  // and evicts one that has held it past this handle's deadline (repairing
  // the ledger). Tests stage a member stopped or killed while it holds the
  // lock through testing::LedgerLock (ledger_eviction_testing.h).
  // Each hold has a token of its own: threads of one process may hold (and
  // wait for) the lock through one handle.
  class LedgerHold {
   public:
    explicit LedgerHold(const GroupSegment& segment);
    // Releases the lock unless this hold was evicted meanwhile (then it
    // logs that and changes nothing).
    ~LedgerHold();
    LedgerHold(const LedgerHold&) = delete;
    LedgerHold& operator=(const LedgerHold&) = delete;

    // True while the lock is still this hold's (not evicted).
    bool held() const;

   private:
    const GroupSegment& segment_;
    uint64_t token_;
  };

  GroupSegment(SegmentOs& os, std::string group, std::string path, int fd,
               GroupSegmentLayout* layout, bool attached);

  // Takes the ledger lock (waiting, or evicting a holder past the deadline)
  // and returns this acquisition's token; repairs the ledger first if a
  // holder was evicted or left it inside. UnlockLedger(token) releases it if
  // it is still the token's.
  uint64_t LockLedger() const;
  void UnlockLedger(uint64_t token) const;
  // Recomputes devices[].memory_used from the slots (invariant 1).
  void RepairLedger() const;
  // When no slot has an owner, zeroes devices[].memory_used: what is left is
  // orphaned by dead members. REQUIRES: the ledger is locked.
  void DropOrphanChargesLocked() const;
  // Frees slot `s` and its memory. REQUIRES: the ledger is locked and the
  // caller holds the slot's OFD lock.
  void ClearSlotLocked(int s) const;
  // Bumps the limits' generation, then signals the change (segment_fields.h).
  void BumpLimits();

  SegmentOs& os_;
  std::string group_;
  std::string path_;
  int fd_;
  GroupSegmentLayout* layout_;
  bool attached_;      // holds the attach lock (opened with `create`)
  int own_slot_ = -1;  // the slot this handle's fd holds a lock on
  // How long a locker through this handle waits for one holder before it
  // evicts it (tests set it short).
  std::atomic<int64_t> ledger_deadline_ns_{kLedgerLockDeadlineNs};
  ControlRole control_;  // on fd_ (declared before it)
};

}  // namespace gpuslice
