#include "control/compute_controller.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/log.h"

namespace gpuslice::control {
namespace {

// After this long with launches but no sample of any member, say why the
// charge stays at the bootstrap measurement.
constexpr int64_t kUnmatchedWarnNs = 5'000'000'000;

}  // namespace

ComputeController::ComputeController(GroupSegment& segment, UtilizationSource& source,
                                     Members members, Clocks clocks)
    : segment_(segment), source_(source), members_(std::move(members)), clocks_(clocks) {}

ComputeController::ComputeController(GroupSegment& segment, UtilizationSource& source,
                                     MemberPids pids, Clocks clocks)
    : ComputeController(segment, source, Members([pids = std::move(pids)] {
                          std::vector<Member> out;
                          for (int32_t pid : pids()) out.push_back({.pid = pid});
                          return out;
                        }),
                        clocks) {}

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
  const uint32_t limited = segment_.ComputeLimitedMask();
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

void ComputeController::RecordSlots(int dev, Device& d, const std::vector<Member>& members,
                                    int64_t now_real) {
  std::set<int> slotted;
  for (const Member& m : members) {
    if (m.slot >= 0) slotted.insert(m.slot);
  }
  std::map<int, SlotState> live;
  d.unknown.clear();
  for (const GroupSegment::MemberRef& ref : segment_.Members()) {
    const uint64_t count = segment_.SlotLaunches(ref.slot, dev);
    auto it = d.slots.find(ref.slot);
    if (it == d.slots.end() || it->second.joined_ns != ref.joined_ns) {
      // A member seen for the first time: its launches so far are no
      // evidence of this tick's.
      SlotState fresh;
      fresh.joined_ns = ref.joined_ns;
      fresh.last_launches = count;
      it = d.slots.insert_or_assign(ref.slot, std::move(fresh)).first;
    }
    SlotState& st = it->second;
    const uint64_t delta = count >= st.last_launches ? count - st.last_launches : count;
    st.last_launches = count;
    st.launches += delta;
    if (slotted.contains(ref.slot)) {
      st.estimator.RecordLaunches(now_real, st.launches);
    } else {
      d.unslotted_launches += delta;
      d.unknown.insert(ref.slot);
    }
    live.insert({ref.slot, std::move(st)});
  }
  d.slots = std::move(live);  // the departed members' go
  d.unslotted.RecordLaunches(now_real, d.unslotted_launches);
}

void ComputeController::TickDevice(int dev, Device& d, const std::vector<Member>& members) {
  const int64_t now_real = clocks_.realtime.NowNs();
  const uint64_t launches = segment_.Launches(dev);
  if (d.first_tick_ns == 0) {
    d.first_tick_ns = now_real;
    d.last_seen_us = static_cast<uint64_t>(now_real / 1000);
    d.launches_at_first_tick = launches;
  }
  d.estimator.RecordLaunches(now_real, launches);
  RecordSlots(dev, d, members, now_real);
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
  // The samples cover (last_seen, newest]; a member with several samples
  // contributes their mean.
  uint64_t newest_us = d.last_seen_us;
  for (const UtilizationSample& s : *samples) newest_us = std::max(newest_us, s.timestamp_us);
  if (newest_us <= d.last_seen_us) return;  // no window closed since
  // Each member's busy percent of the span (the mean of its samples).
  std::vector<double> member_percent(members.size(), -1);
  double busy_percent = 0;
  double unslotted_percent = 0;
  bool matched = false;
  for (size_t i = 0; i < members.size(); ++i) {
    double sum = 0;
    int samples_of_pid = 0;
    for (const UtilizationSample& s : *samples) {
      if (static_cast<int32_t>(s.pid) == members[i].pid && s.timestamp_us > d.last_seen_us) {
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
    matched = true;
  }
  const auto start_ns = static_cast<int64_t>(d.last_seen_us) * 1000;
  const auto end_ns = static_cast<int64_t>(newest_us) * 1000;
  d.estimator.AddBusy(start_ns, end_ns, std::min(busy_percent, 100.0) / 100.0, matched);
  d.unslotted.AddBusy(start_ns, end_ns, std::min(unslotted_percent, 100.0) / 100.0, matched);
  // A member without a sample while others had theirs was idle or below
  // NVML's rounding (matched: the estimator bounds it from above).
  for (size_t i = 0; i < members.size(); ++i) {
    auto it = members[i].slot >= 0 ? d.slots.find(members[i].slot) : d.slots.end();
    if (it == d.slots.end() || d.unknown.contains(members[i].slot)) continue;
    it->second.estimator.AddBusy(start_ns, end_ns, std::max(0.0, member_percent[i]) / 100.0,
                                 matched);
  }
  d.last_seen_us = newest_us;
  d.matched_once |= matched;

  // The measured share closes the loop (share_correction.h): a workload
  // change an estimator detected holds it, its new estimate being the
  // correction already.
  uint64_t shifts = d.estimator.shifts() + d.unslotted.shifts();
  for (const auto& [slot, st] : d.slots) shifts += st.estimator.shifts();
  if (shifts != d.shifts_seen) {
    d.shifts_seen = shifts;
    d.correction.Hold(end_ns);
  }
  int64_t longest = d.estimator.CostNs();  // the measurement's granularity
  for (const auto& [slot, st] : d.slots) longest = std::max(longest, st.estimator.CostNs());
  d.correction.Update(end_ns, d.estimator.RecentShare(ShareCorrection::kWindowNs),
                      static_cast<double>(segment_.PacedRateBp(dev)) / 10000.0, longest);
  const double factor = d.correction.factor();

  const double share = d.estimator.RecentShare(1'000'000'000);
  segment_.PublishEstimate(
      dev, GroupSegment::Estimate{
               .charge_ns = d.estimator.CostNs(),
               .share_bp = share >= 0 ? static_cast<int32_t>(std::lround(share * 10000)) : -1,
               .measured_at_ns = clocks_.monotonic.NowNs()});
  // Each member's own charge; the members without a known slot share theirs.
  const int64_t unslotted_charge = d.unslotted.CostNs();
  for (const auto& [slot, st] : d.slots) {
    const int64_t charge = d.unknown.contains(slot) ? unslotted_charge : st.estimator.CostNs();
    if (charge > 0) {
      segment_.PublishSlotCharge(slot, dev,
                                 static_cast<int64_t>(static_cast<double>(charge) * factor));
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
