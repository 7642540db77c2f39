#include "limiter/nvml_utilization_source.h"

#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {

bool NvmlUtilizationSource::Ready() {
  if (state_ == 0) {
    const real::NvmlTable& nv = real::Nvml();
    const bool ok = nv.nvmlInit_v2 != nullptr && nv.nvmlInit_v2() == NVML_SUCCESS &&
                    nv.nvmlDeviceGetHandleByUUID != nullptr &&
                    nv.nvmlDeviceGetProcessUtilization != nullptr;
    state_ = ok ? 1 : -1;
  }
  return state_ == 1;
}

StatusOr<std::vector<control::UtilizationSample>> NvmlUtilizationSource::SamplesSince(
    std::string_view uuid, uint64_t since_us) {
  if (!Ready()) return Unavailable("NVML is unavailable");
  const real::NvmlTable& nv = real::Nvml();
  auto it = handles_.find(uuid);
  if (it == handles_.end()) {
    nvmlDevice_t handle = nullptr;
    const std::string id(uuid);
    if (nv.nvmlDeviceGetHandleByUUID(id.c_str(), &handle) != NVML_SUCCESS) {
      return NotFound("NVML has no GPU " + id);
    }
    it = handles_.emplace(id, handle).first;
  }
  std::vector<nvmlProcessUtilizationSample_t> raw(64);
  auto n = static_cast<unsigned>(raw.size());
  nvmlReturn_t rc = nv.nvmlDeviceGetProcessUtilization(it->second, raw.data(), &n, since_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    raw.resize(n);
    rc = nv.nvmlDeviceGetProcessUtilization(it->second, raw.data(), &n, since_us);
  }
  std::vector<control::UtilizationSample> samples;
  if (rc != NVML_SUCCESS) return samples;  // NOT_FOUND: no window closed since
  samples.reserve(n);
  for (unsigned i = 0; i < n && i < raw.size(); ++i) {
    samples.push_back({raw[i].pid, raw[i].timeStamp, raw[i].smUtil});
  }
  return samples;
}

}  // namespace gpuslice::limiter
