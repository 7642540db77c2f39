#include "limiter/nvml_utilization_source.h"

#include <algorithm>

#include "limiter/real/real_driver.h"
#include "nvml_abi/sample_value.h"

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

StatusOr<nvmlDevice_t> NvmlUtilizationSource::Handle(std::string_view uuid) {
  if (!Ready()) return Unavailable("NVML is unavailable");
  auto it = handles_.find(uuid);
  if (it == handles_.end()) {
    nvmlDevice_t handle = nullptr;
    const std::string id(uuid);
    if (real::Nvml().nvmlDeviceGetHandleByUUID(id.c_str(), &handle) != NVML_SUCCESS) {
      return NotFound("NVML has no GPU " + id);
    }
    it = handles_.emplace(id, handle).first;
  }
  return it->second;
}

StatusOr<std::vector<control::UtilizationSample>> NvmlUtilizationSource::SamplesSince(
    std::string_view uuid, uint64_t since_us) {
  GS_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(uuid));
  const real::NvmlTable& nv = real::Nvml();
  std::vector<nvmlProcessUtilizationSample_t> raw(64);
  auto n = static_cast<unsigned>(raw.size());
  nvmlReturn_t rc = nv.nvmlDeviceGetProcessUtilization(device, raw.data(), &n, since_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    raw.resize(n);
    rc = nv.nvmlDeviceGetProcessUtilization(device, raw.data(), &n, since_us);
  }
  std::vector<control::UtilizationSample> samples;
  if (rc != NVML_SUCCESS) return samples;  // NOT_FOUND: no window closed since
  samples.reserve(n);
  for (unsigned i = 0; i < n && i < raw.size(); ++i) {
    samples.push_back({raw[i].pid, raw[i].timeStamp, raw[i].smUtil});
  }
  return samples;
}

StatusOr<std::vector<control::DeviceBusySample>> NvmlUtilizationSource::BusySince(
    std::string_view uuid, uint64_t since_us) {
  GS_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(uuid));
  const real::NvmlTable& nv = real::Nvml();
  if (nv.nvmlDeviceGetSamples == nullptr) {
    return Unimplemented("this driver's NVML has no nvmlDeviceGetSamples");
  }
  std::vector<nvmlSample_t> raw(128);
  auto n = static_cast<unsigned>(raw.size());
  nvmlValueType_t type{};
  const nvmlReturn_t rc = nv.nvmlDeviceGetSamples(device, NVML_GPU_UTILIZATION_SAMPLES, since_us,
                                                  &type, &n, raw.data());
  std::vector<control::DeviceBusySample> out;
  if (rc != NVML_SUCCESS) return out;  // NOT_FOUND: no window closed since
  out.reserve(n);
  for (unsigned i = 0; i < n && i < raw.size(); ++i) {
    out.push_back({raw[i].timeStamp, nvml_abi::SamplePercent(type, raw[i].sampleValue)});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  return out;
}

}  // namespace gpuslice::limiter
