// How much device memory the real driver counts for a process on one GPU, as
// NVML reports it (nvmlDeviceGetComputeRunningProcesses_v3, usedGpuMemory).
// Used to settle a context's charge on what the driver really reserved
// (core/context_footprint.h).
//
// Thread-safe. Initialises the real NVML once, on first use (a reference the
// process keeps: NVML counts nvmlInit/nvmlShutdown pairs).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpuslice::limiter {

// Bytes the driver counts for `pid` on the GPU with `uuid`; nullopt when NVML
// is unavailable, does not list the process (e.g. a PID namespace hides its
// host pid), or does not know its usage.
std::optional<uint64_t> DriverProcessBytes(std::string_view uuid, uint32_t pid);

}  // namespace gpuslice::limiter
