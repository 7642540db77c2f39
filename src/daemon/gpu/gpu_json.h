// JSON forms of what the daemon reports about GPUs (the API's wire format;
// docs/daemon.md documents the fields).
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

nlohmann::json GpuJson(const GpuInfo& gpu);

}  // namespace gpuslice::daemon
