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

// MIG (NVIDIA's MIG user guide; DESIGN.md section 7a): a GPU in MIG mode is
// carved into GPU instances, each at a placement of memory slices, each
// holding compute instances; a compute instance is a MIG device with a
// "MIG-" UUID that CUDA_VISIBLE_DEVICES selects.
struct MigPlacement {
  uint32_t start = 0;  // the first memory slice
  uint32_t size = 0;   // memory slices

  bool operator==(const MigPlacement&) const = default;
  // Whether the two share a memory slice.
  bool Overlaps(const MigPlacement& o) const {
    return start < o.start + o.size && o.start < start + size;
  }
};

// A GPU-instance profile the GPU offers (nvmlDeviceGetGpuInstanceProfileInfoV).
struct MigProfile {
  uint32_t id = 0;      // NVML's profile id, what creation takes
  std::string name;     // "1g.10gb"
  uint32_t slices = 0;  // compute slices
  uint64_t memory_bytes = 0;
  uint32_t sm_count = 0;
  std::vector<MigPlacement> placements;  // every legal one, free or taken

  bool operator==(const MigProfile&) const = default;
};

// A GPU instance and its compute instance: one MIG device.
struct MigInstance {
  uint32_t gpu_instance_id = 0;
  std::optional<uint32_t> compute_instance_id;  // none: the GPU instance has no compute instance
  uint32_t profile_id = 0;
  std::string profile;  // "1g.10gb"
  MigPlacement placement;
  std::string uuid;  // the compute instance's "MIG-..."; "" without one
  uint64_t memory_bytes = 0;
  // What its processes use (nvmlDeviceGetMemoryInfo of the MIG device);
  // none without a compute instance or where the driver does not say.
  std::optional<uint64_t> memory_used_bytes;

  bool operator==(const MigInstance&) const = default;
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

  // MIG on GPU `index` (in MIG mode; GpuFeatures::mig). kUnimplemented from
  // a backend or driver without NVML's MIG API; kFailedPrecondition when the
  // GPU is not in MIG mode.
  //
  // The GPU-instance profiles the GPU offers, smallest first.
  virtual StatusOr<std::vector<MigProfile>> MigProfiles(uint32_t /*index*/) {
    return Unimplemented("this GPU backend has no MIG");
  }
  // Every GPU instance on the GPU, whoever made it, by id.
  virtual StatusOr<std::vector<MigInstance>> MigInstances(uint32_t /*index*/) {
    return Unimplemented("this GPU backend has no MIG");
  }
  // Creates a GPU instance of profile `profile_id` at `placement` and in it
  // one compute instance of all its slices (the shared engine profile).
  // Either both are made or neither is left. Errors: kResourceExhausted (the
  // placement is taken), kInvalidArgument (a placement the profile may not
  // take), kPermissionDenied (not root), kFailedPrecondition.
  virtual StatusOr<MigInstance> CreateMigInstance(uint32_t /*index*/, uint32_t /*profile_id*/,
                                                  MigPlacement /*placement*/) {
    return Unimplemented("this GPU backend has no MIG");
  }
  // Destroys GPU instance `gpu_instance_id` with its compute instances.
  // kNotFound (no such instance), kFailedPrecondition (a process uses it).
  virtual Status DestroyMigInstance(uint32_t /*index*/, uint32_t /*gpu_instance_id*/) {
    return Unimplemented("this GPU backend has no MIG");
  }
};

}  // namespace gpuslice::daemon
