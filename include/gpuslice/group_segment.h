// The group segment: one shared-memory file per group (a pod, or any set of
// processes sharing one quota), mapped by every member's limiter, by the CLI
// and by the daemon (DESIGN.md section 3). This header is the layout contract
// between those processes; src/shm/group_segment.h (the handle) and its
// views are the code that uses it.
//
// File: $GPUSLICE_SHM_DIR/group-<id>.v<kGroupSegmentVersion> (default dir
// /dev/shm/gpuslice). The layout version is part of the name, so processes
// built with different layouts never share a file.
//
// Layout rules: fixed-width fields, trivially copyable, magic + version + size
// first. Fields shared between processes are accessed with std::atomic_ref.
//
// Concurrency:
//  - Memory accounting is lock-free. A charge adds to
//    GroupDevice::memory_used with a compare-and-swap that checks the limit
//    (concurrent members never overshoot), then to its ProcessSlot::memory;
//    a release takes from the slot, then from memory_used. So memory_used
//    never falls below the slots' sum (invariant 1), and a member killed
//    between its two steps leaves that one charge counted, never less.
//  - The ledger lock (`ledger_lock`, v8) serialises membership (joining a
//    slot, leaving, reaping a dead member's) and device entries. It is a
//    lease of our own, not a pthread mutex, so that no member can hold it
//    for ever: the word is 0 when free, else the holder's token (drawn with
//    a fetch_add on `ledger_tickets`, unique, never 0). A locker swaps 0 for
//    its token; while another token holds it, the locker waits (sleeping
//    20 us, doubling up to 1 ms) and remembers when it first saw that
//    token. Once the same token has held it longer than the locker's
//    deadline (200 ms by default; the sections take microseconds), the
//    locker evicts it: it swaps that token for its own (one evictor wins;
//    the others wait for the new token), counts `ledger_evictions` and
//    repairs the ledger. A holder that dies, is stopped (SIGSTOP) or hangs
//    inside is recovered this way, and only this way: nothing frees the
//    word of a holder that died. A holder stores its token in
//    `ledger_dirty` once it holds the lock and swaps it back to 0 before
//    releasing; a locker that finds it nonzero (a holder that died or was
//    evicted inside) repairs the ledger first. Releasing swaps the holder's
//    token for 0 and changes nothing if the token is no longer there (the
//    holder was evicted): a hold is never released by anyone but its
//    holder, and never freed by an evicted one. Repair: memory_used is
//    raised to the slots' sum if below it, never lowered while a member
//    lives, since the excess may be charges in flight. Whoever clears the
//    last owned slot (a member leaving, a dead one reaped) zeroes
//    memory_used: with no member nothing is in flight, and what is left was
//    orphaned by dead members. An evicted holder that resumes finishes its
//    section unlocked; the sections are written so that it can neither
//    overwrite a device entry another published nor leave memory_used below
//    the slots' sum (src/shm/group_segment.cc, "the ledger's lock").
//  - Slot ownership is an OFD lock (fcntl F_OFD_SETLK) on byte
//    kSlotLockOffset + slot index of the file: held by the owner for its whole
//    life and dropped by the kernel when it dies, so liveness is checked
//    without pids (which differ between the containers of a pod). Whoever
//    takes a slot's lock may reclaim what a dead owner left.
//  - The group controller (DESIGN.md section 3) is whoever holds the OFD lock
//    on byte kControllerLockOffset. gpusliced claims a group by beating
//    daemon_heartbeat_ns; a member holding the role gives it up while that
//    beat is fresh (kDaemonStaleNs), and takes it back when it goes stale.
//  - Every process attached to the group (a limiter, from its first call to
//    its exit) holds a shared OFD lock on byte kAttachLockOffset. Removing a
//    segment takes that byte exclusively first, so a segment is only ever
//    unlinked when nobody is attached; an attacher that finds the file it
//    opened already unlinked opens the path again.
//  - Limits are written by any member at attach time (lowering only), by
//    `gpuslice limit set`, or by the daemon, and read lock-free. Every
//    change bumps `change_word` and wakes its futex waiters.
//  - Compute budgets (DeviceCompute) are lock-free: members advance
//    `next_free_ns` with compare-and-swap on every launch of a paced device
//    and wait on `change_word` (futex, with a timeout) while it is ahead of
//    them; only the group controller writes the estimate fields.
//  - Each member's own compute (SlotCompute, v5; `queued` v6) is lock-free
//    too: the member counts its launches (and those still queued on the
//    GPU) and takes its bootstrap probes there; the group
//    controller writes its charge. A value read from it is bounded before use
//    (kMaxChargeNs): a member cannot make another wait forever.
//  - gpusliced's scheduler (DESIGN.md section 4) writes each device's
//    `compute_grant_bp`, `burst_ns`, `queue_ns` and turn plans and the
//    group's `paused` word; every change bumps `change_word`. The turn plans
//    are written under a sequence lock (`turn_seq` odd while they change;
//    readers retry). A member that takes the controller role back from a
//    daemon clears the grants, bursts, queue bounds and turns (self-control
//    paces by the limits alone); `paused` stays until someone resumes the
//    group.
//  - Each member's launch gate adds to its slot's `busy_ns` and
//    `busy_launches` (v7) what its timing markers measured: the device time
//    of launches whose stream had work throughout (shm/progress_watch.h),
//    and to `bound_ns`, `bound_launches` what they bounded.
//
// Invariants:
//  1. devices[d].memory_used >= sum over slots s of slots[s].memory[d], equal
//     whenever no member is between the two steps of a charge or release (a
//     member killed there leaves the difference: the group stays charged).
//  2. A slot with owner_pid == 0 holds no memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gpuslice/paths.h"  // kDefaultGroupSegmentDir, kEnvShmDir

