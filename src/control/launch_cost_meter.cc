#include "control/launch_cost_meter.h"

#include <algorithm>

namespace gpuslice::control {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;

double Ratio(uint64_t busy_ns, uint64_t launches) {
  return launches == 0 ? 0 : static_cast<double>(busy_ns) / static_cast<double>(launches);
}

}  // namespace

int64_t LaunchCostMeter::ChargeOf(const std::deque<Point>& history, bool bound) {
  if (history.size() < 2) return 0;
  const Point& newest = history.back();
  const auto busy_of = [&](const Point& p) { return bound ? p.bound_ns : p.busy_ns; };
  const auto launches_of = [&](const Point& p) {
    return bound ? p.bound_launches : p.busy_launches;
  };
  // The newest evidence that holds the minimums, stretched back to the
  // horizon: a member that launches rarely is charged by its latest launches,
  // however old, not by none.
  size_t from = history.size() - 1;
  while (from > 0 &&
         (busy_of(newest) - busy_of(history[from]) < static_cast<uint64_t>(kMinEvidenceNs) ||
          launches_of(newest) - launches_of(history[from]) < kMinLaunches)) {
    --from;
  }
  while (from > 0 && newest.t_ns - history[from - 1].t_ns <= kHorizonNs) --from;
  const uint64_t busy = busy_of(newest) - busy_of(history[from]);
  const uint64_t launches = launches_of(newest) - launches_of(history[from]);
  if (busy < static_cast<uint64_t>(kMinEvidenceNs) || launches < kMinLaunches) return 0;
  return static_cast<int64_t>(Ratio(busy, launches));
}

bool LaunchCostMeter::Tick() {
  const int64_t now = clock_.NowNs();
  const std::vector<GroupSegment::MemberRef> live = segment_.Members();
  bool paced = false;
  const int n = std::min(segment_.device_count(), kGroupMaxDevices);
  for (int d = 0; d < n; ++d) {
    TickDevice(d, live, now);
    paced = paced || (segment_.schedule().ComputeLimitedMask() & (1u << d)) != 0;
  }
  return paced;
}

