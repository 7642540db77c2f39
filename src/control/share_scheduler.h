// ShareScheduler: how one GPU's time is shared across the groups on it
// (DESIGN.md section 4; docs/scheduling.md has the behaviour in full).
// gpusliced runs one per GPU every kPeriod over the groups it controls there
// and writes each result into the group's segment.
//
// A tick is four stages, each with its own header and test:
//  1. UsageMeter: what each group ran (its launches seen complete times their
//     charge; a latency group's from the device's busy time), and the
//     device's busy time;
//  2. CapacityEstimator: how much of the device's time can be handed out;
//  3. Allocate: grants from requests, limits, weights and who wants more;
//  4. TurnPlanner: the active batch groups' turns, which realise their grants.
// Around them this class keeps what a tick needs from the last: which
// groups are new or resumed (their request stands for kFreshNs), which were
// held back (they want more for kWantNs after). A group is held back when it
// waited in its launch gate, or, taking turns that are not the whole cycle,
// when a turn's end cut a launch off:
// a turn-taker waits for its turn whenever it has work outside it, which
// says nothing of whether it would use a longer one (a service whose
// requests arrive at their own pace would not).
//
// What the launch gate does with each output (shm/launch_pacer.h):
//  - a batch group that takes turns queues work only within its turns (its
//    grant paces nothing then); while a latency group is active on the GPU
//    each stream of it drains whenever it holds kLatencyQueueNs of work, so
//    that the device switches to the latency group's context, which has a
//    kernel waiting, at most that long after it arrives;
//  - a latency group that would run more than kLatencyFreeBp beside them
//    takes turns as well;
//  - any other group (latency groups, idle ones, and every group of a GPU
//    with no batch group active) is paced at min(limit, grant).
//
// Contract:
//  - grants never exceed limits and, idle grants aside, add up to at most the
//    capacity; turns add up to at most the cycle;
//  - a group missing from a tick's inputs is forgotten (it died);
//  - Tick does no I/O; time comes from the injected Clock.
// Not thread-safe: one instance per GPU, on the daemon's control thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "control/capacity_estimator.h"
#include "control/turn_planner.h"
#include "control/usage_meter.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::control {

class ShareScheduler {
 public:
  static constexpr std::chrono::milliseconds kPeriod{100};
  // A new or resumed group's request stands this long before its use decides.
  static constexpr int64_t kFreshNs = 1'000'000'000;
  // A group held back within this long still wants more.
  static constexpr int64_t kWantNs = 1'000'000'000;
  // The most work a batch stream queues while a latency group is active:
  // below the H100's 2090 us time slice, so that the batch context runs dry
  // (and the device switches to the latency group) before its slice would
  // end.
  static constexpr int64_t kLatencyQueueNs = 1'000'000;
  // A latency group runs free of the turns while what it runs by its least
  // bracketed launches (its launches times the shortest of their brackets
  // of late: about its kernel and a switch) is within this: its kernels then
  // take at most about that from the turns' holders, whose measured
  // intervals they fall into. Above it (a service that wants more of the
  // device than that) it takes turns as a batch group does, measured alone,
  // until what it runs in them stays below half of this for kWantNs.
  static constexpr uint32_t kLatencyFreeBp = 2500;

  // A group's counters on this GPU, monotonic over its segment's life
  // (GroupSegment, LaunchCostMeter).
  struct Counters {
    uint64_t launches = 0;   // launches admitted
    uint64_t completed = 0;  // of those, seen complete
    uint64_t waits = 0;      // times the launch gate waited (budget or turn)
    uint64_t cut_off = 0;    // launches its turns' ends cut off
    uint32_t waiting = 0;    // members with a thread waiting in the gate now
    int64_t charge_ns = 0;   // the group's mean device time per launch; 0: not known
    // While charge_ns is not known: the most a launch was measured to take
    // (its gate's bootstrap: a launch waited for, an upper bound); 0: none.
    int64_t probe_ns = 0;
    // An upper bound per launch from its bracketed launches (LaunchCostMeter
    // BoundCharge); 0: none.
    int64_t bound_ns = 0;
    // Its least bracketed launch of late (LaunchCostMeter BoundFloor); 0: none.
    int64_t bound_floor_ns = 0;
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
    uint32_t grant_bp = 0;  // device time it is due; 0 only for a paused group
    int64_t burst_ns = 0;   // the pacer's burst (0 only for a paused group)
    // Its turns from turn.epoch_ns on (period 0: none, the rate paces it).
    TurnPlan turn{};
    int64_t queue_ns = 0;  // a batch stream's queue bound beside a latency group; 0: none
    bool paused = false;
    uint32_t used_bp = 0;           // what it ran over the last second (UsageMeter)
    bool wants_more = false;        // held back this tick
    int64_t latency_charge_ns = 0;  // a latency group's charge from the device's busy; 0: none
  };

  // REQUIRES: `clock` outlives this.
  explicit ShareScheduler(const Clock& clock) : clock_(clock) {}

  // One tick at the clock's now over `inputs` (the groups now on the GPU)
  // and the device's NVML windows closed since the last tick. Returns one
  // Output per input, in input order.
  std::vector<Output> Tick(const std::vector<Input>& inputs,
                           const std::vector<UsageMeter::BusyWindow>& busy);

  uint32_t capacity_bp() const { return capacity_.capacity_bp(); }
  // Bumped at a tick at which a batch group began taking turns: it ran
  // beside the turns' holders until then (LaunchCostMeter::ForgetEvidence).
  uint64_t takers_joined() const { return takers_joined_; }
  int32_t device_busy_bp() const { return meter_.device_busy_bp(); }
  const TurnPlanner& turns() const { return planner_; }

 private:
  struct State {
    uint64_t waits = 0;
    uint64_t cut_off = 0;
    bool turns = false;       // it was given turns last tick
    bool whole_turn = false;  // ...and they were the whole cycle (no end to cut it off)
    bool empty_turn = false;  // ...or empty (held over for a whole launch)
    uint64_t launches = 0;
    bool paused = false;
    int64_t fresh_until_ns = 0;
    int64_t last_held_ns = -1;
    bool latency_turns = false;   // a latency group that takes turns (kLatencyFreeBp)
    int64_t light_since_ns = -1;  // ...and has run below half of it since
  };
  // A latency group that runs free of the turns (its state as of the last tick).
  bool RunsFree(const Input& in) const;

  const Clock& clock_;
  UsageMeter meter_;
  CapacityEstimator capacity_;
  TurnPlanner planner_;
  std::map<std::string, State> states_;
  uint64_t takers_joined_ = 0;
};

}  // namespace gpuslice::control