namespace gpuslice {

inline constexpr uint64_t kGroupSegmentMagic = 0x5052475f534c5047;  // "GPLS_GRP"
inline constexpr uint32_t kGroupSegmentVersion = 8;

inline constexpr int kGroupMaxDevices = 16;
inline constexpr int kGroupMaxSlots = 256;
inline constexpr int kGroupIdBytes = 128;
inline constexpr int kUuidBytes = 48;

// A daemon heartbeat older than this no longer keeps members from
// controlling their group (DESIGN.md section 3).
inline constexpr int64_t kDaemonStaleNs = 2'000'000'000;

// A compute grant in basis points (1/100 %) that covers the whole device.
inline constexpr uint32_t kFullGrantBp = 10000;

// Value of a limit that is not set.
inline constexpr uint64_t kUnlimitedBytes = UINT64_MAX;
inline constexpr uint32_t kUnlimitedPercent = 100;

// Byte offsets of the OFD locks (beyond the end of the data; locking bytes
// past EOF is allowed and touches no data).
inline constexpr int64_t kControllerLockOffset = 1 << 24;
inline constexpr int64_t kAttachLockOffset = kControllerLockOffset - 1;
inline constexpr int64_t kSlotLockOffset = kControllerLockOffset + 1;

struct GroupSegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t size;       // sizeof(GroupSegmentLayout)
  int64_t created_ns;  // CLOCK_MONOTONIC (as every *_ns time of the segment)
  uint32_t ready;      // 1 once initialised; readers ignore a segment with 0
  uint32_t reserved;
};

// One batch group's turns on a device (DESIGN.md section 4): while gpusliced
// has batch groups take turns, the group may have work queued on the device
// only within [epoch_ns + k x period_ns + begin_ns, ... + length_ns) for every
// cycle k (CLOCK_MONOTONIC), and only work that completes by the turn's end.
// period_ns 0: no turns (the group is paced by its rate); length_ns >=
// period_ns: every moment is its turn.
struct TurnPlan {
  int64_t epoch_ns;
  int64_t period_ns;
  int64_t begin_ns;   // 0 <= begin_ns < period_ns
  int64_t length_ns;  // 0 < length_ns
};

