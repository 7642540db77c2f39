#include "control/share_scheduler.h"

#include <algorithm>

#include "control/allocation.h"
#include "shm/launch_pacer.h"

namespace gpuslice::control {

bool ShareScheduler::RunsFree(const Input& in) const {
  auto it = states_.find(in.group);
  return in.latency && (it == states_.end() || !it->second.latency_turns);
}

std::vector<ShareScheduler::Output> ShareScheduler::Tick(
    const std::vector<Input>& inputs, const std::vector<UsageMeter::BusyWindow>& busy) {
  const int64_t now = clock_.NowNs();

  // 1. What each group ran.
  std::vector<UsageMeter::Group> metered;
  metered.reserve(inputs.size());
  for (const Input& in : inputs) {
    metered.push_back(
        {.name = in.group,
         .latency = RunsFree(in),
         .launches = in.counters.launches,
         .completed = in.counters.completed,
         .charge_ns = in.counters.charge_ns,
         .bound_ns = in.counters.bound_ns > 0 ? in.counters.bound_ns : in.counters.probe_ns,
         .floor_ns = in.counters.bound_floor_ns});
  }
  meter_.Tick(now, metered, busy);

  // Who wants more, who is new, who is idle.
  struct View {
    bool held = false;
    bool wanting = false;
    bool held_lately = false;  // held within the last kWantNs
    bool standing = false;
    bool idle = false;
    bool active = false;
    UsageMeter::Reading use;
  };
  std::vector<View> views(inputs.size());
  std::map<std::string, State> states;
  bool wanting_any = false;
  size_t active = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    auto it = states_.find(in.group);
    const bool known = it != states_.end() && in.counters.launches >= it->second.launches;
    State st = known ? it->second : State{.fresh_until_ns = now + kFreshNs};
    if (st.paused && !in.paused) st.fresh_until_ns = now + kFreshNs;  // resumed
    View& v = views[i];
    v.use = meter_.Of(in.group);
    // Held back: by its rate (a wait ended since the last tick, or one is
    // under way), or, taking turns, by a turn's end.
    // A turn that was empty this cycle (held over for a whole launch) cut
    // off whatever waits for it.
    v.held = known && !in.paused &&
             (st.turns && !st.whole_turn
                  ? in.counters.cut_off > st.cut_off || (st.empty_turn && in.counters.waiting > 0)
                  : in.counters.waits > st.waits || in.counters.waiting > 0);
    if (v.held) st.last_held_ns = now;
    const bool fresh = now < st.fresh_until_ns;
    // A group launching whose cost is not known yet cannot be measured: it
    // is taken to want more.
    const bool unmeasured = v.use.launched && in.counters.charge_ns == 0;
    v.held_lately = !in.paused && st.last_held_ns >= 0 && now - st.last_held_ns <= kWantNs;
    v.wanting = !in.paused && (v.held_lately || fresh || unmeasured);
    v.standing = fresh && !v.held;
    // A member waiting in its gate has work (a group with long kernels and
    // a small share may launch once in seconds): active, not idle.
    const bool waiting = in.counters.waiting > 0;
    v.idle = !in.paused && !v.wanting && !v.use.launched && !waiting;
    v.active = !in.paused && (v.held || v.use.launched || waiting);
    active += v.active ? 1 : 0;
    wanting_any = wanting_any || (v.active && v.wanting);
    // A latency group too heavy to run free takes turns (kLatencyFreeBp).
    const bool latency_running = in.latency && !in.paused;
    if (latency_running && !st.latency_turns) {
      st.latency_turns = v.use.floor_bp > kLatencyFreeBp;
      st.light_since_ns = -1;
    } else if (latency_running && 2 * v.use.used_bp >= kLatencyFreeBp) {
      st.light_since_ns = -1;
    } else if (latency_running && st.light_since_ns < 0) {
      st.light_since_ns = now;
    } else if (!latency_running || now - st.light_since_ns >= kWantNs) {
      st.latency_turns = false;  // not a running latency group, or light for kWantNs
    }
    st.waits = in.counters.waits;
    st.cut_off = in.counters.cut_off;
    st.launches = in.counters.launches;
    st.paused = in.paused;
    states.emplace(in.group, st);
  }
  states_ = std::move(states);  // groups not in `inputs` are forgotten

  // 2. What the device can run; 3. who gets what of it.
  capacity_.Tick(meter_.device_busy_bp(), wanting_any);
  std::vector<AllocationInput> asks;
  asks.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    const View& v = views[i];
    asks.push_back({.request_percent = in.request_percent,
                    .limit_bp = std::clamp<uint32_t>(in.limit_percent, 1, 100) * 100,
                    .weight = in.weight,
                    .paused = in.paused,
                    .idle = v.idle,
                    .wanting = v.wanting,
                    .standing = v.standing,
                    .used_bp = v.use.used_bp,
                    .used_fast_bp = v.use.used_fast_bp});
  }
  // All of the device when at most one group is active: nothing to switch between.
  const std::vector<uint32_t> grants =
      Allocate(asks, active <= 1 ? CapacityEstimator::kMaxBp : capacity_.capacity_bp());

  // 4. The active batch groups' turns.
  bool latency_active = false;
  std::vector<TurnPlanner::Taker> takers;
  std::vector<size_t> taker_of;  // input index of each taker
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    const View& v = views[i];
    const bool free = in.latency && !states_.at(in.group).latency_turns;
    if (free && v.active) latency_active = true;
    if (free || !v.active) continue;
    takers.push_back(
        {.group = in.group,
         .grant_bp = grants[i],
         .request_bp = std::min<uint32_t>(in.request_percent, 100) * capacity_.capacity_bp() / 100,
         .limit_bp = asks[i].limit_bp,
         .wanting = v.wanting,
         .held = v.held_lately,
         .cut_off = v.held,
         .charge_ns = in.counters.charge_ns > 0 ? in.counters.charge_ns : in.counters.probe_ns,
         .measured = in.counters.charge_ns > 0,
         .ran_bp = v.use.used_bp});
    taker_of.push_back(i);
  }
  const std::vector<TurnPlan> plans = planner_.Tick(now, takers);

  std::vector<Output> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    Output& o = out[i];
    o.group = in.group;
    o.paused = in.paused;
    o.used_bp = views[i].use.used_bp;
    o.wants_more = views[i].held;
    o.grant_bp = grants[i];
    o.burst_ns = in.paused ? 0 : kPacerBurstNs;
    if (in.latency && !states_.at(in.group).latency_turns) {
      o.latency_charge_ns = views[i].use.charge_ns;
    }
  }
  for (size_t k = 0; k < taker_of.size(); ++k) {
    Output& o = out[taker_of[k]];
    o.turn = plans[k];
    if (latency_active) o.queue_ns = kLatencyQueueNs;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    State& st = states_[inputs[i].group];
    if (!st.turns && out[i].turn.period_ns > 0) ++takers_joined_;
    st.turns = out[i].turn.period_ns > 0;
    st.whole_turn = st.turns && out[i].turn.length_ns >= out[i].turn.period_ns;
    st.empty_turn = st.turns && out[i].turn.length_ns == 0;
  }
  return out;
}

}  // namespace gpuslice::control