void LaunchCostMeter::TickDevice(int dev, const std::vector<GroupSegment::MemberRef>& live,
                                 int64_t now) {
  Device& d = devices_[dev];
  // Members that left (or whose slot has a new owner) keep what they completed.
  for (auto it = d.members.begin(); it != d.members.end();) {
    const auto same = std::find_if(live.begin(), live.end(), [&](const GroupSegment::MemberRef& m) {
      return m.slot == it->first && m.joined_ns == it->second.joined_ns;
    });
    if (same != live.end()) {
      ++it;
      continue;
    }
    if (!it->second.history.empty()) d.gone_completed += it->second.history.back().completed;
    it = d.members.erase(it);
  }
  uint64_t completed = d.gone_completed;
  double weighted = 0;   // charge x launches over the last second, members with a charge
  uint64_t counted = 0;  // those launches
  double bounded = 0;    // the same for the members' bounds
  uint64_t bound_counted = 0;
  double floored = 0;  // ...and their floors
  uint64_t floor_counted = 0;
  for (const GroupSegment::MemberRef& ref : live) {
    Member& m = d.members[ref.slot];
    m.joined_ns = ref.joined_ns;
    const ComputeUsage::SlotBusy busy = segment_.usage().SlotBusyOf(ref.slot, dev);
    const uint64_t launches = segment_.usage().SlotLaunches(ref.slot, dev);
    const uint64_t queued =
        std::min<uint64_t>(segment_.usage().SlotQueued(ref.slot, dev), launches);
    Point p{now,           busy.busy_ns,       busy.launches, launches - queued,
            busy.bound_ns, busy.bound_launches};
    if (!m.history.empty()) {
      // Never backwards (a count another member scribbled on is not evidence).
      const Point& last = m.history.back();
      p.busy_ns = std::max(p.busy_ns, last.busy_ns);
      p.busy_launches = std::max(p.busy_launches, last.busy_launches);
      p.completed = std::max(p.completed, last.completed);
      p.bound_ns = std::max(p.bound_ns, last.bound_ns);
      p.bound_launches = std::max(p.bound_launches, last.bound_launches);
    }
    m.history.push_back(p);
    while (m.history.size() > 2 && now - m.history[1].t_ns >= kMaxAgeNs) m.history.pop_front();
    // A workload change: the newest kRecentNs of evidence alone, when it
    // disagrees with the horizon. Lower evidence needs less of it: a measured
    // interval is never shorter than the launches' device time (another
    // context that ran in it, at a group's start before every group takes
    // turns, only lengthens it), so the newest kFewLaunches launches well
    // below the rest mean the rest was stretched, or kernels got shorter.
    size_t recent = m.history.size() - 1;
    while (recent > 0 && now - m.history[recent - 1].t_ns <= kRecentNs) --recent;
    size_t few = m.history.size() - 1;
    while (few > 0 && p.busy_launches - m.history[few].busy_launches < kFewLaunches) --few;
    const auto horizon = static_cast<double>(ChargeOf(m.history));
    const auto ratio_from = [&](size_t i) {
      return Ratio(p.busy_ns - m.history[i].busy_ns, p.busy_launches - m.history[i].busy_launches);
    };
    size_t cut = 0;
    if (recent > 0) {
      const std::deque<Point> tail(m.history.begin() + static_cast<std::ptrdiff_t>(recent),
                                   m.history.end());
      const auto fresh = static_cast<double>(ChargeOf(tail));
      if (horizon > 0 && fresh > 0 &&
          (fresh > horizon * kShiftRatio || fresh * kShiftRatio < horizon)) {
        cut = recent;
      }
    }
    // (Against the charge in use where the evidence since a cut is thin.)
    const double standing = horizon > 0 ? horizon : static_cast<double>(m.charge_ns);
    if (cut == 0 && few > 0 && standing > 0 &&
        p.busy_launches - m.history[few].busy_launches >= kFewLaunches &&
        ratio_from(few) * kShiftRatio < standing) {
      cut = few;
    }
    if (cut > 0) {
      m.charge_ns = static_cast<int64_t>(ratio_from(cut));  // what made the cut, at once
      m.history.erase(m.history.begin(), m.history.begin() + static_cast<std::ptrdiff_t>(cut));
    }
    if (const int64_t c = ChargeOf(m.history); c > 0) m.charge_ns = c;
    if (const int64_t c = ChargeOf(m.history, /*bound=*/true); c > 0) m.bound_ns = c;
    completed += p.completed;
    size_t from = m.history.size() - 1;
    while (from > 0 && now - m.history[from - 1].t_ns <= kSecondNs) --from;
    const uint64_t n = p.completed - m.history[from].completed;
    if (m.charge_ns > 0) {
      weighted += static_cast<double>(m.charge_ns) * static_cast<double>(n);
      counted += n;
    }
    if (m.bound_ns > 0) {
      bounded += static_cast<double>(m.bound_ns) * static_cast<double>(n);
      bound_counted += n;
    }
    if (busy.bound_floor_ns > 0) {
      floored += static_cast<double>(busy.bound_floor_ns) * static_cast<double>(n);
      floor_counted += n;
    }
  }
  if (floor_counted > 0) {
    d.floor_ns = static_cast<int64_t>(floored / static_cast<double>(floor_counted));
  }
  d.completed = std::max(d.completed, completed);
  if (counted > 0)
    d.group_charge_ns = static_cast<int64_t>(weighted / static_cast<double>(counted));
  if (bound_counted > 0) {
    d.bound_ns = static_cast<int64_t>(bounded / static_cast<double>(bound_counted));
  }
  for (const GroupSegment::MemberRef& ref : live) {
    const Member& m = d.members[ref.slot];
    const int64_t charge = m.charge_ns > 0         ? m.charge_ns
                           : fallback_ns_[dev] > 0 ? fallback_ns_[dev]
                                                   : d.group_charge_ns;
    if (charge > 0) segment_.usage().PublishSlotCharge(ref.slot, dev, charge);
  }
  if (d.group_charge_ns > 0 || fallback_ns_[dev] > 0) {
    segment_.usage().PublishEstimate(
        dev, ComputeUsage::Estimate{
                 .charge_ns = d.group_charge_ns > 0 ? d.group_charge_ns : fallback_ns_[dev],
                 .share_bp = -1,
                 .measured_at_ns = now});
  }
}

}  // namespace gpuslice::control
