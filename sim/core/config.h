// The simulator's configuration: devices and the timing model's unknowns.
// Read once, by the process that creates the state file; afterwards every
// process reads the copy in SimState (params, devices[].info).
//
// JSON (GPUSLICE_SIM_CONFIG names a file, or holds the JSON itself if it starts
// with '{'); every key is optional:
//   {
//     "devices": [ {"name": "NVIDIA H100 80GB HBM3", "memory": "80GiB", "sms": 132,
//                   "uuid": "GPU-…", "threads_per_sm": 2048, "cc": "9.0",
//                   "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": 2619,
//                   "power_limit_w": 700, "power_min_w": 200, "power_max_w": 700,
//                   "idle_power_w": 70, "busy_power_w": 690} ],
//     "device_count": 1,          // copies of the default device when "devices" is absent
//     "timeslice_us": 2090, "switch_us": 152, "sample_us": 200000,
//     "launch_ns": 3000, "wave_ns": 10000, "max_pending": 1024,
//     "context_bytes": "300MiB", "granularity": "2MiB",
//     "pool_block": "32MiB",      // stream-ordered pools grow in these blocks
//     "functions": {"my_kernel": {"wave_ns": 50000}},
//     "driver_version": "580.65.06",  // "615.xx" and later have the r615 memory limits
//     "soft_limit_eviction": false,   // model eviction of soft-limit borrowers
//     "process_util": "window"        // per-process NVML samples as an H100 on r580
//                                     // gives them; "split": an idealisation (docs/sim.md)
//   }
// A device may also say "mig": true: it starts in MIG mode (mig_state.h; the
// r615 memory limits are refused on it).
// Unknown keys are errors (a typo must not silently fall back to a default).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "sim/core/state.h"

namespace gpuslice::sim {

// The block stream-ordered pools grow by unless the config says
// ("pool_block"; docs/sim.md "Memory pools").
inline constexpr uint64_t kDefaultPoolBlock = 32ull << 20;

// The driver the simulated node runs unless the config names one: older than
// r615, so the per-cgroup memory limits are absent.
inline constexpr char kDefaultDriverVersion[] = "580.65.06";
// First driver branch with nvmlDeviceSetMemoryLimits_v1 and friends.
inline constexpr int kMemoryLimitsDriverMajor = 615;

// The major number of "<major>.<minor>[.<patch>]", or -1 if malformed.
int DriverMajorVersion(std::string_view version);
// Whether that driver has the r615 per-cgroup memory limits.
bool HasCgroupMemoryLimits(std::string_view driver_version);

struct SimConfig {
  SimParams params;
  uint32_t device_count;
  DeviceInfo devices[kMaxDevices];
};

// One default "NVIDIA H100 80GB HBM3" and DESIGN.md section 7's defaults: the
// H100 as measured (docs/sim.md "Defaults").
SimConfig DefaultSimConfig();

// Parses JSON text. Errors name the key and the problem.
StatusOr<SimConfig> ParseSimConfig(std::string_view json);

// Resolves GPUSLICE_SIM_CONFIG's value (a path, or inline JSON) to JSON text;
// empty input gives empty text (the defaults).
StatusOr<std::string> LoadSimConfigText(std::string_view value);

uint64_t HashConfigText(std::string_view text);  // FNV-1a 64

}  // namespace gpuslice::sim
