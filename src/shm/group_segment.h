// GroupSegment: one process's handle on a group's shared segment
// (include/gpuslice/group_segment.h has the layout and its invariants).
//
// It is the group's memory ledger: Reserve() charges bytes to a device of the
// group all-or-nothing against the limit, so concurrent allocations in any
// number of processes never overshoot; Release() gives them back. Both are
// lock-free (one compare-and-swap on the device's count, one on the slot's;
// the *Device / *OwnSlot forms split the two for a member whose own lock
// orders its slot's changes). Each member
// holds a slot for its whole life; a dead member's slot and memory are
// reclaimed by ReapDead() (run by the group controller, by a member whose
// allocation would fail, by a joining member and by `gpuslice status`).
//
// Thread-safe: every method may be called from any thread. Not fork-safe by
// itself: a forked child must call ReopenAfterFork() before anything else.
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
#include "shm/launch_pacer.h"
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

// The launch path's handle on one device's compute budget (DeviceCompute in
// include/gpuslice/group_segment.h; the arithmetic is launch_pacer.h) and on
// the calling member's own compute there (SlotCompute: its launch count, its
// charge, its bootstrap). Every operation is one atomic step on the shared
// fields, safe from any thread of any member.
class ComputeBudget {
 public:
  ComputeBudget(DeviceCompute& c, SlotCompute& member) : c_(c), m_(member) {}

  // The fields it works on (a stream's watch keeps them: StreamBacklog).
  DeviceCompute& device() const { return c_; }
  SlotCompute& member() const { return m_; }

  // The group controller's estimate of one of this member's launches, at
  // most kMaxChargeNs; 0: none yet.
  int64_t charge_ns() const { return Bounded(Load(m_.charge_ns)); }

  // Bootstrap (no estimate yet): true if this launch is to be measured: one
  // of the member's first `probes` launches, or any while it has no
  // measurement.
  bool TakeProbe(uint32_t probes) {
    return std::atomic_ref<uint32_t>(m_.probes).fetch_add(1) < probes || probe_ns() == 0;
  }
  // The least launch-to-completion time the member measured (at most
  // kMaxChargeNs); 0: none.
  int64_t probe_ns() const { return Bounded(Load(m_.probe_ns)); }
  // Records a measurement (keeps the least).
  void RecordProbe(int64_t measured_ns) {
    std::atomic_ref<int64_t> f(m_.probe_ns);
    int64_t seen = f.load();
    while ((seen <= 0 || measured_ns < seen) && !f.compare_exchange_weak(seen, measured_ns)) {
    }
  }

  // Admits a launch of `interval_ns` of wall time at `now_ns` within
  // `burst_ns`: 0 if admitted (the budget advanced), else the nanoseconds to
  // wait before trying again (nothing changed).
  int64_t TryAdmit(int64_t now_ns, int64_t interval_ns, int64_t burst_ns) {
    return gpuslice::TryAdmit(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, interval_ns,
                              burst_ns);
  }
  // How far the budget runs ahead of `now_ns` (negative: behind).
  int64_t AheadBy(int64_t now_ns) const {
    return std::atomic_ref<int64_t>(c_.next_free_ns).load(std::memory_order_relaxed) - now_ns;
  }
  // Pulls the budget back to at most `max_ahead_ns` past `now_ns`
  // (launch_pacer.h ClampAhead); true if it did.
  bool ClampAhead(int64_t now_ns, int64_t max_ahead_ns) {
    return gpuslice::ClampAhead(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, max_ahead_ns);
  }
  // Raises the budget to at least `ahead_ns` past `now_ns` (launch_pacer.h
  // RaiseBehind: a launch waiting for its stream's queue banks nothing).
  void RaiseBehind(int64_t now_ns, int64_t ahead_ns) {
    gpuslice::RaiseBehind(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, ahead_ns);
  }
  // Charges `interval_ns` from `now_ns` whatever the budget holds (a launch
  // measured after the fact).
  void ChargeAfter(int64_t now_ns, int64_t interval_ns) {
    gpuslice::ChargeAfter(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, interval_ns);
  }

