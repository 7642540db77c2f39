#include "control/cost_estimator.h"

#include <algorithm>

namespace gpuslice::control {

void CostEstimator::RecordLaunches(int64_t t_ns, uint64_t total, int64_t spread_from_ns) {
  if (!history_.empty() && t_ns <= history_.back().t_ns) {
    history_.back().total = std::max(history_.back().total, total);
    return;
  }
  const bool spread = spread_from_ns >= 0 && !history_.empty() && total > history_.back().total;
  if (spread) {
    const uint64_t flat = history_.back().total;
    while (history_.size() > 1 && history_.back().t_ns > spread_from_ns &&
           history_[history_.size() - 2].total == flat) {
      history_.pop_back();
    }
  }
  history_.push_back({t_ns, total});
  if (spread) {
    for (auto it = spans_.rbegin(); it != spans_.rend() && it->end_ns > spread_from_ns; ++it) {
      it->launches = LaunchesBetween(it->start_ns, it->end_ns);
    }
  }
  while (history_.size() > 2 && history_[1].t_ns < t_ns - options_.history_ns) {
    history_.pop_front();
  }
}

double CostEstimator::LaunchesAt(int64_t t_ns) const {
  if (history_.empty()) return 0;
  if (t_ns <= history_.front().t_ns) return static_cast<double>(history_.front().total);
  if (t_ns >= history_.back().t_ns) return static_cast<double>(history_.back().total);
  auto hi = std::lower_bound(history_.begin(), history_.end(), t_ns,
                             [](const Point& p, int64_t t) { return p.t_ns < t; });
  auto lo = hi - 1;
  const double f = static_cast<double>(t_ns - lo->t_ns) / static_cast<double>(hi->t_ns - lo->t_ns);
  return static_cast<double>(lo->total) +
         f * (static_cast<double>(hi->total) - static_cast<double>(lo->total));
}

double CostEstimator::LaunchesBetween(int64_t start_ns, int64_t end_ns) const {
  return std::max(0.0, LaunchesAt(end_ns) - LaunchesAt(start_ns));
}

namespace {

// NVML reports whole percent: a window it rounds to 0 was less than half a
// percent busy.
constexpr double kRoundingFloor = 0.005;

}  // namespace

void CostEstimator::AddBusy(int64_t start_ns, int64_t end_ns, double busy_fraction, bool sampled) {
  if (end_ns <= start_ns) return;
  busy_fraction = std::clamp(busy_fraction, 0.0, 1.0);
  const double launches = LaunchesBetween(start_ns, end_ns);
  // A group that launched in a window NVML rounds to 0 % was busy for less
  // than half a percent of it: counted as that much (an upper bound), so the
  // estimate of very short kernels comes down rather than staying unknown.
  if (sampled && busy_fraction <= 0 && launches >= 1) busy_fraction = kRoundingFloor;
  spans_.push_back({start_ns, end_ns, busy_fraction * static_cast<double>(end_ns - start_ns),
                    launches, sampled});
  while (!spans_.empty() && spans_.front().end_ns < end_ns - options_.max_horizon_ns) {
    spans_.pop_front();
  }
  const uint64_t shifts = shifts_;
  DetectShift();
  if (shifts_ != shifts) {
    shift_seen_ns_ = end_ns;
  } else if (shift_seen_ns_ > 0) {
    ConfirmShift();
  }
}

void CostEstimator::ConfirmShift() {
  size_t first = 0;
  bool complete = false;
  RatioNewest(options_.recent_ns, static_cast<double>(options_.recent_launches), &first, &complete);
  if (!complete || first >= spans_.size()) return;
  if (spans_[first].start_ns < shift_seen_ns_) return;  // not yet on its own
  spans_.erase(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(first));
  shift_seen_ns_ = 0;
}

double CostEstimator::RatioNewest(int64_t min_ns, double min_launches, size_t* first,
                                  bool* complete) const {
  // Newest first, until enough evidence. Spans with neither launches nor
  // busy time (the group idle) say nothing about the cost.
  double busy = 0;
  double launches = 0;
  int64_t span = 0;
  size_t oldest = spans_.size();
  uint32_t sampled = 0;  // spans with a sample and busy time
  for (size_t i = spans_.size(); i-- > 0;) {
    const Span& s = spans_[i];
    if (s.launches <= 0 && s.busy_ns <= 0) continue;
    busy += s.busy_ns;
    launches += s.launches;
    span += s.end_ns - s.start_ns;
    sampled += s.sampled && s.busy_ns > 0 ? 1 : 0;
    oldest = i;
    // A span busy with (next to) no launches holds the device time of
    // launches counted before it (admitted, then queued: a backlog drains
    // over a second after its launches were counted): it is not cut from
    // them. (Judged against the ratio so far: a group of few, long launches
    // has spans of less than one launch that are nothing of the kind.)
    const bool with_its_launches =
        s.busy_ns <= 0 || s.launches * busy >= 0.25 * s.busy_ns * launches;
    if (span >= min_ns && launches >= min_launches && with_its_launches &&
        sampled >= options_.min_sampled_spans) {
      break;
    }
  }
  if (first != nullptr) *first = oldest;
  if (complete != nullptr) *complete = span >= min_ns && launches >= min_launches;
  // After a change the newest evidence alone stands (it was enough to see it).
  const int64_t thin_ns =
      shifts_ > 0 ? std::min(options_.min_span_ns, options_.recent_ns) : options_.min_span_ns;
  if (span < std::min(min_ns, thin_ns) || launches < static_cast<double>(options_.min_launches) ||
      busy <= 0) {
    return 0;
  }
  return busy / launches;
}

void CostEstimator::DetectShift() {
  size_t first = 0;
  bool complete = false;
  const double recent = RatioNewest(
      options_.recent_ns, static_cast<double>(options_.recent_launches), &first, &complete);
  // Only older evidence can disagree with the newest: the spans before it,
  // up to a horizon's worth.
  if (recent <= 0 || !complete || first == 0) return;
  // A span in which the group launched but had no sample (NVML gave the
  // window to another process: window attribution) is known only on
  // average: evidence that holds one is no ground for a shift either way
  // (a window won after windows lost is no workload 5x longer).
  const auto unknown = [](const Span& s) { return !s.sampled && s.launches > 0; };
  for (size_t i = first; i < spans_.size(); ++i) {
    if (unknown(spans_[i])) return;
  }
  double busy = 0;
  double launches = 0;
  int64_t span = 0;
  for (size_t i = first; i-- > 0;) {
    const Span& s = spans_[i];
    if (s.launches <= 0 && s.busy_ns <= 0) continue;
    if (unknown(s)) return;
    busy += s.busy_ns;
    launches += s.launches;
    span += s.end_ns - s.start_ns;
    if (span >= options_.horizon_ns && launches >= static_cast<double>(options_.horizon_launches)) {
      break;
    }
  }
  if (launches < static_cast<double>(options_.min_launches) || busy <= 0) return;
  const double ratio = recent / (busy / launches);
  if (ratio > options_.shift_factor || ratio < 1 / options_.shift_factor) {
    spans_.erase(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(first));
    ++shifts_;
  }
}

int64_t CostEstimator::CostNs() const {
  const double cost = RatioNewest(options_.horizon_ns,
                                  static_cast<double>(options_.horizon_launches), nullptr, nullptr);
  return cost > 0 ? std::max<int64_t>(1, static_cast<int64_t>(cost)) : 0;
}

double CostEstimator::RecentShare(int64_t window_ns) const {
  if (spans_.empty()) return -1;
  const int64_t from = spans_.back().end_ns - window_ns;
  double busy = 0;
  int64_t span = 0;
  for (auto it = spans_.rbegin(); it != spans_.rend() && it->end_ns > from; ++it) {
    busy += it->busy_ns;
    span += it->end_ns - it->start_ns;
  }
  return span > 0 ? busy / static_cast<double>(span) : -1;
}

}  // namespace gpuslice::control
