// DeviceBusySource: where gpusliced learns how busy a GPU was, the device's
// own figure (NVML's GPU utilization samples, nvmlDeviceGetSamples with
// NVML_GPU_UTILIZATION_SAMPLES: the percent of each sampling window in which
// a kernel ran). Unlike NVML's per-process samples it is right whatever the
// processes (an H100 on r580 gives each per-process window to one process;
// docs/sim.md). The daemon reads it through its GpuBackend; tests script it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::control {

// One window of the device: busy `percent` (0..100) of the window that
// closed at `timestamp_us` (CLOCK_REALTIME microseconds).
struct DeviceBusySample {
  uint64_t timestamp_us;
  uint32_t percent;
};

class DeviceBusySource {
 public:
  virtual ~DeviceBusySource() = default;
  // The samples of the GPU with `uuid` whose windows closed after `since_us`,
  // oldest first. Empty when none closed since; kUnavailable or
  // kUnimplemented when the node has no such figure (latency groups are then
  // charged by their own measurements).
  virtual StatusOr<std::vector<DeviceBusySample>> BusySince(std::string_view uuid,
                                                            uint64_t since_us) = 0;
};

}  // namespace gpuslice::control
