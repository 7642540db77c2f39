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
// back up (1 point per second), and while no group was squeezed for 1.5 s
// and some group is held back by its grant (the device is left idle while
// groups wait), by a sixteenth of what is left below 100 % per tick. Every 2 s of a squeeze the
// scheduler checks that it helped (the group's share grew); if not, the group is taken to be out of
// work (a synchronous workload), K is given back, and the group no longer lowers it until it is
// held back or its share grows. Requests are scaled by K / 10000, so when every group saturates,
// shares of the time the device executes follow the requests. A group whose processes wait for a
// CPU (a host with far more runnable threads than cores) launches less than it is granted whatever
// the device can do: while it is short of CPU (Counters::cpu_wait_bp) its shortfall lowers
// nothing, so that a loaded host does not halve every grant for the seconds K takes to come back.
// K still rises meanwhile (work conservation: a device left idle while groups wait is the worse
// error); once the host has CPU again a K above what the device runs is lowered as usual.
//
// Latency priority: while a latency group is active on the GPU, batch groups
// get a short burst (kBatchBurstWithLatencyNs) so their queues stay shallow.
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

namespace gpuslice::control {

class ShareScheduler {
 public:
  static constexpr std::chrono::milliseconds kPeriod{100};
  // The burst batch groups get while a latency group is active.
  static constexpr int64_t kBatchBurstWithLatencyNs = 2'000'000;
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
    int64_t burst_ns = 0;   // 0: the pacer's default
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
  };

  const Clock& clock_;
  std::map<std::string, State> states_;
  uint32_t capacity_bp_ = 9500;
  int64_t last_squeeze_ns_ = -1;  // when the capacity was last lowered
};

}  // namespace gpuslice::control
