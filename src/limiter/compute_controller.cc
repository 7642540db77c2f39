#include "limiter/compute_controller.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {
namespace {

template <typename T>
std::atomic_ref<T> Shared(T& field) {
  return std::atomic_ref<T>(field);
}

// After this long with launches but no NVML sample of any member, say why
// the charge stays at the bootstrap measurement.
constexpr int64_t kUnmatchedWarnNs = 5'000'000'000;

}  // namespace

bool ComputeController::NvmlReady() {
  if (nvml_state_ == 0) {
    const real::NvmlTable& nv = real::Nvml();
    const bool ok = nv.nvmlInit_v2 != nullptr && nv.nvmlInit_v2() == NVML_SUCCESS &&
                    nv.nvmlDeviceGetHandleByUUID != nullptr &&
                    nv.nvmlDeviceGetProcessUtilization != nullptr;
    nvml_state_ = ok ? 1 : -1;
    if (!ok) {
      GS_LOG(kWarn, "limiter",
             "NVML is unavailable: compute limits are paced by the bootstrap measurement of "
             "each launch (an upper bound; shares may stay below their limit)");
    }
  }
  return nvml_state_ == 1;
}

bool ComputeController::Tick() {
  const uint32_t limited = segment_->ComputeLimitedMask();
  if (limited == 0) return false;
  const int count = segment_->device_count();
  for (int dev = 0; dev < count; ++dev) {
    if ((limited & (1u << dev)) == 0) continue;
    if (devices_[dev] == nullptr) devices_[dev] = std::make_unique<Device>();
    TickDevice(dev, *devices_[dev]);
  }
  return true;
}

void ComputeController::TickDevice(int dev, Device& d) {
  DeviceCompute& c = segment_->Compute(dev);
  const int64_t now_real = RealtimeNs();
  if (d.first_tick_ns == 0) {
    d.first_tick_ns = now_real;
    d.last_seen_us = static_cast<uint64_t>(now_real / 1000);
  }
  const uint64_t launches = Shared(c.launches).load(std::memory_order_relaxed);
  d.estimator.RecordLaunches(now_real, launches);
  if (!NvmlReady()) return;

  const real::NvmlTable& nv = real::Nvml();
  if (d.handle == nullptr) {
    const GroupDevice& gd = segment_->layout().devices[dev];
    if (nv.nvmlDeviceGetHandleByUUID(gd.uuid, &d.handle) != NVML_SUCCESS) {
      d.handle = nullptr;
      return;
    }
  }
  std::vector<nvmlProcessUtilizationSample_t> samples(64);
  auto n = static_cast<unsigned>(samples.size());
  nvmlReturn_t rc =
      nv.nvmlDeviceGetProcessUtilization(d.handle, samples.data(), &n, d.last_seen_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    samples.resize(n);
    rc = nv.nvmlDeviceGetProcessUtilization(d.handle, samples.data(), &n, d.last_seen_us);
  }
  if (rc != NVML_SUCCESS || n == 0) return;  // NOT_FOUND: no window closed since
  samples.resize(n);

  // The samples cover (last_seen, newest]; a member with several samples
  // contributes their mean.
  uint64_t newest_us = d.last_seen_us;
  for (const auto& s : samples) newest_us = std::max<uint64_t>(newest_us, s.timeStamp);
  if (newest_us <= d.last_seen_us) return;
  std::vector<int32_t> members;
  for (const ProcessSlot& slot : segment_->layout().slots) {
    const int32_t pid = Shared(const_cast<int32_t&>(slot.owner_pid)).load();
    if (pid != 0) members.push_back(pid);
  }
  double busy_percent = 0;
  bool matched = false;
  for (int32_t pid : members) {
    double sum = 0;
    int samples_of_pid = 0;
    for (const auto& s : samples) {
      if (static_cast<int32_t>(s.pid) == pid) {
        sum += s.smUtil;
        ++samples_of_pid;
      }
    }
    if (samples_of_pid > 0) {
      busy_percent += sum / samples_of_pid;
      matched = true;
    }
  }
  d.estimator.AddBusy(static_cast<int64_t>(d.last_seen_us) * 1000,
                      static_cast<int64_t>(newest_us) * 1000, busy_percent / 100.0);
  d.last_seen_us = newest_us;
  d.matched_once |= matched;

  if (const int64_t cost = d.estimator.CostNs(); cost > 0) {
    Shared(c.charge_ns).store(cost, std::memory_order_release);
  }
  if (const double share = d.estimator.RecentShare(1'000'000'000); share >= 0) {
    Shared(c.share_bp).store(static_cast<uint32_t>(std::lround(share * 10000)));
  }
  Shared(c.measured_at_ns).store(MonotonicNs());

  if (!d.matched_once && !warned_unmatched_ && launches > 0 &&
      now_real - d.first_tick_ns > kUnmatchedWarnNs) {
    warned_unmatched_ = true;
    GS_LOG(kWarn, "limiter",
           "NVML reports none of group '%s''s processes (another pid namespace?): compute "
           "charges stay at the bootstrap measurement",
           segment_->group().c_str());
  }
}

}  // namespace gpuslice::limiter
