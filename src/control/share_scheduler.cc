#include "control/share_scheduler.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "shm/launch_pacer.h"

namespace gpuslice::control {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
constexpr int64_t kPeriodNs = std::chrono::nanoseconds(ShareScheduler::kPeriod).count();
// Usage is measured over the last second, stretched (up to kMaxWindowNs)
// until it covers kMinWindowLaunches launches, so that groups with long
// kernels are not measured in whole kernels.
constexpr int64_t kWindowNs = kSecondNs;
constexpr int64_t kMaxWindowNs = 4 * kSecondNs;
constexpr uint64_t kMinWindowLaunches = 16;
// A new or resumed group is granted its request for this long before its use
// decides.
constexpr int64_t kFreshNs = kSecondNs;
// A group that does not want more is allotted its use x kUseHeadroom +
// kMarginBp (so that it is not held back by noise, and can grow a little
// before it has to ask).
constexpr double kUseHeadroom = 1.1;
constexpr uint32_t kMarginBp = 100;
// A group held back within this long still wants more (its use may be below
// its grant because the device, not the grant, holds it).
constexpr int64_t kWantNs = 1'000'000'000;
// Recent use, to follow a group that grows.
constexpr int64_t kFastWindowNs = 200'000'000;
// Squeeze detection: a measured share this far (plus 1 % of it) below its
// due counts; a squeezed group whose share does not grow by kGrowBp (or a
// part of the capacity taken meanwhile, see the probe) within kProbeNs is
// demand-limited, until it is held back or its share grows by kUnmarkGrowBp.
constexpr uint32_t kSqueezeMarginBp = 50;
// The group with the largest due this far (plus half a percent of its due)
// below what it launched of its due: the capacity creeps down, not up.
constexpr uint32_t kShortMarginBp = 25;
constexpr uint32_t kGrowBp = 30;
constexpr int64_t kProbeNs = 2'000'000'000;
constexpr uint32_t kUnmarkGrowBp = 200;
// How long after a group appears its measured share starts to count.
constexpr int64_t kSettleNs = 2'000'000'000;
// How far back the grants a measured share is compared with go.
constexpr int64_t kDueWindowNs = 1'500'000'000;
// A charge per launch that moved by more than this factor from one tick to
// the next (the cost estimator took a workload shift, or came back from one)
// paced the group on a different cost: what it ran meanwhile is its pacing's,
// not the device's, for as long as its measured share trails.
constexpr double kRepriceRatio = 1.2;
// Capacity steps per tick: down by half the worst shortfall within these
// bounds, up by kCapacityUpBp.
constexpr uint32_t kCapacityDownMinBp = 20;
constexpr uint32_t kCapacityDownMaxBp = 100;
constexpr uint32_t kCapacityUpBp = 10;
// While no group was squeezed for kDueWindowNs and some group wants more, up
// by at least (kMaxCapacityBp - capacity) / kCapacityUpDivisor per tick.
constexpr uint32_t kCapacityUpDivisor = 16;

// Water-fills `room` (what each item may still take) by `weight` with
// `amount`: returns what each gets; the sum never exceeds `amount`.
std::vector<double> WaterFill(const std::vector<double>& room, const std::vector<double>& weight,
                              double amount) {
  std::vector<double> got(room.size(), 0);
  std::vector<size_t> order(room.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return room[a] * weight[b] < room[b] * weight[a]; });
  double weights = 0;
  for (double w : weight) weights += w;
  for (size_t k = 0; k < order.size() && amount > 0 && weights > 0; ++k) {
    const size_t i = order[k];
    const double level = amount / weights;  // per unit of weight
    if (room[i] <= level * weight[i]) {
      got[i] = room[i];
    } else {
      // Every item from here on is wider than the level: all get level x w.
      for (size_t j = k; j < order.size(); ++j) got[order[j]] = level * weight[order[j]];
      break;
    }
    amount -= got[i];
    weights -= weight[i];
  }
  return got;
}

// A group that launched but whose cost per launch is not estimated yet. Its
// launch gate charges each launch the bootstrap measurement (a synchronised
// launch's wall time: an upper bound, N times the kernel's device time beside
// N saturating contexts), so a share-sized grant would admit one 20 ms kernel
// every few seconds beside 20 groups, too few launches for the controller to
// estimate its cost for tens of seconds (its use reads as nothing, and it is
// taken for idle). It is paced at its limit instead, outside the capacity:
// charged an upper bound, it still uses less than its limit, and its cost is
// known within a second or two.
bool CostUnknown(const ShareScheduler::Input& in) {
  return !in.paused && in.counters.launches > 0 && in.counters.charge_ns == 0;
}

}  // namespace

