// JSON forms of what the daemon reports about GPUs (the API's wire format;
// docs/daemon.md documents the fields).
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

// {"driver_version", "mig", "cgroup_v2", "memory_limits" (the driver's per-cgroup
// limits API), "mps": {"available", "protocol" (2 or 3; null), "reason"}}.
nlohmann::json GpuFeaturesJson(const GpuFeatures& features);
nlohmann::json GpuJson(const GpuInfo& gpu);

}  // namespace gpuslice::daemon