  // Counters readers, the controller and the scheduler see: the group's and
  // the member's launches.
  void CountLaunch() {
    std::atomic_ref<uint64_t>(c_.launches).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(m_.launches).fetch_add(1, std::memory_order_relaxed);
  }
  // `n` launches of the member just made are queued on the GPU (watched: the
  // member will see them complete), or `n` of those were seen complete: the
  // controller counts a launch when it completes (SlotCompute::queued).
  void Queued(uint32_t n) {
    std::atomic_ref<uint32_t>(m_.queued).fetch_add(n, std::memory_order_relaxed);
  }
  void Completed(uint64_t n);
  // The member's timing markers measured `busy_ns` of device time for
  // `launches` launches (SlotCompute::busy_ns).
  void AddBusy(int64_t busy_ns, uint64_t launches) {
    Add(m_.busy_ns, m_.busy_launches, busy_ns, launches);
  }
  // ...and bounded `bound_ns` for `launches` launches (SlotCompute::bound_ns).
  void AddBound(int64_t bound_ns, uint64_t launches) {
    Add(m_.bound_ns, m_.bound_launches, bound_ns, launches);
  }
  // The least of the member's last bracketed launches (SlotCompute::
  // bound_floor_ns); 0 or less: leaves it.
  void SetBoundFloor(int64_t floor_ns) {
    if (floor_ns <= 0) return;
    std::atomic_ref<uint32_t>(m_.bound_floor_ns)
        .store(static_cast<uint32_t>(std::min<int64_t>(floor_ns, UINT32_MAX)),
               std::memory_order_relaxed);
  }
  // A thread of the member starts / ends a wait in the launch gate: the
  // scheduler sees the member held back while it waits, not only once the
  // wait ends (a wait can last seconds). Every BeginWait is paired with one
  // EndWait.
  void BeginWait() {
    std::atomic_ref<uint32_t>(m_.waiting).fetch_add(1, std::memory_order_relaxed);
  }
  void EndWait() { std::atomic_ref<uint32_t>(m_.waiting).fetch_sub(1, std::memory_order_relaxed); }
  // A launch within its group's turn that the turn's end cut off.
  void CountCutOff() {
    std::atomic_ref<uint64_t>(c_.cut_off).fetch_add(1, std::memory_order_relaxed);
  }
  void CountWait(int64_t waited_ns) {
    std::atomic_ref<uint64_t>(c_.waits).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(c_.wait_ns)
        .fetch_add(static_cast<uint64_t>(waited_ns), std::memory_order_relaxed);
  }

 private:
  template <typename T>
  static T Load(const T& field) {
    return std::atomic_ref<const T>(field).load(std::memory_order_acquire);
  }
  static void Add(uint64_t& ns_field, uint64_t& launches_field, int64_t ns, uint64_t launches) {
    if (launches == 0 || ns <= 0) return;
    std::atomic_ref<uint64_t>(ns_field).fetch_add(static_cast<uint64_t>(ns),
                                                  std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(launches_field).fetch_add(launches, std::memory_order_relaxed);
  }
  // A charge read from the segment (any member may write it): never
  // negative, never above kMaxChargeNs.
  static int64_t Bounded(int64_t ns) { return std::clamp<int64_t>(ns, 0, kMaxChargeNs); }
  DeviceCompute& c_;
  SlotCompute& m_;
};

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

  // ---- the ledger lock ----

  // ---- devices ----

  // The entry for the GPU with `uuid`, added if new. kResourceExhausted when
  // the segment has no room for another device.
  StatusOr<int> AttachDevice(std::string_view uuid);
  // Index of `uuid`, or -1.
  int FindDevice(std::string_view uuid) const;
  int device_count() const;

  // Lowers the memory limit of `dev` to `bytes` (no effect if already lower).
  void LowerMemoryLimit(int dev, uint64_t bytes);
  // Sets the memory limit of `dev` (may raise it); kUnlimitedBytes clears it.
  // Usage above a lowered limit stays; new allocations fail until it drops.
  void SetMemoryLimit(int dev, uint64_t bytes);
  void LowerComputeLimit(int dev, uint32_t percent);
  void SetComputeLimit(int dev, uint32_t percent);

  // Bit d set: launches on device d take the paced path: it has a compute
  // limit below 100 or a grant below the whole device, or the group is
  // paused (one load; the launch path's test for "nothing to pace").
  uint32_t ComputeLimitedMask() const {
    return std::atomic_ref<uint32_t>(layout_->compute_limited).load(std::memory_order_acquire);
  }
  // The word ComputeLimitedMask() reads, for a reader that keeps its address
  // (the limiter's launch fast path); alive as long as the mapping.
  uint32_t* ComputeLimitedWord() { return &layout_->compute_limited; }
  // The compute budget of `dev` for the launch path of the member in `slot`
  // (a slot this process joined). REQUIRES: 0 <= slot < kGroupMaxSlots.
  ComputeBudget Budget(int dev, int slot) {
    return {layout_->devices[dev].compute, layout_->slot_compute[slot][dev]};
  }
  // The UUID of `dev` ("GPU-…"). REQUIRES: dev < device_count().
  std::string DeviceUuid(int dev) const;

  // ---- gpusliced's scheduler (DESIGN.md section 4) ----