// The compute budget of one device of the group (DESIGN.md sections 2, 3):
// a pacer in the manner of the generic cell rate algorithm. Each admitted
// launch pushes `next_free_ns` forward by its charge stretched by the
// group's rate on the device (charge_ns x 10000 / rate_bp of wall time, the
// rate being the lower of compute_limit and compute_grant_bp); a launch is
// admitted while next_free_ns <= now + the burst tolerance, otherwise its
// thread waits until that holds. Device time is estimated per launch by the
// group controller, for each member on its own (SlotCompute): members whose
// kernels differ are each charged what theirs cost. Under gpusliced a batch
// group may instead take turns (TurnPlan): the rate is then its turns'.
struct alignas(64) DeviceCompute {
  // Written by every admitted launch of every member (a cache line of its own).
  int64_t next_free_ns;  // CLOCK_MONOTONIC time the budget is next free
  uint64_t launches;     // launches admitted on this device
  uint64_t waits;        // launches that had to wait for budget (or for their turn)
  uint64_t wait_ns;      // total time those launches waited
  // Under turns: launches its turn's end cut off (they came within the turn
  // and would not complete by its end): the group would have used more.
  uint64_t cut_off;
  uint8_t pad0[24];
  // Written by the group controller.
  int64_t charge_ns;  // the group's mean device time of one launch (readers); 0: not known yet
  // Written by gpusliced's scheduler: the most work (device time) one stream
  // of the group may have queued; a stream that reaches it drains before
  // more is admitted (batch groups beside a latency group: the device
  // switches to the latency group when the batch context runs dry). 0: no
  // such bound.
  int64_t queue_ns;
  uint32_t share_bp;  // what the group ran of the device, in basis points (1/100 %)
  uint32_t reserved1;
  int64_t measured_at_ns;  // CLOCK_MONOTONIC of the last estimate; 0: never
  // Written by gpusliced's scheduler: the burst tolerance (how far ahead of
  // now the group may have admitted work); 0: control::kPacerBurstNs.
  int64_t burst_ns;
  uint8_t pad1[24];
  // Written by gpusliced's scheduler under the sequence lock `turn_seq`:
  // turns[0] is in effect until turns[1].epoch_ns, turns[1] from then on
  // (a new plan starts at a cycle boundary of the old one).
  uint32_t turn_seq;
  uint32_t reserved2;
  TurnPlan turns[2];
  uint8_t pad2[56];
};

// One physical GPU, identified by UUID (CUDA ordinals differ between members
// with different CUDA_VISIBLE_DEVICES).
struct GroupDevice {
  char uuid[kUuidBytes];    // "GPU-…", NUL-terminated; empty: entry unused
  uint64_t memory_limit;    // bytes; kUnlimitedBytes when unset
  uint64_t memory_used;     // bytes charged to the group (compare-and-swap)
  uint64_t memory_peak;     // highest memory_used seen
  uint64_t alloc_failures;  // allocations refused for the limit
  uint32_t compute_limit;   // percent 1..100; kUnlimitedPercent when unset
  // gpusliced's scheduler: the group's current share of the device in basis
  // points, 1..kFullGrantBp; 0: no grant (the limit alone paces).
  uint32_t compute_grant_bp;
  DeviceCompute compute;
};

struct ProcessSlot {
  int32_t owner_pid;  // pid in the owner's namespace; 0: free
  uint32_t reserved0;
  uint64_t start_time;                // /proc/<pid>/stat start time of the owner
  int64_t joined_ns;                  // CLOCK_MONOTONIC
  char name[16];                      // comm of the owner
  uint64_t memory[kGroupMaxDevices];  // bytes charged by this slot (atomic; see memory_used)
};

// Longest charge of one launch the launch path accepts from the segment (a
// larger value is taken as this): a graph of many long kernels stays below
// it, a hostile value cannot stop a member for longer.
inline constexpr int64_t kMaxChargeNs = 10'000'000'000;