std::vector<ShareScheduler::Output> ShareScheduler::Tick(const std::vector<Input>& inputs) {
  const int64_t now = clock_.NowNs();

  std::vector<View> views;
  views.reserve(inputs.size());
  std::map<std::string, State> next_states;
  for (const Input& in : inputs) {
    auto it = states_.find(in.group);
    State st = it != states_.end() ? std::move(it->second) : State{};
    const bool reset = !st.samples.empty() && in.counters.launches < st.samples.back().launches;
    const bool known = it != states_.end() && !reset;
    if (!known) {
      st = State{};
      st.fresh_until_ns = now + kFreshNs;
      st.known_since_ns = now;
    }
    if (st.paused && !in.paused) {  // resumed
      st.samples.clear();
      st.fresh_until_ns = now + kFreshNs;
    }
    // Held back: a wait ended since the last tick, or one is under way (a
    // member stuck in a long wait is counted from its start).
    const bool held =
        known && !in.paused && (in.counters.waits > st.waits || in.counters.waiting > 0);
    st.waits = in.counters.waits;
    st.paused = in.paused;
    st.samples.push_back({now, in.counters.launches});
    while (st.samples.size() > 1 && now - st.samples.front().t_ns > kMaxWindowNs) {
      st.samples.pop_front();
    }
    // The shortest window of at least kWindowNs holding kMinWindowLaunches.
    size_t from = st.samples.size() - 1;
    while (from > 0 && (now - st.samples[from].t_ns < kWindowNs ||
                        in.counters.launches - st.samples[from].launches < kMinWindowLaunches)) {
      --from;
    }
    const Sample& first = st.samples[from];
    const int64_t span = now - first.t_ns;
    const uint64_t launched = in.counters.launches - first.launches;
    uint32_t used = 0;
    if (span > 0) {
      const double bp = static_cast<double>(launched) * static_cast<double>(in.counters.charge_ns) *
                        10000.0 / static_cast<double>(span);
      used = static_cast<uint32_t>(std::min(bp, 10000.0));
    }
    size_t fast = st.samples.size() - 1;
    while (fast > 0 && now - st.samples[fast].t_ns < kFastWindowNs) --fast;
    uint32_t used_fast = 0;
    if (now > st.samples[fast].t_ns) {
      const double bp = static_cast<double>(in.counters.launches - st.samples[fast].launches) *
                        static_cast<double>(in.counters.charge_ns) * 10000.0 /
                        static_cast<double>(now - st.samples[fast].t_ns);
      used_fast = static_cast<uint32_t>(std::min(bp, 10000.0));
    }
    // Launched within the last second (not the stretched window).
    size_t recent = st.samples.size() - 1;
    while (recent > 0 && now - st.samples[recent - 1].t_ns <= kWindowNs) --recent;
    const bool launched_recently =
        recent + 1 < st.samples.size() ? in.counters.launches > st.samples[recent].launches : false;
    // A coarse share (see `coarse` below) trails as any share does.
    if (in.counters.share_coarse) st.coarse_until_ns = now + kDueWindowNs;
    View v{};
    v.fresh = now < st.fresh_until_ns;
    v.held = held;
    v.launched = launched_recently || (held && launched > 0);
    v.used = used;
    v.used_fast = used_fast;
    v.executed = in.counters.share_bp >= 0
                     ? static_cast<uint32_t>(std::min(in.counters.share_bp, 10000))
                     : used;
    v.limit = std::clamp<uint32_t>(in.limit_percent, 1, 100) * 100;
    v.active = !in.paused && (held || launched_recently);
    auto [pos, inserted] = next_states.emplace(in.group, std::move(st));
    v.st = &pos->second;
    // Duplicate names are a caller bug; the first wins.
    views.push_back(inserted ? v : View{});
  }
  states_ = std::move(next_states);  // groups not in `inputs` are forgotten

  // Capacity: lower it while some group that wants more is not held back by
  // its grant yet uses less than it (the device, not the grant, holds it);
  // raise it slowly otherwise. A group wants more if it was held back within
  // kWantNs, is new or resumed (it is due its request), or is being squeezed.
  // Every kProbeNs of a squeeze the scheduler checks that lowering the
  // capacity helped (the group's use grew); if not, the group is taken to be
  // out of work (demand-limited) and what was taken on its account is given
  // back.
  size_t active = 0;
  uint32_t active_groups = 1;  // at least 1: a divisor below
  {
    uint32_t n = 0;
    for (const View& v : views) n += v.st != nullptr && v.active ? 1 : 0;
    active_groups = std::max<uint32_t>(n, 1);
  }
  bool squeezed = false;
  uint32_t shortfall = 0;
  uint32_t restore = 0;
  bool wanting_any = false;  // some active group is held back by its grant
  // The settled group with the largest due: it ran a little below what it
  // launched of its due.
  uint32_t largest_due = 0;
  bool all_count = true;  // every active group is settled and its share is the device's evidence
  bool largest_short = false;
  // What the active groups ran and were due, in all: a device that cannot
  // deliver the grants runs less than they add up to; one that has idle
  // time runs about what they add up to, whatever one group's noise says.
  uint64_t total_executed = 0;
  uint64_t total_due = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    View& v = views[i];
    if (v.st == nullptr) continue;
    State& st = *v.st;
    if (v.active) ++active;
    if (v.held) {
      st.last_held_ns = now;
      st.demand_limited = false;
      wanting_any = wanting_any || v.active;
    }
    if (st.demand_limited && v.executed > st.used_at_mark_bp + kUnmarkGrowBp) {
      st.demand_limited = false;
    }
    const bool episode = st.squeezed_since_ns >= 0;
    // A group launching whose charge per launch is not known yet (its use
    // cannot be measured) is taken to want more.
    const bool unmeasured = v.launched && inputs[i].counters.charge_ns == 0;
    v.wanting = !inputs[i].paused && (v.held || v.fresh || episode || unmeasured ||
                                      (st.last_held_ns >= 0 && now - st.last_held_ns <= kWantNs));
    // What it should get: its grant if it wants more, else its request (a
    // group that never got to be held back may be squeezed from the start).
    const uint32_t request = static_cast<uint32_t>(
        uint64_t{std::min<uint32_t>(inputs[i].request_percent, 100)} * capacity_bp_ / 100);
    // The measured share trails by about a second: held to the least grant
    // of that span, so that a grant that just grew is no squeeze. A group
    // the device cannot serve may still be held back by its grant (its
    // launches are admitted at its pace and queue in the driver).
    uint32_t granted = st.grant_bp;
    for (const auto& [t, g] : st.grants) {
      if (now - t <= kDueWindowNs) granted = std::min(granted, g);
    }
    const uint32_t due = v.wanting ? granted : std::min(request, granted);
    if (v.active) {
      total_executed += v.executed;
      total_due += due;
    }
    const uint32_t margin = kSqueezeMarginBp + due / 100;
    // A group short of CPU runs less than its grant whatever the device
    // can do: no evidence of the device's capacity.
    // Its measured share trails by up to kDueWindowNs: that long after.
    if (inputs[i].counters.cpu_wait_bp >= kCpuShortBp) st.cpu_short_until_ns = now + kDueWindowNs;
    const bool cpu_short = now < st.cpu_short_until_ns;
    // A group whose charge per launch just moved was paced on another cost
    // (an estimate that doubled for a few ticks halved what it launched): its
    // shortfall is its pacing's, not the device's, until its share no longer
    // shows it.
    const uint64_t charge = inputs[i].counters.charge_ns;
    if (charge > 0 && st.charge_ns > 0) {
      const double ratio = static_cast<double>(std::max(charge, st.charge_ns)) /
                           static_cast<double>(std::min(charge, st.charge_ns));
      if (ratio > kRepriceRatio) st.repriced_until_ns = now + kDueWindowNs;
    }
    st.charge_ns = charge;
    const bool repriced = now < st.repriced_until_ns;
    // A batch group taking turns (or that took them within the span its
    // share trails by) runs its grant over several turns, not in every
    // second: its shortfall says nothing of the device. (The holder and the
    // latency group are what the device runs meanwhile, and they still count.)
    const bool turns = now < st.turns_until_ns;
    // A coarse share (NVML's window attribution) is a handful of whole
    // windows: its shortfall in a second says nothing of the device, and a
    // group's pacing error (a coarse cost estimate) looks the same. It lowers
    // nothing; the device's round-robin decides the last points instead.
    const bool coarse = now < st.coarse_until_ns;
    const bool counts = v.active && !unmeasured && !st.demand_limited && !cpu_short && !turns &&
                        !repriced && !coarse;
    if (v.active && (!counts || now - st.known_since_ns < kSettleNs)) all_count = false;
    // The settled group with the largest due, and whether it ran a little
    // less than it launched of its due (see the creep below). One that
    // launched less than its due (its host is short of CPU, its thread is
    // busy launching) ran what it launched: no evidence of the device.
    // Short of CPU does not exclude it here: a group that lacks CPU launches
    // less than its due, which the comparison with what it launched covers
    // (and the daemon reads the waits of all its threads, which on a loaded
    // host pass kCpuShortBp while its launching thread keeps up).
    const bool evidence =
        v.active && !unmeasured && !st.demand_limited && !turns && !repriced && !coarse;
    if (evidence && now - st.known_since_ns >= kSettleNs && due >= largest_due) {
      largest_due = due;
      const uint32_t launched_due = std::min(due, v.used);
      largest_short = v.executed + kShortMarginBp + due / 200 < launched_due;
    }
    const bool squeeze = counts && v.executed + margin < due;
    if (!squeeze) {
      if (episode && (!v.active || cpu_short))
        restore = std::max(restore, st.capacity_at_squeeze_bp);
      st.squeezed_since_ns = -1;
      continue;
    }
    if (!episode) {
      st.squeezed_since_ns = now;
      st.used_at_squeeze_bp = v.executed;
      st.capacity_at_squeeze_bp = capacity_bp_;
    } else if (now - st.squeezed_since_ns >= kProbeNs) {
      const uint32_t dropped =
          st.capacity_at_squeeze_bp - std::min(st.capacity_at_squeeze_bp, capacity_bp_);
      // What lowering K frees goes to every group the device holds back, a
      // part of it within the probe (the shares trail): a squeezed group
      // can count on dropped / (8 x the active groups) at least. A quarter
      // of `dropped` took a group on a device that switches a third of the
      // time (4 groups, K from 96 towards 63) for one out of work, and K
      // swung back (ShareSchedulerTest.SharesFollowRequestsOnADevice...).
      const bool grew =
          v.executed >=
          st.used_at_squeeze_bp + std::max<uint32_t>(kGrowBp, dropped / (8 * active_groups));
      if (!grew) {
        // Lowering the capacity did not help it: it has no more work.
        st.demand_limited = true;
        st.used_at_mark_bp = v.executed;
        st.squeezed_since_ns = -1;
        restore = std::max(restore, st.capacity_at_squeeze_bp);
        continue;
      }
      st.squeezed_since_ns = now;  // it helped: go on, and check again
      st.used_at_squeeze_bp = v.executed;
      st.capacity_at_squeeze_bp = capacity_bp_;
    }
    v.wanting = true;
    // A group's measured share covers about a second and trails the device
    // by up to another: until then its shortfall does not lower K (a group
    // starting is not a device that cannot deliver).
    if (now - st.known_since_ns < kSettleNs) continue;
    squeezed = true;
    shortfall = std::max(shortfall, due - v.executed);
  }
  capacity_bp_ = std::max(capacity_bp_, restore);
  // One group below its due while the device ran (nearly) all the grants is
  // noise in its measurement, not a device that cannot deliver: no squeeze.
  if (squeezed && total_executed + kSqueezeMarginBp + total_due / 100 >= total_due) {
    squeezed = false;
  }
  if (active >= 2) {
    if (squeezed) {
      const uint32_t down = std::clamp(shortfall / 2, kCapacityDownMinBp, kCapacityDownMaxBp);
      uint32_t next = capacity_bp_ - std::min(capacity_bp_, down);
      // Every active group's share is evidence of the device (none short of
      // CPU, repriced, taking turns or out of work) and the grants they were
      // due were held over the span the shares cover: what they ran together
      // is what the device can run. Straight there (plus the margin) rather
      // than a point per tick: on a device that switches a third of the time
      // that took 3-4 s of the bench's 8.
      // A device seen to run less than K's floor is no measure of its
      // capacity (NVML not showing the groups yet, or they ran out of work):
      // steps and the probe decide then.
      if (all_count && total_due > total_executed + kSqueezeMarginBp &&
          total_executed + kSqueezeMarginBp >= kMinCapacityBp) {
        next = std::min(next, static_cast<uint32_t>(std::min<uint64_t>(
                                  total_executed + kSqueezeMarginBp, kMaxCapacityBp)));
      }
      capacity_bp_ = std::max(kMinCapacityBp, next);
      last_squeeze_ns_ = now;
    } else if (restore == 0 && largest_short) {
      // The group with the largest due ran less than it launched of it while
      // the others ran a little above theirs (the total hides it): the device
      // is at, or a little above, its capacity, and the round-robin takes
      // what is missing from the largest grant (its queue grows meanwhile).
      // Down by the creep's step, not up: K settles about where the largest
      // group starts to lose, instead of creeping a point or two above it
      // between squeezes.
      capacity_bp_ = std::max(kMinCapacityBp, capacity_bp_ - std::min(capacity_bp_, kCapacityUpBp));
    } else if (restore == 0) {
      // Work conservation: capacity not handed out is device time left idle
      // while groups wait. With no squeeze for as long as the measured shares
      // trail (every group got its grant), raise it by a part of what is
      // left, so that a capacity lowered by a transient (groups starting,
      // launch costs being learned) comes back within a second or two; near
      // the device's real capacity the steps shrink to kCapacityUpBp.
      // Not beyond what the device was seen to run plus the squeeze margin:
      // a capacity above what the device delivers lets every queue grow
      // (launches admitted faster than they run), which skews their launch
      // costs and takes the device from a group that returns.
      uint32_t up = kCapacityUpBp;
      const uint64_t seen_bp = total_executed + kSqueezeMarginBp + total_due / 100;
      if (wanting_any && seen_bp > capacity_bp_ &&
          (last_squeeze_ns_ < 0 || now - last_squeeze_ns_ > kDueWindowNs)) {
        const auto room = static_cast<uint32_t>(seen_bp - capacity_bp_);
        up = std::max(up, std::min(room, (kMaxCapacityBp - std::min(kMaxCapacityBp, capacity_bp_)) /
                                             kCapacityUpDivisor));
      }
      capacity_bp_ = std::min(kMaxCapacityBp, capacity_bp_ + up);
    }
  }

  // Allocation over the capacity (all of the device when at most one group
  // is active: nothing to switch between). Each group has a cap, what it can
  // use: its limit if it wants more; else what it uses plus a margin (a new
  // or resumed group: at least its request). It gets min(request, cap)
  // first, then the rest of the capacity is water-filled by weight up to the
  // caps. Grants add up to at most the capacity (idle groups' small grants
  // aside), so a group not held back is limited by its own work, not by the
  // device, and one that wants more is held back and asks.
  const uint32_t capacity = active <= 1 ? 10000 : capacity_bp_;
  bool latency_active = false;
  std::vector<double> base(inputs.size(), 0);
  std::vector<double> room(inputs.size(), 0);
  std::vector<double> weight(inputs.size(), 0);
  double allotted = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    View& v = views[i];
    const Input& in = inputs[i];
    if (v.st == nullptr || in.paused) continue;
    if (in.latency && v.active) latency_active = true;
    const double request =
        std::min<uint32_t>(in.request_percent, 100) * 100.0 * capacity_bp_ / 10000.0;
    if (CostUnknown(in)) continue;            // its limit, outside (below)
    if (!v.wanting && !v.launched) continue;  // idle: kIdleGrantBp, outside
    double cap = std::max(v.used, v.used_fast) * kUseHeadroom + kMarginBp;
    if (v.wanting) cap = v.fresh && !v.held ? std::max(cap, request) : v.limit;
    cap = std::min<double>(cap, v.limit);
    base[i] = std::min(request, cap);
    room[i] = cap - base[i];
    weight[i] = std::max<uint32_t>(in.weight, 1);
    allotted += base[i];
  }
  // Requests are admitted to add up to at most 100 %; should they not, the
  // bases are scaled down to fit.
  if (allotted > capacity) {
    for (double& b : base) b = b * capacity / allotted;
    allotted = capacity;
  }
  const std::vector<double> extra = WaterFill(room, weight, capacity - allotted);

  std::vector<Output> out;
  out.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const View& v = views[i];
    const Input& in = inputs[i];
    Output o;
    o.group = in.group;
    o.paused = in.paused;
    o.used_bp = v.executed;
    o.wants_more = v.held;
    if (!in.paused) {
      const bool idle = v.st != nullptr && !v.wanting && !v.launched;
      double grant = idle ? std::min(kIdleGrantBp, v.limit) : base[i] + extra[i];
      if (v.st != nullptr && CostUnknown(in)) grant = v.limit;
      o.grant_bp = std::clamp<uint32_t>(static_cast<uint32_t>(grant), 1, v.limit ? v.limit : 1);
      // Set for every group it schedules: the launch gate then bounds the
      // group's queue in the driver (shm/launch_pacer.h, BoundsQueueByAge),
      // so that a pause stops its device time within about that queue, and
      // a group that comes back is not stuck behind the others' queues.
      o.burst_ns = !in.latency && latency_active ? kBatchBurstWithLatencyNs : kPacerBurstNs;
    }
    if (v.st != nullptr) {
      // The grant it is due (the measured share is compared with it); a
      // turn's holder may be paced faster (TakeTurns).
      State& st = *v.st;
      st.grant_bp = o.grant_bp;
      st.grants.emplace_back(now, o.grant_bp);
      while (!st.grants.empty() && now - st.grants.front().first > kDueWindowNs) {
        st.grants.pop_front();
      }
    }
    out.push_back(std::move(o));
  }

  // Batch turns beside an active latency group (see the header).
  std::vector<size_t> batch;  // the batch groups that take turns
  if (latency_active) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const View& v = views[i];
      // A group whose launch cost is not known yet takes turns too (paced
      // at its limit on its turns, it is owed much and measured soon): its
      // queue is as much in a latency kernel's way.
      if (v.st != nullptr && !inputs[i].paused && !inputs[i].latency && v.active) {
        batch.push_back(i);
      }
    }
  }
  TakeTurns(now, inputs, views, batch, out);
  return out;
}