  // Sets the group's share of `dev` in basis points (1..kFullGrantBp; 0: no
  // grant, the limit alone paces). Launches are paced at the lower of the
  // limit and the grant.
  void SetComputeGrant(int dev, uint32_t grant_bp);
  uint32_t ComputeGrant(int dev) const;
  // Sets how far ahead of now the group may have admitted work on `dev`
  // (0: kPacerBurstNs).
  void SetComputeBurst(int dev, int64_t burst_ns);
  int64_t ComputeBurst(int dev) const;
  // Sets the most work one stream of the group may have queued on `dev`
  // (DeviceCompute::queue_ns; 0: no such bound).
  void SetQueueBound(int dev, int64_t queue_ns);
  int64_t QueueBound(int dev) const;
  // Sets the group's turns on `dev`: `current` until `next.epoch_ns`, `next`
  // from then on (next.epoch_ns 0: `current` only). A plan with period 0: no
  // turns. Wakes the waiting launches.
  void SetTurns(int dev, const TurnPlan& current, const TurnPlan& next);
  // The plan in effect on `dev` at `now_ns` (period 0: no turns). Never waits
  // long: a plan being written for too long (a writer that died inside) reads
  // as no turns.
  TurnPlan TurnAt(int dev, int64_t now_ns) const;
  // Both plans as written (TurnAt's sources).
  std::pair<TurnPlan, TurnPlan> Turns(int dev) const;
  // Pauses (launches on every device wait; memory is kept) or resumes the
  // group; resuming wakes the waiting launches at once.
  void SetPaused(bool paused);
  bool Paused() const;
  // Clears every grant, burst, queue bound and turn plan (a member taking
  // control back from the daemon: self-control paces by the limits alone).
  // `paused` stays.
  void ClearSchedule();
  // The rate launches on `dev` are paced at, in basis points of the device:
  // the lower of the compute limit and the grant; kFullGrantBp: not paced.
  uint32_t PacedRateBp(int dev) const;

  // What the scheduler reads of one device (each field atomically).
  struct ComputeCounters {
    uint64_t launches;     // admitted so far
    uint64_t waits;        // launches that waited for budget (held back by the rate)
    uint64_t wait_ns;      // their total wait
    uint64_t cut_off;      // launches their turn's end cut off (DeviceCompute::cut_off)
    int64_t charge_ns;     // estimated device time of one launch; 0: not known yet
    int32_t share_bp;      // measured share; -1: never measured
    uint32_t waiting;      // members with a thread waiting in the launch gate now
    int64_t next_free_ns;  // the budget: when the work admitted so far is paid for
  };
  ComputeCounters Counters(int dev) const;

  // ---- what the group controller reads and publishes ----

  // Launches admitted on `dev` so far (all members).
  uint64_t Launches(int dev) const;
  // Launches the member in `slot` made on `dev` since it joined.
  uint64_t SlotLaunches(int slot, int dev) const;
  // Of those, the launches not yet seen complete (SlotCompute::queued).
  uint32_t SlotQueued(int slot, int dev) const;
  // What the member's timing markers measured on `dev` so far
  // (SlotCompute::busy_ns, busy_launches).
  struct SlotBusy {
    uint64_t busy_ns = 0;
    uint64_t launches = 0;
    uint64_t bound_ns = 0;
    uint64_t bound_launches = 0;
    int64_t bound_floor_ns = 0;  // SlotCompute::bound_floor_ns
  };
  SlotBusy SlotBusyOf(int slot, int dev) const;
  // Publishes the charge of one launch of the member in `slot` on `dev`
  // (0: not known; the member measures its own launches meanwhile).
  void PublishSlotCharge(int slot, int dev, int64_t charge_ns);
  // The largest charge of any member on `dev`, or its bootstrap measurement
  // while it has no charge: the most one admitted launch can have advanced
  // the budget by, at a rate, once what was charged a measurement is
  // refined (a member's measurement no longer counts once its charge does).
  int64_t MaxMemberCharge(int dev) const;
  // The charge the launch path of `slot` uses on `dev` (bounded as read).
  int64_t SlotCharge(int slot, int dev) const;
  // A live member: its slot, its pid (in its own namespace) and when it
  // joined (CLOCK_MONOTONIC; tells a slot's successive owners apart).
  struct MemberRef {
    int slot;
    int32_t pid;
    int64_t joined_ns;
  };
  std::vector<MemberRef> Members() const;
  struct Estimate {
    int64_t charge_ns;       // device time of one launch; 0: not known (keep the last)
    int32_t share_bp;        // the group's share of the device, basis points; -1: unknown
    int64_t measured_at_ns;  // CLOCK_MONOTONIC
  };
  // Publishes the controller's estimate for `dev` to the launch path and to readers.
  void PublishEstimate(int dev, const Estimate& estimate);
  // The pids of the members' slots (in each member's own pid namespace).
  std::vector<int32_t> MemberPids() const;

