#include "control/usage_meter.h"

#include <algorithm>

namespace gpuslice::control {
namespace {

uint32_t Bp(double device_ns, int64_t span_ns) {
  if (span_ns <= 0 || device_ns <= 0) return 0;
  return static_cast<uint32_t>(
      std::min(10000.0, device_ns * 10000.0 / static_cast<double>(span_ns)));
}

}  // namespace

double UsageMeter::CompletedAt(const State& st, int64_t t_ns) {
  const std::deque<Sample>& s = st.samples;
  if (s.empty()) return 0;
  if (t_ns <= s.front().t_ns) return static_cast<double>(s.front().completed);
  if (t_ns >= s.back().t_ns) return static_cast<double>(s.back().completed);
  const auto after = std::lower_bound(s.begin(), s.end(), t_ns,
                                      [](const Sample& x, int64_t t) { return x.t_ns < t; });
  const Sample& b = *after;
  const Sample& a = *(after - 1);
  const double f = static_cast<double>(t_ns - a.t_ns) / static_cast<double>(b.t_ns - a.t_ns);
  return static_cast<double>(a.completed) +
         f * (static_cast<double>(b.completed) - static_cast<double>(a.completed));
}

void UsageMeter::Tick(int64_t now_ns, const std::vector<Group>& groups,
                      const std::vector<BusyWindow>& windows) {
  std::map<std::string, State, std::less<>> next;
  for (const Group& g : groups) {
    auto it = states_.find(g.name);
    State st = it != states_.end() ? std::move(it->second) : State{};
    if (!st.samples.empty() &&
        (g.launches < st.samples.back().launches || g.completed < st.samples.back().completed)) {
      st = State{};  // a new segment under the same name
    }
    st.latency = g.latency;
    st.charge_ns = g.charge_ns;
    st.bound_ns = g.bound_ns;
    st.floor_ns = g.floor_ns;
    st.samples.push_back({now_ns, g.launches, g.completed});
    while (st.samples.size() > 1 && now_ns - st.samples[1].t_ns >= kMaxWindowNs) {
      st.samples.pop_front();
    }
    next.emplace(g.name, std::move(st));
  }
  states_ = std::move(next);

  for (const BusyWindow& w : windows) {
    if (w.length_ns > 0 && (windows_.empty() || w.end_ns > windows_.back().end_ns)) {
      windows_.push_back(w);
    }
  }
  while (!windows_.empty() && now_ns - windows_.front().end_ns > kResidualNs) windows_.pop_front();
  {
    double busy = 0;
    int64_t span = 0;
    for (const BusyWindow& w : windows_) {
      if (now_ns - w.end_ns > kWindowNs) continue;
      busy += w.busy * static_cast<double>(w.length_ns);
      span += w.length_ns;
    }
    device_busy_bp_ = span > 0 ? static_cast<int32_t>(Bp(busy, span)) : device_busy_bp_;
  }
  Residual(now_ns);

  for (auto& entry : states_) {
    State& st = entry.second;
    int64_t charge = st.charge_ns;
    if (st.latency) {
      if (st.residual_known) {
        charge = std::max<int64_t>(kMinResidualChargeNs, st.residual_charge_ns);
        if (st.bound_ns > 0) charge = std::min(charge, st.bound_ns);
      } else if (charge <= 0) {
        charge = st.bound_ns;
      }
    }
    const Sample& newest = st.samples.back();
    // The shortest window of at least kWindowNs holding kMinWindowLaunches
    // (longer than kWindowNs only for long launches: a group of short ones
    // with few launches in the second ran little, and a longer window would
    // report what it ran before it went quiet).
    const bool stretch = charge >= kStretchChargeNs;
    size_t from = st.samples.size() - 1;
    while (from > 0 &&
           (now_ns - st.samples[from].t_ns < kWindowNs ||
            (stretch && newest.completed - st.samples[from].completed < kMinWindowLaunches))) {
      --from;
    }
    size_t fast = st.samples.size() - 1;
    while (fast > 0 && now_ns - st.samples[fast].t_ns < kFastWindowNs) --fast;
    size_t recent = st.samples.size() - 1;
    while (recent > 0 && now_ns - st.samples[recent - 1].t_ns <= kWindowNs) --recent;
    const auto ran = [&](size_t i) {
      return static_cast<double>(newest.completed - st.samples[i].completed) *
             static_cast<double>(charge);
    };
    st.reading = Reading{
        .used_bp = Bp(ran(from), now_ns - st.samples[from].t_ns),
        .used_fast_bp = Bp(ran(fast), now_ns - st.samples[fast].t_ns),
        .floor_bp = Bp(static_cast<double>(newest.completed - st.samples[from].completed) *
                           static_cast<double>(st.floor_ns),
                       now_ns - st.samples[from].t_ns),
        .launched = recent + 1 < st.samples.size() && newest.launches > st.samples[recent].launches,
        .charge_ns = charge};
  }
}

UsageMeter::Reading UsageMeter::Of(std::string_view group) const {
  auto it = states_.find(group);
  return it == states_.end() ? Reading{} : it->second.reading;
}

void UsageMeter::Residual(int64_t now_ns) {
  // The windows of the last kResidualNs that the groups' samples cover.
  int64_t covered_from = now_ns;
  bool any_latency = false;
  for (const auto& [name, st] : states_) {
    covered_from = std::min(covered_from, st.samples.front().t_ns);
    any_latency = any_latency || st.latency;
  }
  if (!any_latency) return;
  double device = 0;
  double batch = 0;
  bool batch_known = true;                      // every batch group that ran has a charge
  std::map<std::string_view, double> launches;  // latency group -> launches over the windows
  for (const BusyWindow& w : windows_) {
    const int64_t start = w.end_ns - w.length_ns;
    if (start < covered_from || w.end_ns > now_ns) continue;
    device += w.busy * static_cast<double>(w.length_ns);
    for (const auto& [name, st] : states_) {
      const double n = CompletedAt(st, w.end_ns) - CompletedAt(st, start);
      if (st.latency) {
        launches[name] += n;
      } else {
        // Not measured yet: its upper bound (the latency groups' residual is
        // then too small, never too large).
        const int64_t charge = st.charge_ns > 0 ? st.charge_ns : st.bound_ns;
        batch += n * static_cast<double>(charge);
        batch_known = batch_known && (n <= 0 || charge > 0);
      }
    }
  }
  // A batch group with no bound of its cost either would be taken for the
  // latency groups': their charges stand as they were.
  if (!batch_known) return;
  // Latency launches, weighted by their own charges where every one has one
  // (else each launch counts the same).
  bool all_known = true;
  for (const auto& [name, st] : states_) all_known = all_known && (!st.latency || st.charge_ns > 0);
  const auto weight = [&](const State& st) {
    return all_known ? static_cast<double>(st.charge_ns) : 1.0;
  };
  double weighted = 0;
  for (const auto& [name, n] : launches) weighted += n * weight(states_.find(name)->second);
  if (weighted <= 0) return;
  const double left = std::max(0.0, device - batch);
  for (auto& [name, st] : states_) {
    if (!st.latency) continue;
    const double w = weight(st);
    // Each launch's part of what the device ran beside the batch groups,
    // smoothed over ticks (the pacing it sets moves the launches it divides).
    const double fresh = left * w / weighted;
    st.residual_charge_ns =
        st.residual_known ? static_cast<int64_t>(kResidualSmoothing * fresh +
                                                 (1 - kResidualSmoothing) *
                                                     static_cast<double>(st.residual_charge_ns))
                          : static_cast<int64_t>(fresh);
    if (st.bound_ns > 0) st.residual_charge_ns = std::min(st.residual_charge_ns, st.bound_ns);
    st.residual_known = true;
  }
}

}  // namespace gpuslice::control