void ShareScheduler::TakeTurns(int64_t now, const std::vector<Input>& inputs,
                               std::vector<View>& views, const std::vector<size_t>& batch,
                               std::vector<Output>& out) {
  if (batch.size() < 2) {  // at most one batch context queues work: nothing to hold
    for (auto& [name, st] : states_) st.owed = 0;
    turn_.clear();
    return;
  }
  for (size_t i : batch) views[i].st->turns_until_ns = now + kDueWindowNs + kWindowNs;
  // Accrue: each its grant, the holder less the pool it was paced at.
  uint32_t pool = 0;
  for (size_t i : batch) pool += out[i].grant_bp;
  pool = std::min(pool, kMaxCapacityBp);
  const double bound = 10.0 * pool;  // what ten ticks of the pool are worth
  size_t holder = batch.size();
  for (size_t k = 0; k < batch.size(); ++k) {
    const size_t i = batch[k];
    State& st = *views[i].st;
    st.owed += out[i].grant_bp;
    if (inputs[i].group == turn_) {
      st.owed -= turn_pool_bp_;
      holder = k;
    }
    st.owed = std::clamp(st.owed, -bound, bound);
  }
  // A new turn when the holder's is over or it left the turns: to the group
  // owed the most (the first of equals).
  if (holder == batch.size() || now - turn_since_ns_ >= kBatchTurnNs) {
    size_t next = 0;
    for (size_t k = 1; k < batch.size(); ++k) {
      if (views[batch[k]].st->owed > views[batch[next]].st->owed) next = k;
    }
    // What the holder is charged for the coming tick.
    double charge_bp = pool;
    if (next != holder) {
      // The last holder's queue drains first: by its budget's time (what
      // it was admitted, at the pool's rate). That time is the last
      // holder's, not the new one's.
      int64_t drain = 0;
      if (holder != batch.size()) {
        // At least the queue its gate let it keep (QueueBoundNs): the
        // device may have served it more slowly than its budget says.
        const Counters& last = inputs[batch[holder]].counters;
        const int64_t queued = QueueBoundNs(
            PacedIntervalBpNs(static_cast<int64_t>(last.charge_ns), std::max(pool, 1u)),
            kBatchBurstWithLatencyNs);
        drain = std::clamp<int64_t>(std::max(last.next_free_ns - now, queued), 0, kMaxHandoffNs);
        const double part = static_cast<double>(drain) / static_cast<double>(kPeriodNs);
        views[batch[holder]].st->owed -= pool * part;
        charge_bp = pool * std::max(0.0, 1 - part);
      }
      turn_hold_until_ns_ = now + drain;
      turn_ = inputs[batch[next]].group;
    }
    turn_since_ns_ = now;
    holder = next;
    turn_pool_bp_ = charge_bp;
  } else {
    turn_pool_bp_ = pool;
  }
  for (size_t k = 0; k < batch.size(); ++k) {
    const size_t i = batch[k];
    if (k == holder) {
      out[i].grant_bp = std::min(pool, views[i].limit);
      out[i].hold_until_ns = turn_hold_until_ns_ > now ? turn_hold_until_ns_ : 0;
    } else {
      out[i].hold_until_ns = kHoldForever;
    }
  }
}

}  // namespace gpuslice::control