  // ---- readers ----

  // Devices with their limits, usage and compute counters, and the live
  // members. Call ReapDead() first so that dead members' memory is not counted.
  GroupSnapshot Snapshot() const;

  // The word bumped on every limit change: read it, decide, then
  // WaitForChange(seen, timeout) sleeps until it moves or the timeout passes
  // (a futex on the shared segment; spurious returns are allowed).
  uint32_t ChangeWord() const;
  void WaitForChange(uint32_t seen, int64_t timeout_ns) const;

  uint64_t MemoryLimit(int dev) const;
  uint64_t MemoryUsed(int dev) const;
  uint32_t ComputeLimit(int dev) const;

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
  int ReapDead();

  // ---- memory ledger (slot: a slot this process joined) ----

  // Charges `bytes` to (`slot`, `dev`) if the group stays within the limit;
  // false, with nothing changed, otherwise.
  bool Reserve(int slot, int dev, uint64_t bytes);
  // Charges `bytes` whatever the limit (for memory the driver already handed
  // out, e.g. a context larger than estimated).
  void Charge(int slot, int dev, uint64_t bytes);
  // Returns `bytes` (at most what the slot holds on `dev`).
  void Release(int slot, int dev, uint64_t bytes);
  uint64_t SlotMemory(int slot, int dev) const;

  // The two steps of the above, for a member that keeps its own slot's count
  // in step with its own records under a lock of its own (the limiter's
  // Ledger): the device's count with one atomic operation, the slot's with a
  // plain load and store. A charge adds to the device first, a release takes
  // from the slot first (invariant 1).
  //
  // Charges `bytes` to `dev`'s count if the group stays within the limit
  // (false, nothing changed, otherwise); the slot is not touched.
  bool ReserveDevice(int dev, uint64_t bytes);
  // Charges `bytes` to `dev`'s count whatever the limit.
  void ChargeDevice(int dev, uint64_t bytes);
  // Takes up to `bytes` from `dev`'s count (never below 0).
  void ReleaseDevice(int dev, uint64_t bytes);
  // Adds `bytes` to the slot's count on `dev`. REQUIRES: this process owns
  // `slot`, and the caller serialises every change of it (no atomic
  // read-modify-write: only its owner changes a live slot).
  void AddToOwnSlot(int slot, int dev, uint64_t bytes);
  // Takes up to `bytes` from the slot's count on `dev`; returns what it took.
  // REQUIRES: as AddToOwnSlot.
  uint64_t TakeFromOwnSlot(int slot, int dev, uint64_t bytes);

  // ---- the group controller ----

  // Takes the controller role if nobody holds it; true if this handle holds it.
  bool TryBecomeController();
  // Blocks until this handle holds the controller role (or an error).
  Status WaitToBecomeController();
  // Gives up the controller role if this handle holds it.
  void ResignController();
  bool is_controller() const { return controller_; }
  // Records a heartbeat of the controller.
  void Beat(int64_t now_ns);

  // ---- gpusliced's claim (DESIGN.md section 3) ----

  // gpusliced (`pid`) controls, or wants to control, the group at `now_ns`.
  void BeatAsDaemon(pid_t pid, int64_t now_ns);
  // True if gpusliced beat within kDaemonStaleNs before `now_ns`.
  bool DaemonClaims(int64_t now_ns) const;
  // Ends `pid`'s claim (a daemon stopping cleanly): members take over at once.
  void EndDaemonClaim(pid_t pid);
  // True if the controller role is held by the daemon that claims the group.
  bool ControllerIsDaemon() const;
  // The pid of the daemon that claims (or last claimed) the group; 0: none.
  int32_t DaemonPid() const;

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
  void ClearSlotLocked(int s);
  // Bumps the limits' generation, then BumpChange().
  void BumpLimits();
  // Recomputes compute_limited, bumps change_word and wakes its waiters.
  void BumpChange();
  // What compute_limited should hold, from the limits, grants, turns and `paused`.
  uint32_t PacedMask() const;
  // Members with a thread in a launch-gate wait on `dev` (SlotCompute::waiting).
  uint32_t WaitingMembers(int dev) const;

  SegmentOs& os_;
  std::string group_;
  std::string path_;
  int fd_;
  GroupSegmentLayout* layout_;
  bool attached_;            // holds the attach lock (opened with `create`)
  int own_slot_ = -1;        // the slot this handle's fd holds a lock on
  bool controller_ = false;  // this handle holds the controller lock
  // How long a locker through this handle waits for one holder before it
  // evicts it (tests set it short).
  std::atomic<int64_t> ledger_deadline_ns_{kLedgerLockDeadlineNs};
};

}  // namespace gpuslice
