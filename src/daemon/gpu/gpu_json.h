// JSON forms of what the daemon reports about GPUs (the API's wire format;
// docs/api.md documents the fields).
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_monitor.h"

namespace gpuslice::daemon {

// {"driver_version", "mig", "cgroup_v2", "memory_limits" (the driver's per-cgroup
// limits API), "mps": {"available", "protocol" (2 or 3; null), "reason"}}.
nlohmann::json GpuFeaturesJson(const GpuFeatures& features);
nlohmann::json GpuJson(const GpuInfo& gpu);
// GpuJson with how the values were read: "reachable" (false while the GPU's
// reads fail, e.g. NVML_ERROR_GPU_IS_LOST: the values are its last good ones),
// "read_error" (why; null when reachable) and "read_failures" (failed reads
// since the daemon started).
nlohmann::json GpuJson(const GpuInfo& gpu, const GpuReadState& read);

}  // namespace gpuslice::daemon
