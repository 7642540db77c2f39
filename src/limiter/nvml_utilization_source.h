// NvmlUtilizationSource: the limiter's UtilizationSource and
// DeviceBusySource, NVML's per-process utilization samples and the device's
// own (nvmlDeviceGetSamples, NVML_GPU_UTILIZATION_SAMPLES) read in-process
// through the real NVML (real/real_driver.h). NVML is initialised on first
// use; without it every call answers kUnavailable (BusySince: kUnimplemented
// where this NVML has no nvmlDeviceGetSamples).
//
// Not thread-safe: used by the keeper thread only.
#pragma once

#include <map>
#include <string>

#include "control/device_busy.h"
#include "control/utilization_source.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::limiter {

class NvmlUtilizationSource final : public control::UtilizationSource,
                                    public control::DeviceBusySource {
 public:
  StatusOr<std::vector<control::UtilizationSample>> SamplesSince(std::string_view uuid,
                                                                 uint64_t since_us) override;
  StatusOr<std::vector<control::DeviceBusySample>> BusySince(std::string_view uuid,
                                                             uint64_t since_us) override;

 private:
  bool Ready();
  StatusOr<nvmlDevice_t> Handle(std::string_view uuid);

  int state_ = 0;  // 0 untried, 1 ready, -1 unavailable
  std::map<std::string, nvmlDevice_t, std::less<>> handles_;
};

}  // namespace gpuslice::limiter
