// ShareScheduler: how one GPU's time is shared across the groups on it
// (DESIGN.md section 4, issue 13). gpusliced runs one per GPU, every
// kPeriod, over the groups it controls there; the result is written into each
// group's segment (compute grant, burst, paused), which the launch path paces
// by (min(limit, grant)).
//
// A grant is a share of the device's time in basis points (1/100 %): the
// group's launches are admitted at (estimated device time per launch) x
// 10000 / grant of wall time each.
//
// Inputs per group each tick: its schedule (request, limit, weight,
// priority, paused) and its counters: launches admitted, waits (the pacer
// held it back), the estimated charge per launch, and its NVML-measured share
// of the device. From them the scheduler derives what the group used
// (launch delta x charge, over about a second) and whether it wants more.
//
// Allocation, per tick, over a capacity K (basis points):
//   1. paused groups get nothing (their share is lent); a group that launched
//      nothing for a second is idle and keeps kIdleGrantBp outside K;
//   2. a group wants more if its waits grew within the last second, it is new
//      or resumed (its request stands for a second), its launch cost is not
//      known yet, or it is being squeezed (below). It can use up to its
//      limit; any other group what it uses x 1.1 + 1 point;
//   3. each group first gets min(request x K / 10000, what it can use);
//   4. the rest of K is water-filled by weight up to what each can use, so
//      grants never exceed limits and add up to at most K: an unused request
//      is lent at once and taken back the tick after its owner asks;
//   5. a GPU with one active group gives it its limit (no switching there).
//
// Capacity. A saturated GPU that switches between contexts cannot deliver
// 100 %: if grants add up to more than it can, the device's round-robin, not
// the grants, decides shares, and the group with the largest grant loses.
// Such a group is still paced (its launches are admitted at its grant and
// queue in the driver), so only the measured share tells: while a group
// that wants more runs less than the least grant it had over the last 1.5 s
// (the measurement trails by about a second), K drops; otherwise K creeps
// back up (1 point per second; down at that pace instead while the group with the largest due
// runs less than it launched of its due, by a quarter point plus half a percent: at the device's
// capacity the round-robin takes the missing time from the largest grant while the others run a
// little above theirs, which hides it from the total; a group that launched less than its due is
// no evidence), and while no group was squeezed for 1.5 s
// and some group is held back by its grant (the device is left idle while
// groups wait), by a sixteenth of what is left below 100 % per tick. A squeeze lowers K by half
// the worst shortfall per tick (at most a point), or, when every active group's share is
// evidence of the device (none short of CPU, repriced, taking turns, out of work or starting),
// straight to what they ran together plus the margin. Every 2 s of a squeeze the
// scheduler checks that it helped (the group's share grew by at least 0.3 points, or by K's drop /
// (8 x the active groups): its part of what the drop freed); if not, the group is taken to be out
// of work (a synchronous workload), K is given back, and the group no longer lowers it until it is
// held back or its share grows. Requests are scaled by K / 10000, so when every group saturates,
// shares of the time the device executes follow the requests. A group whose processes wait for a
// CPU (a host with far more runnable threads than cores) launches less than it is granted whatever
// the device can do: while it is short of CPU (Counters::cpu_wait_bp) its shortfall lowers
// nothing, so that a loaded host does not halve every grant for the seconds K takes to come back.
// K still rises meanwhile (work conservation: a device left idle while groups wait is the worse
// error); once the host has CPU again a K above what the device runs is lowered as usual.
// Likewise a group whose charge per launch moved by more than a fifth from one tick to the next
// (its cost estimator took a workload shift, or came back from one) was paced on another cost
// for a while: its shortfall lowers nothing for as long as its measured share trails.
// And a group whose measured share is coarse: NVML's window attribution (an H100 with driver
// r580 gives each ~200 ms window to one process, with the whole window's busy) makes its one-
// second share a handful of whole windows, tens of points off either way, and its cost estimate
// coarse too. Such a share (Counters::share_coarse, as its controller tells it) lowers nothing
// (neither a squeeze nor the creep) while it is, and for as long as the share trails after: K is
// then learned from the groups measured precisely, or stays where it is (up to 100 %), and the
// device's round-robin decides the last few points between saturating groups (on the H100 that
// gave train 78-80 % for its request of 70 and 92 % together, where a sinking K left a quarter
// of the device idle).
//
// Latency priority: while a latency group is active on the GPU, batch groups
// get a short burst (kBatchBurstWithLatencyNs) so their queues stay shallow,
// and take turns. The device time-slices contexts round-robin, and a context
// with a kernel queued (a long kernel stays queued for many slices) takes its
// slice before a latency kernel that arrives behind it: a latency kernel
// waits one slice per batch context with work queued, however short the
// batch queues are. So while a latency group is active and two or more batch
// groups are, only one batch group (the turn's holder) may launch; the others
// are held (Output::hold_until_ns = kHoldForever). The holder is paced at
// the batch groups' grants together (the pool; at most its limit), so the
// device is not left idle, and turns go, every kBatchTurnNs, to the group
// owed the most (each accrues its own grant per tick and is charged the pool
// for its turns): over a few turns each batch group gets its grant. A new
// holder waits (hold_until_ns) until the previous holder's queue has
// drained: until its budget's time (Counters::next_free_ns: what it was
// admitted is paid for at the pool's rate), and at least the queue its gate
// lets it keep (QueueBoundNs, shm/launch_pacer.h: the device may serve the
// holder more slowly than the pool's rate, the latency group's kernels and
// their switches coming first, and the gate bounds the queue's age, not the
// budget), at most kMaxHandoffNs; so that one batch context at most has work
// queued and a latency kernel waits for one slice at most.
//
// Time is injected (a Clock); Tick() does no I/O. Not thread-safe: one
// instance per GPU, on the daemon's control thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::control {

