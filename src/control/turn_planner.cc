#include "control/turn_planner.h"

#include <algorithm>
#include <cmath>

namespace gpuslice::control {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
// A plan takes effect at least this long after the Tick that made it: the
// daemon writes it into every group's segment meanwhile, and a group that
// read its new plan while another still had the old one would run beside it
// (at a 2 ms margin, the daemon's tick on a loaded host wrote some groups'
// plans after the boundary: two groups launched at once and both measured
// the other's time, a 20 ms kernel's charge read 40 ms).
constexpr int64_t kPlanAheadNs = 20'000'000;
// A launch's turn holds its charge with this much to spare: the gate's fit
// rule compares with the charge it knows, a launch's own time varies, and
// the thread that makes it may wake a little after the turn began.
constexpr double kLaunchSpare = 1.02;
constexpr int64_t kLaunchSpareNs = 500'000;
// Efficiency: learned only from turns of at least this share; each tick
// moves it this part of the way to what the last second showed.
constexpr double kMinShareSeen = 0.02;
constexpr double kLearnRate = 0.25;
constexpr double kMinEfficiency = 0.3;

// The turn one launch of `charge_ns` is given.
int64_t LaunchTurn(int64_t charge_ns) {
  return static_cast<int64_t>(static_cast<double>(charge_ns) * kLaunchSpare) + kLaunchSpareNs;
}

}  // namespace

double TurnPlanner::efficiency(const std::string& group) const {
  auto it = states_.find(group);
  return it == states_.end() ? 1.0 : it->second.efficiency;
}

std::vector<TurnPlan> TurnPlanner::Tick(int64_t now_ns, const std::vector<Taker>& takers) {
  if (takers.empty()) {
    states_.clear();
    plan_.clear();
    epoch_ns_ = 0;
    period_ns_ = 0;
    planned_from_ns_ = -1;
    return {};
  }
  // The cycle's length, in whole kPeriodNs, changed only when the groups'
  // number moves it by a quarter (a group coming and going must not move
  // every turn).
  // It holds any one launch with room to spare.
  int64_t need = static_cast<int64_t>(takers.size()) * kTurnPerGroupNs;
  for (const Taker& t : takers) need = std::max(need, t.charge_ns + t.charge_ns / 4);
  const int64_t wanted =
      std::clamp<int64_t>((need + kPeriodNs - 1) / kPeriodNs * kPeriodNs, kPeriodNs, kMaxPeriodNs);
  const int64_t period =
      period_ns_ > 0 && wanted * 4 < period_ns_ * 5 && wanted * 4 > period_ns_ * 3 ? period_ns_
                                                                                   : wanted;
  // The next boundary of the grid; a new cycle length starts a new grid
  // there. One too close to be planned (less than kPlanAheadNs ahead and not
  // planned yet: the ticks drifted, or one came early) starts a new grid half
  // a cycle ahead, as the first plan does: the ticks then fall mid-cycle.
  int64_t next = period_ns_ == 0 || now_ns < epoch_ns_
                     ? epoch_ns_
                     : epoch_ns_ + ((now_ns - epoch_ns_) / period_ns_ + 1) * period_ns_;
  if (period_ns_ == 0 || (next != planned_from_ns_ && next - now_ns < kPlanAheadNs)) {
    next = now_ns + period / 2;
    epoch_ns_ = next;
    period_ns_ = period;
    planned_from_ns_ = -1;
  } else if (period != period_ns_) {
    epoch_ns_ = next;
    period_ns_ = period;
    planned_from_ns_ = -1;  // that cycle is planned anew, at the new length
  }
  // The cycle that starts next is planned once; until it starts the one in
  // hand stands (a plan written for the next boundary takes effect there).
  // Planned again, from where its first planning began, while still far
  // enough ahead, when a group joined or left the takers since: a resumed
  // group gets its turn a cycle sooner, a gone one's turn is not left idle.
  bool changed = plan_.size() != takers.size();
  for (const Taker& t : takers) changed = changed || !plan_.contains(t.group);
  if (next == planned_from_ns_ && changed && next - now_ns >= kPlanAheadNs) {
    states_ = prior_states_;
    planned_from_ns_ = -1;
  }
  if (next != planned_from_ns_) Plan(next, takers);
  std::vector<TurnPlan> out;
  out.reserve(takers.size());
  for (const Taker& t : takers) {
    auto it = plan_.find(t.group);
    // One that joined since the cycle in hand was planned waits for the
    // next (an empty turn): running beside the turns' holders meanwhile, it
    // would be in their measurements.
    out.push_back(it != plan_.end() ? it->second
                                    : TurnPlan{.epoch_ns = planned_from_ns_,
                                               .period_ns = period_ns_,
                                               .begin_ns = 0,
                                               .length_ns = 0});
  }
  return out;
}

