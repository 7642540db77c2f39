// What the simulated NVML reports, as pure functions over the shared SimState:
// no locking, no clock, no syscalls. nvml_entry.cc calls them under the state
// lock (SimGpu::WithState) after the schedule was advanced to now; unit tests
// call them on a hand-built state.
//
// Derived quantities (documented in docs/sim.md):
//  - utilization: the most recent closed window's busy share; memory
//    utilization (bandwidth, which the model does not track) is half of it;
//  - power: idle power while idle and busy power while executing, each capped
//    by the power limit, mixed by the last window's utilization (the same model
//    the scheduler integrates into energy_mj);
//  - temperature: the configured idle temperature plus a quarter degree per
//    percent of utilization;
//  - clocks: the SM clock runs at the maximum boost clock, or at the upper end
//    of the locked range when clocks are locked (likewise memory); a locked
//    range must lie within [kMinClockMhz, the maximum clock];
//  - BAR1: the smallest power of two holding the device memory (128 GiB for an
//    80 GiB part, as on an H100), of which the driver's own mapping (1 MiB) is
//    used;
//  - per-process memory utilization, like the device's, is half the SM share.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/core/state.h"

namespace gpuslice::sim::nvml {

// The latest closed utilization window of `d`, or nullptr if none was closed.
const UtilWindow* LatestWindow(const DeviceState& d);

// Percent of the last closed window (0 if none).
uint32_t GpuUtilizationPercent(const DeviceState& d);
uint32_t MemoryUtilizationPercent(const DeviceState& d);

uint32_t PowerUsageMw(const DeviceState& d);
uint32_t TemperatureC(const DeviceState& d);
uint32_t CurrentSmClockMhz(const DeviceState& d);
uint32_t CurrentMemClockMhz(const DeviceState& d);

// Lowest clock a locked range may start at (SM and memory alike).
inline constexpr uint32_t kMinClockMhz = 210;

// True if [min_mhz, max_mhz] is a valid locked range for a clock whose maximum
// is `max_supported_mhz`.
bool LockedRangeSupported(uint32_t min_mhz, uint32_t max_mhz, uint32_t max_supported_mhz);

struct Bar1Info {
  uint64_t total_bytes, used_bytes;
};
Bar1Info Bar1(const DeviceInfo& info);

// Wall-clock microseconds of a monotonic instant (NVML timestamps).
uint64_t ToRealtimeUs(const SimState& s, int64_t monotonic_ns);

// One per-process sample as nvmlDeviceGetProcessUtilization returns it.
struct ProcessSample {
  int32_t pid;
  uint64_t timestamp_us;  // end of the latest window in which the process ran
  uint32_t sm_percent;    // its busy share of the windows newer than last_seen
  uint32_t mem_percent;
};

// nvmlDeviceGetProcessUtilization on device `device` for the closed windows
// ending after `last_seen_us` (wall-clock microseconds; 0 = every window
// kept), as s.params.process_util says:
//  - kProcessUtilSplit: one sample per process that ran in those windows; its
//    sm_percent is its busy time over their total length, rounded, and its
//    timestamp the end of the latest of them in which it ran;
//  - kProcessUtilWindow: WindowProcessUtilization below.
// Empty if nothing is newer.
std::vector<ProcessSample> ProcessUtilization(const SimState& s, int device, uint64_t last_seen_us);

// The "window" attribution, measured on an H100 with driver r580: one sample
// per closed window newer than `last_seen_us` in which anything ran, in window
// order, for one process drawn with probability proportional to its busy
// share of that window; sm_percent is the window's whole device busy percent
// and the timestamp the window's end. The draw is a pure function of the
// device index and the window's index since the state was created, so every
// caller (and every rerun) sees the same process for the same window.
std::vector<ProcessSample> WindowProcessUtilization(const SimState& s, int device,
                                                    uint64_t last_seen_us);

// One sample as nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) returns it:
// the device's busy percent over one closed NVML window (the device figure,
// right whatever the processes) and the window's end.
struct DeviceSample {
  uint64_t timestamp_us;
  uint32_t percent;
};

// The closed windows of `device` ending after `last_seen_us`, oldest first,
// idle ones included (0 %). Empty if nothing is newer.
std::vector<DeviceSample> GpuUtilizationSamples(const SimState& s, int device,
                                                uint64_t last_seen_us);

// A process in a device's running-process list.
struct RunningProcess {
  int32_t pid;
  uint64_t used_bytes;
};

// Live processes holding memory on `device`, in process-slot order. As on a
// real GPU, an MPS client's memory is attributed to its MPS server process
// (the clients themselves are not listed for it).
std::vector<RunningProcess> RunningComputeProcesses(const SimState& s, int device);

// The MPS clients with contexts on `device` and their memory
// (nvmlDeviceGetMPSComputeRunningProcesses).
std::vector<RunningProcess> MpsClientProcesses(const SimState& s, int device);

}  // namespace gpuslice::sim::nvml