// One member's compute on one device (v5; `queued` v6; `busy_*`, `bound_*` v7).
struct SlotCompute {
  uint64_t launches;  // launches the member made on the device (written by the member)
  int64_t charge_ns;  // device time of one of its launches (the group controller); 0: not known
  int64_t probe_ns;   // bootstrap: least launch-to-completion time it measured; 0: none
  uint32_t probes;    // bootstrap probes it took
  // Threads of the member now waiting in the launch gate (paced, held or
  // paused) on the device: written by the member as a wait starts and ends,
  // read by the scheduler, so that a member stuck in a long wait is seen as
  // held back, not idle. Cleared with the slot (a member killed mid-wait).
  uint32_t waiting;
  // Of `launches`, those the member has not yet seen complete (the launch
  // path's markers, shm/progress_watch.h): the group controller counts a
  // launch when the GPU has run it (launches - queued), the time its busy
  // time arrives, not when it was admitted (v6). Written by the member (added
  // as a watched launch is made, taken as it is seen complete); 0 for
  // launches not watched (counted when admitted).
  uint32_t queued;
  // The least time of one of the member's last 64 bracketed launches
  // (bound_ns below), ns, at most 2^32 - 1; 0: none. Written by the member;
  // how the scheduler tells a latency group that would take much of the
  // device from one that would not (a launch that found the device free
  // took about its own time).
  uint32_t bound_floor_ns;
  // What the member's timing markers measured (v7, shm/progress_watch.h):
  // the device time of launches whose stream had work throughout (its
  // launch gate adds to both as their markers complete), and how many
  // launches that was. Monotonic; the group controller's evidence of the
  // member's cost per launch.
  uint64_t busy_ns;
  uint64_t busy_launches;
  // The same for launches bracketed while another group's context may have
  // run meanwhile (v7): each one's time from its queueing to its end, an
  // upper bound of its device time.
  uint64_t bound_ns;
  uint64_t bound_launches;
};

struct GroupSegmentLayout {
  GroupSegmentHeader header;
  char group[kGroupIdBytes];  // NUL-terminated group id
  // The ledger lock (v8; "Concurrency" above), a cache line of its own.
  alignas(64) uint64_t ledger_lock;   // 0: free; otherwise the holder's token
  uint64_t ledger_tickets;            // tokens drawn so far (the next is this + 1)
  uint64_t ledger_dirty;              // the token of a holder inside; 0: none
  uint64_t ledger_evictions;          // holders evicted for holding it past a deadline
  alignas(64) uint32_t device_count;  // entries of devices[] in use
  uint32_t change_word;               // bumped (and futex-woken) on every limit change
  uint64_t limits_generation;         // bumped on every limit change
  uint32_t compute_limited;  // bit d set: launches on devices[d] take the paced path (a compute
                             // limit below 100, a grant below the whole device, or `paused`)
  uint32_t paused;           // nonzero: gpusliced paused the group; launches wait
  int64_t controller_heartbeat_ns;  // last beat of the group controller
  int32_t controller_pid;           // its pid, 0 if none
  int32_t daemon_pid;               // gpusliced, while it controls (or claims) the group
  int64_t daemon_heartbeat_ns;      // its last beat; members yield to a fresh one
  uint64_t reserved2;
  GroupDevice devices[kGroupMaxDevices];
  ProcessSlot slots[kGroupMaxSlots];
  // slot_compute[s][d]: slot s's member on devices[d]; cleared with the slot.
  SlotCompute slot_compute[kGroupMaxSlots][kGroupMaxDevices];
};

static_assert(std::is_trivially_copyable_v<GroupSegmentLayout>);
static_assert(sizeof(GroupSegmentHeader) == 32);
static_assert(sizeof(DeviceCompute) == 256);
static_assert(sizeof(GroupDevice) == 384);
static_assert(sizeof(ProcessSlot) == 168);
static_assert(sizeof(SlotCompute) == 72);
static_assert(offsetof(GroupSegmentLayout, device_count) -
                      offsetof(GroupSegmentLayout, ledger_lock) ==
                  64,
              "the ledger lock has its 64-byte line");
static_assert(sizeof(GroupSegmentLayout) < kAttachLockOffset);

}  // namespace gpuslice
