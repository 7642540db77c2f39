// NvmlUtilizationSource: the limiter's UtilizationSource, NVML's
// per-process utilization samples read in-process through the real NVML
// (real/real_driver.h). NVML is initialised on first use; without it every
// call answers kUnavailable.
//
// Not thread-safe: used by the keeper thread only.
#pragma once

#include <map>
#include <string>

#include "control/utilization_source.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::limiter {

class NvmlUtilizationSource final : public control::UtilizationSource {
 public:
  StatusOr<std::vector<control::UtilizationSample>> SamplesSince(std::string_view uuid,
                                                                 uint64_t since_us) override;

 private:
  bool Ready();

  int state_ = 0;  // 0 untried, 1 ready, -1 unavailable
  std::map<std::string, nvmlDevice_t, std::less<>> handles_;
};

}  // namespace gpuslice::limiter