class ShareScheduler {
 public:
  static constexpr std::chrono::milliseconds kPeriod{100};
  // The burst batch groups get while a latency group is active.
  static constexpr int64_t kBatchBurstWithLatencyNs = 2'000'000;
  // How long a batch group's turn lasts beside a latency group, and the most
  // a new holder waits for the previous holder's queue to drain.
  static constexpr int64_t kBatchTurnNs = 200'000'000;
  static constexpr int64_t kMaxHandoffNs = 100'000'000;
  // What an idle group keeps (it gets its request back once it asks).
  static constexpr uint32_t kIdleGrantBp = 100;
  // Bounds of the learned capacity.
  static constexpr uint32_t kMinCapacityBp = 5000;
  static constexpr uint32_t kMaxCapacityBp = 10000;
  // From this much waiting for a CPU (Counters::cpu_wait_bp) a group is short
  // of CPU: its shortfall is not taken as the device's (no squeeze).
  static constexpr int32_t kCpuShortBp = 1000;

  // A group's launch counters on this GPU, monotonic over the segment's life
  // (GroupSegment::ComputeCounters).
  struct Counters {
    uint64_t launches = 0;   // launches admitted
    uint64_t waits = 0;      // times the launch path waited for its budget
    uint64_t wait_ns = 0;    // time spent waiting
    uint64_t charge_ns = 0;  // estimated device time per launch (0: unknown)
    // Its measured share of the device's time (NVML, over ~1 s); -1: not
    // measured. What the device ran, as opposed to what the group launched:
    // a group the device cannot serve queues launches it admitted.
    int32_t share_bp = -1;
    // How long its processes' threads waited for a CPU (runnable, not
    // running) over about the last second, summed over the threads, in basis
    // points of wall time; -1: not known. A group at or above kCpuShortBp is
    // short of CPU: it cannot launch what it is granted, and the device is
    // not what holds it back.
    int32_t cpu_wait_bp = -1;
    // Members with a thread waiting in the launch gate now (paced or held):
    // held back, whether or not a wait has ended since the last tick.
    uint32_t waiting = 0;
    // Its budget (CLOCK_MONOTONIC): the work it was admitted is paid for, at
    // its rate, by then; 0: not known.
    int64_t next_free_ns = 0;
    // share_bp is coarse: whole NVML windows, each given to one process
    // (NVML's window attribution, control/compute_controller.h; the
    // segment's share_windowed), right on average, tens of points off in any
    // second.
    bool share_coarse = false;
  };
  struct Input {
    std::string group;             // unique per GPU
    uint32_t request_percent = 0;  // 0..100
    uint32_t limit_percent = 100;  // 1..100
    uint32_t weight = 1;           // 1..1000 (0 is taken as 1)
    bool latency = false;
    bool paused = false;
    Counters counters;
  };
  struct Output {
    std::string group;
    uint32_t grant_bp = 0;  // 0 only for a paused group
    // The pacer's burst (kPacerBurstNs; shorter for batch groups beside a
    // latency group); set, it also bounds the group's queue in the driver
    // (shm/launch_pacer.h, BoundsQueueByAge). 0 only for a paused group.
    int64_t burst_ns = 0;
    // Launches wait until this CLOCK_MONOTONIC time (kHoldForever: until a
    // later tick says otherwise); 0: no hold.
    int64_t hold_until_ns = 0;
    bool paused = false;
    uint32_t used_bp = 0;     // share of the device it got (measured share, else launches)
    bool wants_more = false;  // held back by its grant this tick
  };

