#include "daemon/groups/backend_utilization.h"

namespace gpuslice::daemon {

BackendUtilization::BackendUtilization(GpuBackend& backend, const Clock& clock, int64_t refresh_ns,
                                       int64_t keep_ns)
    : backend_(backend), clock_(clock), refresh_ns_(refresh_ns), keep_ns_(keep_ns) {}

BackendUtilization::Gpu* BackendUtilization::Find(std::string_view uuid) {
  auto it = gpus_.find(uuid);
  if (it != gpus_.end()) return &it->second;
  for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) {
    auto info = backend_.Read(i);
    if (info.ok() && !gpus_.contains(info->uuid)) gpus_[info->uuid].index = i;
  }
  it = gpus_.find(uuid);
  return it == gpus_.end() ? nullptr : &it->second;
}

StatusOr<std::vector<control::UtilizationSample>> BackendUtilization::SamplesSince(
    std::string_view uuid, uint64_t since_us) {
  Gpu* gpu = Find(uuid);
  if (gpu == nullptr) return NotFound("no GPU " + std::string(uuid));
  const int64_t now = clock_.NowNs();
  if (gpu->fetched_ns == 0 || now - gpu->fetched_ns >= refresh_ns_) {
    // On the first read, ask for the window the caller wants; then for what
    // is newer than what is kept.
    const uint64_t from = gpu->fetched_ns == 0 ? since_us : gpu->newest_us;
    GS_ASSIGN_OR_RETURN(std::vector<ProcessUtilization> fresh,
                        backend_.ProcessUtilizationSince(gpu->index, from));
    gpu->fetched_ns = now;
    for (const ProcessUtilization& p : fresh) {
      if (p.timestamp_us <= gpu->newest_us) continue;
      gpu->samples.push_back({p.pid, p.timestamp_us, p.sm_percent});
    }
    for (const control::UtilizationSample& s : gpu->samples) {
      gpu->newest_us = std::max(gpu->newest_us, s.timestamp_us);
    }
    const auto horizon_us = static_cast<uint64_t>(std::max<int64_t>(0, now - keep_ns_) / 1000);
    while (!gpu->samples.empty() && gpu->samples.front().timestamp_us < horizon_us) {
      gpu->samples.pop_front();
    }
  }
  std::vector<control::UtilizationSample> out;
  for (const control::UtilizationSample& s : gpu->samples) {
    if (s.timestamp_us > since_us) out.push_back(s);
  }
  return out;
}

}  // namespace gpuslice::daemon
