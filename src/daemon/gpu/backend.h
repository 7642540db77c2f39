// GpuBackend: the one way the daemon reaches GPUs. NvmlBackend (NVML loaded
// by soname at run time) in production and on the simulated GPU; FakeBackend
// in unit tests.
//
// Thread safety: implementations are safe to call from several threads at
// once (the monitor samples while executors apply settings).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/gpu/compute_mode.h"
#include "daemon/gpu/setting.h"

namespace gpuslice::daemon {

// What a GPU's node offers for partitioning it (DESIGN.md section 5a): the
// backend fills the driver's part, the daemon the node's (cgroup v2, MPS).
struct GpuFeatures {
  std::string driver_version;      // "615.10"; "" when the driver does not say
  bool mig = false;                // MIG mode enabled
  bool memory_limits_api = false;  // nvmlDeviceSetMemoryLimits_v1 present (r615+)
  bool cgroup_v2 = false;          // the node's cgroup root is cgroup v2
  // MPS: 0 unavailable (`mps_reason` says why), else the protocol the
  // control daemon speaks (2 legacy, 3 with namespaces and a TOML config).
  uint32_t mps_protocol = 0;
  std::string mps_reason;

  bool operator==(const GpuFeatures&) const = default;
};

// The clearing value of a hard limit (NVML_DEVICE_MEMORY_LIMIT_MAX).
inline constexpr uint64_t kNoMemoryLimit = ~0ull;

// Everything the daemon reports about one GPU at one instant.
struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_free_bytes = 0;
  uint32_t utilization_gpu_percent = 0;
  uint32_t utilization_memory_percent = 0;
  uint32_t power_draw_mw = 0;
  uint32_t power_limit_mw = 0;
  uint32_t power_min_mw = 0;  // constraints of the power limit
  uint32_t power_max_mw = 0;
  uint32_t power_default_mw = 0;
  uint64_t energy_mj = 0;  // total since driver load, millijoules
  uint32_t sm_clock_mhz = 0;
  uint32_t memory_clock_mhz = 0;
  uint32_t max_sm_clock_mhz = 0;
  uint32_t max_memory_clock_mhz = 0;
  uint32_t temperature_c = 0;                      // GPU core temperature, degrees Celsius
  std::optional<ClockRange> locked_gpu_clocks;     // what the daemon locked (NVML has no getter)
  std::optional<ClockRange> locked_memory_clocks;  // likewise
  bool persistence = false;
  // As NVML reports it (a value NVML does not define is kept and named UNKNOWN).
  ComputeMode compute_mode = ComputeMode::kDefault;
  std::string mps = "off";  // filled by the MPS provider, when there is one
  GpuFeatures features;
  // XID errors NVML reported since the daemon started (xid_watch.h): how
  // many, the last, and the last critical one (0: none; the GPU is then
  // unhealthy until the daemon restarts).
  uint64_t xid_errors = 0;
  uint32_t last_xid = 0;
  uint32_t critical_xid = 0;

  bool operator==(const GpuInfo&) const = default;
};

// A process using a GPU, as the driver sees it (host pid: NVML reports the
// pids of the host's pid namespace, whatever container the process is in).
struct GpuProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_memory_bytes;  // none when the driver withholds it

  bool operator==(const GpuProcess&) const = default;
};

// One NVML per-process utilization sample: the process kept the SMs busy
// `sm_percent` of the sampling window that closed at `timestamp_us`
// (CLOCK_REALTIME microseconds).
struct ProcessUtilization {
  uint32_t pid = 0;
  uint64_t timestamp_us = 0;
  uint32_t sm_percent = 0;

  bool operator==(const ProcessUtilization&) const = default;
};

// One read of a GPU's compute processes (and, where asked for, its
// per-process utilization samples), taken once per monitor tick for every
// reader (the backstop's checks and GpuUsageCache).
struct GpuProcessReading {
  uint32_t index = 0;
  std::string uuid;
  std::optional<std::vector<GpuProcess>> processes;        // nullopt: could not be read
  std::optional<std::vector<ProcessUtilization>> samples;  // nullopt: not read, or could not be
};

// One NVML window of a GPU (nvmlDeviceGetSamples, GPU utilization): the
// percent of it in which a kernel ran, and its end (CLOCK_REALTIME us).
struct BusySample {
  uint64_t timestamp_us = 0;
  uint32_t percent = 0;

  bool operator==(const BusySample&) const = default;
};

struct EnergyReading {
  uint64_t energy_mj = 0;
  uint32_t power_mw = 0;
};

// What a GPU is, fixed while the driver runs (for the Kubernetes
// ResourceSlices' attributes); "" where unknown.
struct GpuFacts {
  std::string compute_capability;  // "8.0"
  std::string driver_version;      // "535.104.05"
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // GPU `index`'s facts; kUnimplemented from a backend that reads none.
  virtual StatusOr<GpuFacts> Facts(uint32_t /*index*/) {
    return Unimplemented("this GPU backend reads no compute capability or driver version");
  }

  virtual uint32_t DeviceCount() const = 0;
  // A full sample of GPU `index`. REQUIRES: index < DeviceCount().
  virtual StatusOr<GpuInfo> Read(uint32_t index) = 0;
  // The current value of one setting (locked clocks: the last range this
  // backend set, since NVML cannot read it back), of kind `kind`.
  virtual StatusOr<SettingValue> Get(uint32_t index, SettingKind kind) = 0;
  // Applies `value`. kPermissionDenied when the daemon lacks the privilege,
  // kInvalidArgument when the driver refuses the value.
  virtual Status Set(uint32_t index, const SettingValue& value) = 0;
  virtual StatusOr<EnergyReading> Energy(uint32_t index) = 0;
  // The compute processes on GPU `index` (MPS clients appear as their server).
  virtual StatusOr<std::vector<GpuProcess>> Processes(uint32_t index) = 0;
  // Per-process utilization samples newer than `since_us` (CLOCK_REALTIME
  // microseconds); empty when no sampling window closed since.
  virtual StatusOr<std::vector<ProcessUtilization>> ProcessUtilizationSince(uint32_t index,
                                                                            uint64_t since_us) = 0;
  // The device's busy samples (its own figure, whatever the processes)
  // newer than `since_us`, oldest first; empty when none closed since;
  // kUnimplemented from a backend or driver without them.
  virtual StatusOr<std::vector<BusySample>> BusySince(uint32_t /*index*/, uint64_t /*since_us*/) {
    return Unimplemented("this GPU backend reads no device utilization samples");
  }
  // The driver's per-cgroup memory limits (r615; DESIGN.md section 5a) on GPU
  // `index` for the cgroup at sysfs path `cgroup` ("/sys/fs/cgroup/a/b"):
  // allocations of its processes beyond `hard_bytes` fail; `soft_bytes` is
  // guaranteed. Soft 0 with hard kNoMemoryLimit clears them. Errors:
  // kUnimplemented (the driver has none), kFailedPrecondition (MIG, no
  // cgroup v2), kNotFound (no such cgroup), kPermissionDenied (not root),
  // kInvalidArgument (soft above hard, a path outside the cgroup root).
  virtual Status SetMemoryLimits(uint32_t /*index*/, const std::string& /*cgroup*/,
                                 uint64_t /*soft_bytes*/, uint64_t /*hard_bytes*/) {
    return {StatusCode::kUnimplemented, "this backend has no driver memory limits"};
  }
};

}  // namespace gpuslice::daemon
