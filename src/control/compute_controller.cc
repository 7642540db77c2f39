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
                                     MemberPids members, Clocks clocks)
    : segment_(segment), source_(source), members_(std::move(members)), clocks_(clocks) {}

bool ComputeController::Tick() {
  const uint32_t limited = segment_.ComputeLimitedMask();
  if (limited == 0) return false;
  const int count = segment_.device_count();
  for (int dev = 0; dev < count; ++dev) {
    if ((limited & (1u << dev)) == 0) continue;
    if (devices_[dev] == nullptr) devices_[dev] = std::make_unique<Device>();
    TickDevice(dev, *devices_[dev]);
  }
  return true;
}

void ComputeController::TickDevice(int dev, Device& d) {
  const int64_t now_real = clocks_.realtime.NowNs();
  const uint64_t launches = segment_.Launches(dev);
  if (d.first_tick_ns == 0) {
    d.first_tick_ns = now_real;
    d.last_seen_us = static_cast<uint64_t>(now_real / 1000);
    d.launches_at_first_tick = launches;
  }
  d.estimator.RecordLaunches(now_real, launches);
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
  double busy_percent = 0;
  bool matched = false;
  for (int32_t pid : members_()) {
    double sum = 0;
    int samples_of_pid = 0;
    for (const UtilizationSample& s : *samples) {
      if (static_cast<int32_t>(s.pid) == pid && s.timestamp_us > d.last_seen_us) {
        sum += s.sm_percent;
        ++samples_of_pid;
      }
    }
    if (samples_of_pid > 0) {
      busy_percent += sum / samples_of_pid;
      matched = true;
    }
  }
  d.estimator.AddBusy(static_cast<int64_t>(d.last_seen_us) * 1000,
                      static_cast<int64_t>(newest_us) * 1000, std::min(busy_percent, 100.0) / 100.0,
                      matched);
  d.last_seen_us = newest_us;
  d.matched_once |= matched;

  const double share = d.estimator.RecentShare(1'000'000'000);
  segment_.PublishEstimate(
      dev, GroupSegment::Estimate{
               .charge_ns = d.estimator.CostNs(),
               .share_bp = share >= 0 ? static_cast<int32_t>(std::lround(share * 10000)) : -1,
               .measured_at_ns = clocks_.monotonic.NowNs()});

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
