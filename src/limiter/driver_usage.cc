#include "limiter/driver_usage.h"

#include <string>
#include <vector>

#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {
namespace {

bool NvmlReady() {
  static const bool ready = [] {
    const real::NvmlTable& nv = real::Nvml();
    return nv.nvmlInit_v2 != nullptr && nv.nvmlInit_v2() == NVML_SUCCESS &&
           nv.nvmlDeviceGetHandleByUUID != nullptr &&
           nv.nvmlDeviceGetComputeRunningProcesses_v3 != nullptr;
  }();
  return ready;
}

}  // namespace

std::optional<uint64_t> DriverProcessBytes(std::string_view uuid, uint32_t pid) {
  if (!NvmlReady()) return std::nullopt;
  const real::NvmlTable& nv = real::Nvml();
  nvmlDevice_t device = nullptr;
  if (nv.nvmlDeviceGetHandleByUUID(std::string(uuid).c_str(), &device) != NVML_SUCCESS) {
    return std::nullopt;
  }
  std::vector<nvmlProcessInfo_t> infos(32);
  nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
  for (int attempt = 0; attempt < 3 && rc == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    auto n = static_cast<unsigned>(infos.size());
    rc = nv.nvmlDeviceGetComputeRunningProcesses_v3(device, &n, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(n + 8);  // processes come and go between the calls
    } else {
      infos.resize(rc == NVML_SUCCESS ? n : 0);
    }
  }
  if (rc != NVML_SUCCESS) return std::nullopt;
  for (const nvmlProcessInfo_t& info : infos) {
    if (info.pid != pid) continue;
    // NVML_VALUE_NOT_AVAILABLE (all ones) where the driver does not know.
    if (info.usedGpuMemory == ~0ull) return std::nullopt;
    return info.usedGpuMemory;
  }
  return std::nullopt;
}

}  // namespace gpuslice::limiter