void TurnPlanner::Plan(int64_t start_ns, const std::vector<Taker>& takers) {
  prior_states_ = states_;
  const auto period = static_cast<double>(period_ns_);
  std::map<std::string, State> states;
  // In a fixed order (by name), so that turns keep their place in the cycle.
  std::vector<const Taker*> order;
  order.reserve(takers.size());
  for (const Taker& t : takers) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const Taker* a, const Taker* b) { return a->group < b->group; });

  // Efficiency: what it ran over the last second against the turns it held.
  std::vector<double> due(order.size(), 0);
  std::vector<double> base(order.size(), 0);  // of the due, the request's part
  std::vector<double> most(order.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const Taker& t = *order[k];
    auto it = states_.find(t.group);
    State st = it != states_.end() ? std::move(it->second) : State{};
    while (!st.turns.empty() && start_ns - st.turns.front().first > kSecondNs) st.turns.pop_front();
    // A long launch's turns are whole launches (below): it runs them through,
    // and what it ran over a second is a few launches, no measure of it.
    const double grant = std::min(t.grant_bp, t.limit_bp) / 10000.0;
    const bool long_launch =
        t.charge_ns > 0 && static_cast<double>(t.charge_ns) > kLongLaunch * grant * period;
    // A long launch runs through its whole-launch turn, less the turn's
    // spare (below).
    if (long_launch) {
      st.efficiency =
          static_cast<double>(t.charge_ns) / static_cast<double>(LaunchTurn(t.charge_ns));
    }
    if (t.held && t.measured && !long_launch && !st.turns.empty()) {
      double held = 0;
      for (const auto& [at, share] : st.turns) held += share;
      held /= static_cast<double>(st.turns.size());
      if (held >= kMinShareSeen) {
        const double seen = std::clamp(t.ran_bp / 10000.0 / held, kMinEfficiency, 1.0);
        st.efficiency += kLearnRate * (seen - st.efficiency);
      }
    } else if (!t.held && !long_launch) {
      st.efficiency += kLearnRate * (1.0 - st.efficiency);
    }
    const double e = std::max(st.efficiency, kMinEfficiency);
    // Never a turn longer than its limit (it cannot run more than it holds),
    // but for a long launch's spare, which it does not run.
    most[k] = std::min(1.0, std::clamp<uint32_t>(t.limit_bp, 1, 10000) / 10000.0 /
                                (long_launch ? st.efficiency : 1.0));
    due[k] = std::min(most[k], grant / e);
    // No more than it can use (see the header).
    if (t.measured && !long_launch && st.last_ns >= 0 && due[k] < 1.0) {
      const double spare = static_cast<double>(kNeedSpareNs) / period;
      const double last = static_cast<double>(st.last_ns) / period;
      const double need =
          t.cut_off ? std::max(2 * last, last + spare) : t.ran_bp / 10000.0 / e * 1.25 + spare;
      most[k] = std::min(most[k], need);
      due[k] = std::min(due[k], most[k]);
    }
    base[k] = std::min(due[k], std::min(t.request_bp, t.grant_bp) / 10000.0 / e);
    states.emplace(t.group, std::move(st));
  }
  // Dues beyond the cycle are scaled down, what is beyond the requests first;
  // a cycle left over is shared among the groups that want more, in
  // proportion to their dues, up to their most.
  double total = 0;
  double bases = 0;
  for (size_t k = 0; k < due.size(); ++k) {
    total += due[k];
    bases += base[k];
  }
  if (total > 1.0) {
    const double keep = bases >= 1.0 ? 0.0 : (1.0 - bases) / std::max(total - bases, 1e-9);
    for (size_t k = 0; k < due.size(); ++k) {
      due[k] = bases >= 1.0 ? base[k] / bases : base[k] + (due[k] - base[k]) * keep;
    }
  } else {
    for (int pass = 0; pass < 4 && total < 1.0; ++pass) {
      double open = 0;  // dues of wanting groups below their most
      for (size_t k = 0; k < order.size(); ++k) {
        if (order[k]->wanting && due[k] < most[k]) open += std::max(due[k], 1e-6);
      }
      if (open <= 0) break;
      const double left = 1.0 - total;
      total = 0;
      for (size_t k = 0; k < order.size(); ++k) {
        if (order[k]->wanting && due[k] < most[k]) {
          due[k] = std::min(most[k], due[k] + left * std::max(due[k], 1e-6) / open);
        }
        total += due[k];
      }
    }
  }
  // Turns: a deficit round-robin in whole launches where they are long.
  std::vector<int64_t> length(order.size(), 0);
  std::vector<int64_t> launch(order.size(), 0);  // a long launch's turn; 0: not long
  int64_t used = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    State& st = states[order[k]->group];
    const auto want = static_cast<int64_t>(due[k] * period);
    if (due[k] >= 1.0 && order.size() == 1) {  // alone and unlimited: the whole cycle
      length[k] = period_ns_;
      st.credit_ns = 0;
    } else {
      st.credit_ns = std::min(st.credit_ns + want, 2 * period_ns_);
      const int64_t one = LaunchTurn(order[k]->charge_ns);
      if (!order[k]->measured) {
        // Its cost is not known yet (its charge is an upper bound, a wait
        // beside others included): a turn that holds one launch, or a
        // quarter of the cycle, so that it is measured in it.
        length[k] = std::max(std::max<int64_t>(0, st.credit_ns),
                             std::min(order[k]->charge_ns, period_ns_ / 4));
      } else if (order[k]->charge_ns > 0 &&
                 static_cast<double>(one) > kLongLaunch * static_cast<double>(want)) {
        // Whole launches; the first as soon as half of it is owed (a group
        // whose charge is stretched waits no more than half the time for a
        // turn that measures it again).
        launch[k] = one;
        length[k] = std::max<int64_t>(0, st.credit_ns + one / 2) / one * one;
      } else {
        length[k] = std::max<int64_t>(0, st.credit_ns);
      }
    }
    used += length[k];
  }
  // Whole launches may overfill the cycle: the long turns owed the least
  // wait a cycle, a launch at a time, until the long turns fit; then the other
  // turns shrink, in proportion. Each keeps its credit for the next.
  if (used > period_ns_) {
    int64_t longs = 0;
    for (size_t k = 0; k < order.size(); ++k) longs += launch[k] != 0 ? length[k] : 0;
    while (longs > period_ns_) {
      size_t pick = order.size();  // the long turn owed the least
      for (size_t k = 0; k < order.size(); ++k) {
        if (launch[k] == 0 || length[k] == 0) continue;
        if (pick == order.size() ||
            states[order[k]->group].credit_ns < states[order[pick]->group].credit_ns) {
          pick = k;
        }
      }
      if (pick == order.size()) break;
      length[pick] -= launch[pick];
      longs -= launch[pick];
      used -= launch[pick];
    }
    int64_t shrinkable = 0;
    for (size_t k = 0; k < order.size(); ++k) shrinkable += launch[k] == 0 ? length[k] : 0;
    const int64_t excess = used - period_ns_;
    if (excess > 0 && shrinkable > 0) {
      const double keep =
          std::max(0.0, 1.0 - static_cast<double>(excess) / static_cast<double>(shrinkable));
      for (size_t k = 0; k < order.size(); ++k) {
        if (launch[k] == 0) length[k] = static_cast<int64_t>(static_cast<double>(length[k]) * keep);
      }
    }
  }
  // Beside others no turn is the whole cycle: a whole cycle's turn has no end
  // to drain its queue by, and the next cycle's first holder would find it.
  if (order.size() > 1) {
    for (int64_t& l : length) l = std::min(l, period_ns_ - 1);
  }
  int64_t begin = 0;
  plan_.clear();
  for (size_t k = 0; k < order.size(); ++k) {
    State& st = states[order[k]->group];
    if (length[k] < period_ns_) st.credit_ns -= length[k];
    st.last_ns = length[k];
    st.credit_ns = std::max(st.credit_ns, -period_ns_);
    st.turns.emplace_back(start_ns, static_cast<double>(length[k]) / period);
    plan_[order[k]->group] = TurnPlan{
        .epoch_ns = start_ns, .period_ns = period_ns_, .begin_ns = begin, .length_ns = length[k]};
    begin += length[k];
  }
  states_ = std::move(states);
  planned_from_ns_ = start_ns;
}

}  // namespace gpuslice::control