  // REQUIRES: `clock` outlives this.
  explicit ShareScheduler(const Clock& clock) : clock_(clock) {}

  // One allocation at the clock's now over `inputs` (the groups now on the
  // GPU; a group missing from them is forgotten, e.g. it died). Returns one
  // Output per input, in input order.
  std::vector<Output> Tick(const std::vector<Input>& inputs);

  // The capacity currently handed out, in basis points.
  uint32_t capacity_bp() const { return capacity_bp_; }

 private:
  struct Sample {
    int64_t t_ns;
    uint64_t launches;
  };
  struct State {
    std::deque<Sample> samples;  // newest last, the last kMaxWindow
    uint64_t waits = 0;
    uint32_t grant_bp = 0;
    std::deque<std::pair<int64_t, uint32_t>> grants;  // (time, grant), the last kDueWindowNs
    bool paused = false;
    int64_t fresh_until_ns = 0;
    int64_t known_since_ns = 0;
    int64_t last_held_ns = -1;  // new or resumed: its request stands until then
    // Squeeze tracking (see Capacity above).
    int64_t squeezed_since_ns = -1;
    uint32_t used_at_squeeze_bp = 0;
    uint32_t capacity_at_squeeze_bp = 0;
    bool demand_limited = false;
    uint32_t used_at_mark_bp = 0;
    int64_t cpu_short_until_ns = 0;  // short of CPU (or its share still shows it) until then
    // Its charge per launch as last seen, and until when its measured share
    // may still show a pacing on a charge that moved (see kRepriceRatio).
    uint64_t charge_ns = 0;
    int64_t repriced_until_ns = 0;
    // Batch turns beside a latency group: what it is owed (grant accrued per
    // tick, less the pool for each tick of its turns), in basis points x ticks.
    double owed = 0;
    int64_t turns_until_ns = 0;  // took turns recently: its own shortfall lowers nothing
    // Until when its measured share is coarse (Counters::share_coarse, and
    // the span the share trails by after).
    int64_t coarse_until_ns = 0;
  };

  // Per-group view of one tick.
  struct View {
    State* st;
    bool fresh;          // new or resumed within kFreshNs
    bool held;           // waits grew since the last tick, or a wait is under way
    bool launched;       // launched within the window
    uint32_t used;       // bp over the window
    uint32_t limit;      // bp
    uint32_t used_fast;  // bp over the last kFastWindowNs
    uint32_t executed;   // bp the device ran it (measured share, else `used`)
    bool active;
    bool wanting = false;
  };

  // Batch turns beside an active latency group (see the header): `batch`
  // indexes the batch groups that take turns; sets the holder's grant and
  // every one's hold in `out`.
  void TakeTurns(int64_t now, const std::vector<Input>& inputs, std::vector<View>& views,
                 const std::vector<size_t>& batch, std::vector<Output>& out);

  const Clock& clock_;
  std::map<std::string, State> states_;
  uint32_t capacity_bp_ = 9500;
  int64_t last_squeeze_ns_ = -1;  // when the capacity was last lowered
  // Batch turns: the holder ("" when none), since when, its pool, and until
  // when the holder waits for the last one's queue to drain.
  std::string turn_;
  int64_t turn_since_ns_ = 0;
  double turn_pool_bp_ = 0;  // what the holder is charged for the coming tick
  int64_t turn_hold_until_ns_ = 0;
};

}  // namespace gpuslice::control
