// UtilizationSource: where the group controller learns how busy each process
// kept a GPU (NVML's per-process utilization samples, DESIGN.md section 2).
// The limiter reads NVML in-process (limiter/nvml_utilization_source.h); the
// daemon reads it through its GpuBackend; tests script the samples.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::control {

// One NVML sample: `pid` (in NVML's pid namespace: the host's) kept the GPU's
// SMs busy `sm_percent` of the sampling window that closed at `timestamp_us`
// (CLOCK_REALTIME microseconds).
struct UtilizationSample {
  uint32_t pid;
  uint64_t timestamp_us;
  uint32_t sm_percent;
};

class UtilizationSource {
 public:
  virtual ~UtilizationSource() = default;
  // The samples of the GPU with `uuid` whose windows closed after `since_us`.
  // Empty when none closed since; kUnavailable when there is no NVML (the
  // controller then says so once and keeps the bootstrap charges).
  virtual StatusOr<std::vector<UtilizationSample>> SamplesSince(std::string_view uuid,
                                                                uint64_t since_us) = 0;
};

}  // namespace gpuslice::control
