#include "control/compute_controller.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "common/log.h"

namespace gpuslice::control {
namespace {

// After this long with launches but no sample of any member, say why the
// charge stays at the bootstrap measurement.
constexpr int64_t kUnmatchedWarnNs = 5'000'000'000;

// A device whose processes together were this busy (percent) has no room
// for a group to take more (the time contexts lose switching is not in any
// process's share).
constexpr double kFullDevicePercent = 90.0;

// Every process's busy percent on the device over the samples newer than
// `since_us` (each process: the mean of its samples), summed.
double DevicePercent(const std::vector<UtilizationSample>& samples, uint64_t since_us) {
  std::map<uint32_t, std::pair<double, int>> by_pid;
  for (const UtilizationSample& s : samples) {
    if (s.timestamp_us <= since_us) continue;
    auto& [sum, n] = by_pid[s.pid];
    sum += s.sm_percent;
    ++n;
  }
  double total = 0;
  for (const auto& [pid, mean] : by_pid) total += mean.first / mean.second;
  return total;
}

}  // namespace

ComputeController::ComputeController(GroupSegment& segment, UtilizationSource& source,
                                     Members members, Clocks clocks, DeviceBusySource* device_busy)
    : segment_(segment),
      source_(source),
      device_busy_(device_busy),
      members_(std::move(members)),
      clocks_(clocks) {}

ComputeController::ComputeController(GroupSegment& segment, UtilizationSource& source,
                                     MemberPids pids, Clocks clocks, DeviceBusySource* device_busy)
    : ComputeController(segment, source, Members([pids = std::move(pids)] {
                          std::vector<Member> out;
                          for (int32_t pid : pids()) out.push_back({.pid = pid});
                          return out;
                        }),
                        clocks, device_busy) {}

ComputeController::Members ComputeController::SlotMembers(const GroupSegment& segment) {
  return [&segment] {
    std::vector<Member> out;
    for (const GroupSegment::MemberRef& m : segment.Members()) {
      out.push_back({.pid = m.pid, .slot = m.slot});
    }
    return out;
  };
}

bool ComputeController::Tick() {
  const uint32_t limited = segment_.schedule().ComputeLimitedMask();
  if (limited == 0) return false;
  const int count = segment_.device_count();
  std::vector<Member> members;
  bool listed = false;
  for (int dev = 0; dev < count; ++dev) {
    if ((limited & (1u << dev)) == 0) continue;
    if (!listed) {
      members = members_();
      listed = true;
    }
    if (devices_[dev] == nullptr) devices_[dev] = std::make_unique<Device>();
    TickDevice(dev, *devices_[dev], members);
  }
  return true;
}

uint64_t ComputeController::Shifts(int dev) const {
  if (dev < 0 || dev >= kGroupMaxDevices || devices_[dev] == nullptr) return 0;
  const Device& d = *devices_[dev];
  uint64_t shifts = d.estimator.shifts() + d.unslotted.shifts();
  for (const auto& [slot, st] : d.slots) shifts += st.estimator.shifts();
  return shifts;
}

uint64_t ComputeController::RecordSlots(int dev, Device& d, const std::vector<Member>& members,
                                        int64_t now_real) {
  std::set<int> slotted;
  for (const Member& m : members) {
    if (m.slot >= 0) slotted.insert(m.slot);
  }
  std::map<int, SlotState> live;
  d.unknown.clear();
  d.unslotted_queued = false;
  uint64_t queued_total = 0;
  for (const GroupSegment::MemberRef& ref : segment_.Members()) {
    const uint64_t count = segment_.usage().SlotLaunches(ref.slot, dev);
    // A launch counts when the GPU has run it (the member saw its marker
    // complete: SlotCompute::queued), the time its busy time arrives.
    uint64_t queued = std::min<uint64_t>(segment_.usage().SlotQueued(ref.slot, dev), count);
    auto it = d.slots.find(ref.slot);
    if (it == d.slots.end() || it->second.joined_ns != ref.joined_ns) {
      // A member seen for the first time: its launches so far are no
      // evidence of this tick's.
      SlotState fresh;
      fresh.joined_ns = ref.joined_ns;
      fresh.estimator.SetOptions(d.estimator.options());
      fresh.last_launches = count;
      fresh.last_done = count - queued;
      fresh.launched_ns = now_real;
      it = d.slots.insert_or_assign(ref.slot, std::move(fresh)).first;
    }
    SlotState& st = it->second;
    if (count != st.last_launches) st.launched_ns = now_real;
    if (now_real - st.launched_ns >= kQueueSettleNs) queued = 0;
    const uint64_t done = count - queued;
    uint64_t delta = 0;
    if (count < st.last_launches) {
      delta = done;  // the count started again
      st.last_done = done;
    } else if (done > st.last_done) {
      delta = done - st.last_done;
      st.last_done = done;
    }
    st.last_launches = count;
    st.launches += delta;
    queued_total += queued;
    if (slotted.contains(ref.slot)) {
      st.completed.Record(st.estimator, now_real, st.launches, queued > 0);
    } else {
      d.unslotted_launches += delta;
      d.unslotted_queued = d.unslotted_queued || queued > 0;
      d.unknown.insert(ref.slot);
    }
    live.insert({ref.slot, std::move(st)});
  }
  d.slots = std::move(live);  // the departed members' go
  d.unslotted_completed.Record(d.unslotted, now_real, d.unslotted_launches, d.unslotted_queued);
  return queued_total;
}

CostEstimator::Options ComputeController::WindowAttributionOptions() {
  CostEstimator::Options o;
  // Fifty windows of 200 ms at least: a group with a sixth of the device is
  // credited about eight of them, instead of one or two (over thirty, the
  // estimate was still up to 1.9x off).
  o.horizon_ns = 10'000'000'000;
  o.max_horizon_ns = 30'000'000'000;
  // And at least eight windows it won: a group with a sixth of the device
  // wins a window in six, and one that lost ten in a row (it happens every
  // few seconds) was charged a fraction of its cost and ran at twice its
  // limit.
  o.min_sampled_spans = 8;
  o.min_span_ns = 1'000'000'000;
  // Only a change seen over ten windows, and by more than the few windows'
  // spread, is a workload shift.
  o.recent_ns = 2'000'000'000;
  o.shift_factor = 4.0;
  return o;
}

void ComputeController::NoteAttribution(Device& d,
                                        const std::vector<std::pair<size_t, uint32_t>>& windows) {
  for (const auto& w : windows) {
    d.windows.push_back(w);
    while (d.windows.size() > kWindowAttributionWindows) d.windows.pop_front();
  }
  std::set<uint32_t> pids;
  bool one_each = true;
  for (const auto& [count, pid] : d.windows) {
    one_each = one_each && count == 1;
    pids.insert(pid);
  }
  // Split evidence settles it at once. Window attribution takes
  // kWindowAttributionWindows in a row after split evidence, and is assumed
  // from the first windows of two processes before any: a member that just
  // joined its group's other member has no sample of the windows the other
  // won, and until the estimators take the window options, the evidence of
  // the few windows in their short horizon is all or nothing for each.
  using Attribution = Device::Attribution;
  Attribution next = d.attribution;
  if (std::any_of(windows.begin(), windows.end(), [](const auto& w) { return w.first >= 2; })) {
    next = Attribution::kSplit;
  } else if (one_each && pids.size() >= 2 &&
             (d.attribution == Attribution::kUnknown ||
              d.windows.size() == kWindowAttributionWindows)) {
    next = Attribution::kWindow;
  }
  // One process alone on the device leaves it as it was.
  if (next == d.attribution) return;
  const bool was_window = d.attribution == Attribution::kWindow;
  d.attribution = next;
  const bool window_attribution = next == Attribution::kWindow;
  GS_LOG(kInfo, "control", "event=nvml_attribution group=%s mode=%s", segment_.group().c_str(),
         window_attribution ? "window" : "split");
  if (window_attribution == was_window) return;  // unknown -> split: the options stay
  const CostEstimator::Options options =
      window_attribution ? WindowAttributionOptions() : CostEstimator::Options{};
  d.estimator.SetOptions(options);
  d.unslotted.SetOptions(options);
  for (auto& [slot, st] : d.slots) st.estimator.SetOptions(options);
}

ComputeController::Quiet ComputeController::QuietSince(int dev, uint64_t since_us) {
  if (device_busy_ == nullptr) return {};
  auto busy = device_busy_->BusySince(segment_.DeviceUuid(dev), since_us);
  if (!busy.ok() || busy->empty()) return {};
  double sum = 0;
  int n = 0;
  uint64_t end_us = 0;
  for (const DeviceBusySample& s : *busy) {
    if (s.timestamp_us <= since_us) continue;
    if (s.percent > kQuietPercent) return {};  // something ran: its sample will come
    sum += s.percent;
    ++n;
    end_us = std::max(end_us, s.timestamp_us);
  }
  if (n == 0 || end_us < since_us + kQuietSpanUs) return {};
  return {.end_us = end_us, .percent = sum / n};
}

void ComputeController::TickDevice(int dev, Device& d, const std::vector<Member>& members) {
  const int64_t now_real = clocks_.realtime.NowNs();
  const uint64_t launches = segment_.usage().Launches(dev);
  // Waits that are not the budget's: a pause, the scheduler's (a burst or
  // turns it set). Looked at every tick: a pause can begin and end between
  // two windows.
  d.waited_otherwise |= segment_.schedule().Paused() ||
                        segment_.schedule().ComputeBurst(dev) != 0 ||
                        segment_.schedule().TurnAt(dev, clocks_.monotonic.NowNs()).period_ns > 0;
  if (d.first_tick_ns == 0) {
    d.first_tick_ns = now_real;
    d.last_seen_us = static_cast<uint64_t>(now_real / 1000);
    d.launches_at_first_tick = launches;
  }
  // The group's launches the GPU has run: those its members have not seen
  // complete are still queued.
  const uint64_t queued = RecordSlots(dev, d, members, now_real);
  d.completed.Record(d.estimator, now_real,
                     std::max(d.completed.total, launches - std::min(launches, queued)),
                     queued > 0);
  // Until the first paced launch, the device's busy time is work queued
  // before pacing began (a group that just got a limit or a grant drains
  // its queue first): it is no evidence of what a launch costs.
  if (!d.paced_launch_seen) {
    if (launches == d.launches_at_first_tick) {
      d.last_seen_us = std::max(d.last_seen_us, static_cast<uint64_t>(now_real / 1000));
      return;
    }
    d.paced_launch_seen = true;
  }

  auto samples = source_.SamplesSince(segment_.DeviceUuid(dev), d.last_seen_us);
  if (!samples.ok()) {
    if (!warned_unavailable_) {
      warned_unavailable_ = true;
      GS_LOG(kWarn, "control",
             "no utilization samples (%s): group '%s''s compute limits are paced by the "
             "bootstrap measurement of each launch (an upper bound; shares may stay below "
             "their limit)",
             samples.status().message().c_str(), segment_.group().c_str());
    }
    return;
  }
  // The windows the samples close, oldest first (samples less than
  // kSameWindowUs apart are one window's). Each window's samples are
  // credited to that window alone: the span from the previous window's close
  // to its own (under window attribution a tick may read two windows, each
  // of another process).
  std::vector<UtilizationSample> fresh;
  for (const UtilizationSample& s : *samples) {
    if (s.timestamp_us > d.last_seen_us) fresh.push_back(s);
  }
  std::sort(fresh.begin(), fresh.end(), [](const UtilizationSample& a, const UtilizationSample& b) {
    return a.timestamp_us < b.timestamp_us;
  });
  struct Window {
    uint64_t first_us = 0;
    uint64_t end_us = 0;
    std::vector<UtilizationSample> samples;
    double quiet_percent = -1;  // >= 0: the device's own figure, no process sample (QuietSince)
  };
  std::vector<Window> windows;
  for (const UtilizationSample& s : fresh) {
    if (windows.empty() || s.timestamp_us - windows.back().first_us > kSameWindowUs) {
      windows.push_back({.first_us = s.timestamp_us, .end_us = s.timestamp_us, .samples = {}});
    }
    windows.back().end_us = s.timestamp_us;
    windows.back().samples.push_back(s);
  }
  if (windows.empty()) {
    const Quiet quiet = QuietSince(dev, d.last_seen_us);
    if (quiet.end_us == 0) return;  // no window closed since
    windows.push_back({.first_us = quiet.end_us,
                       .end_us = quiet.end_us,
                       .samples = {},
                       .quiet_percent = quiet.percent});
  }
  {
    std::vector<std::pair<size_t, uint32_t>> seen;
    seen.reserve(windows.size());
    for (const Window& w : windows) {
      if (w.quiet_percent >= 0) continue;  // the device's figure: no process's sample
      std::set<uint32_t> pids;
      for (const UtilizationSample& s : w.samples) pids.insert(s.pid);
      seen.emplace_back(pids.size(), *pids.begin());
    }
    NoteAttribution(d, seen);
  }
  const uint64_t newest_us = windows.back().end_us;
  bool matched = false;
  double device_percent = 0;  // the windows' mean
  for (const Window& w : windows) {
    // Each member's busy percent of the window (the mean of its samples).
    std::vector<double> member_percent(members.size(), -1);
    double busy_percent = 0;
    double unslotted_percent = 0;
    bool matched_here = false;
    if (w.quiet_percent >= 0) {  // the device's own figure bounds every member's
      std::fill(member_percent.begin(), member_percent.end(), w.quiet_percent);
      busy_percent = unslotted_percent = w.quiet_percent;
      matched_here = true;
    }
    for (size_t i = 0; i < members.size() && w.quiet_percent < 0; ++i) {
      double sum = 0;
      int samples_of_pid = 0;
      for (const UtilizationSample& s : w.samples) {
        if (static_cast<int32_t>(s.pid) == members[i].pid) {
          sum += s.sm_percent;
          ++samples_of_pid;
        }
      }
      if (samples_of_pid == 0) continue;
      member_percent[i] = sum / samples_of_pid;
      busy_percent += member_percent[i];
      if (members[i].slot < 0 || !d.slots.contains(members[i].slot)) {
        unslotted_percent += member_percent[i];
      }
      matched_here = true;
    }
    device_percent += (w.quiet_percent >= 0 ? w.quiet_percent : DevicePercent(w.samples, 0)) /
                      static_cast<double>(windows.size());
    const auto start_ns = static_cast<int64_t>(d.last_seen_us) * 1000;
    const auto end_ns = static_cast<int64_t>(w.end_us) * 1000;
    d.estimator.AddBusy(start_ns, end_ns, std::min(busy_percent, 100.0) / 100.0, matched_here);
    d.unslotted.AddBusy(start_ns, end_ns, std::min(unslotted_percent, 100.0) / 100.0, matched_here);
    // A member without a sample while others had theirs was idle or below
    // NVML's rounding where the attribution is split (sampled: the estimator
    // bounds it from above); otherwise the window may have gone to another
    // process: unknown for this member (see compute_controller.h).
    const bool split = d.attribution == Device::Attribution::kSplit;
    for (size_t i = 0; i < members.size(); ++i) {
      auto it = members[i].slot >= 0 ? d.slots.find(members[i].slot) : d.slots.end();
      if (it == d.slots.end() || d.unknown.contains(members[i].slot)) continue;
      it->second.estimator.AddBusy(start_ns, end_ns, std::max(0.0, member_percent[i]) / 100.0,
                                   member_percent[i] >= 0 || (matched_here && split));
    }
    d.last_seen_us = w.end_us;
    matched = matched || matched_here;
  }
  const auto end_ns = static_cast<int64_t>(newest_us) * 1000;
  d.matched_once |= matched;

  // The measured share closes the loop (share_correction.h): a workload
  // change an estimator detected holds it, its new estimate being the
  // correction already.
  uint64_t shifts = d.estimator.shifts() + d.unslotted.shifts();
  for (const auto& [slot, st] : d.slots) shifts += st.estimator.shifts();
  // Under window attribution the correction's third of a second is one or
  // two whole windows: no measurement; it stays off (factor 1).
  if (shifts != d.shifts_seen || d.attribution == Device::Attribution::kWindow) {
    d.shifts_seen = shifts;
    d.correction.Hold(end_ns);
  }
  int64_t longest = d.estimator.CostNs();  // the measurement's granularity
  for (const auto& [slot, st] : d.slots) longest = std::max(longest, st.estimator.CostNs());
  // Held back by its budget since the previous window: some launch waited
  // (or waits now), nothing but the budget can have made it wait, and the
  // device had room for more (on a full device a group under its rate
  // queues more than runs; lower charges would only deepen its queue, which
  // the backlog watch then drains, and the group would get less).
  const ComputeCounters counters = segment_.schedule().Counters(dev);
  const bool held = (counters.waits != d.waits_seen || counters.waiting > 0) &&
                    !d.waited_otherwise && device_percent < kFullDevicePercent;
  d.waits_seen = counters.waits;
  d.waited_otherwise = false;
  d.correction.Update(end_ns, d.estimator.RecentShare(ShareCorrection::kWindowNs),
                      static_cast<double>(segment_.schedule().PacedRateBp(dev)) / 10000.0, longest,
                      held);
  const double factor = d.correction.factor();

  const double share = d.estimator.RecentShare(1'000'000'000);
  segment_.usage().PublishEstimate(
      dev, ComputeUsage::Estimate{
               .charge_ns = d.estimator.CostNs(),
               .share_bp = share >= 0 ? static_cast<int32_t>(std::lround(share * 10000)) : -1,
               .measured_at_ns = clocks_.monotonic.NowNs()});
  // Each member's own charge; the members without a known slot share theirs.
  const int64_t unslotted_charge = d.unslotted.CostNs();
  for (const auto& [slot, st] : d.slots) {
    const int64_t charge = d.unknown.contains(slot) ? unslotted_charge : st.estimator.CostNs();
    if (charge > 0) {
      segment_.usage().PublishSlotCharge(
          slot, dev, static_cast<int64_t>(static_cast<double>(charge) * factor));
    }
  }

  if (!d.matched_once && !warned_unmatched_ && launches > 0 &&
      now_real - d.first_tick_ns > kUnmatchedWarnNs) {
    warned_unmatched_ = true;
    GS_LOG(kWarn, "control",
           "no utilization sample of group '%s''s processes (another pid namespace?): compute "
           "charges stay at the bootstrap measurement",
           segment_.group().c_str());
  }
}

}  // namespace gpuslice::control
