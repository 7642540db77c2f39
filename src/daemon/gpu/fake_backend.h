// FakeBackend: an in-process GpuBackend for unit tests. GPUs are plain
// GpuInfo records; every Set is logged in order; failures can be injected.
//
// Thread-safe (one mutex).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

// The H100 80GB's GPU-instance profiles, as NVIDIA's MIG user guide lists
// them (memory in eighths of 80 GiB).
std::vector<MigProfile> FakeH100MigProfiles();

class FakeBackend final : public GpuBackend {
 public:
  // `count` GPUs shaped like an H100: power 200-700 W (limit 700 W), clocks up
  // to 1980/2619 MHz, UUIDs "GPU-fake-0", ...
  explicit FakeBackend(uint32_t count);

  uint32_t DeviceCount() const override;
  StatusOr<GpuInfo> Read(uint32_t index) override;
  StatusOr<SettingValue> Get(uint32_t index, SettingKind kind) override;
  Status Set(uint32_t index, const SettingValue& value) override;
  StatusOr<EnergyReading> Energy(uint32_t index) override;
  StatusOr<std::vector<GpuProcess>> Processes(uint32_t index) override;
  StatusOr<std::vector<ProcessUtilization>> ProcessUtilizationSince(uint32_t index,
                                                                    uint64_t since_us) override;
  StatusOr<std::vector<BusySample>> BusySince(uint32_t index, uint64_t since_us) override;
  // Kept per GPU and cgroup (a clear removes the entry); fails with
  // kUnimplemented unless the GPU's features say memory_limits_api, or with
  // what FailMemoryLimits injected.
  Status SetMemoryLimits(uint32_t index, const std::string& cgroup, uint64_t soft_bytes,
                         uint64_t hard_bytes) override;

  // MIG, on a GPU put in MIG mode (features.mig) by EnableMig: the H100
  // 80GB's profiles (FakeH100MigProfiles), instances at free placements.
  StatusOr<std::vector<MigProfile>> MigProfiles(uint32_t index) override;
  StatusOr<std::vector<MigInstance>> MigInstances(uint32_t index) override;
  StatusOr<MigInstance> CreateMigInstance(uint32_t index, uint32_t profile_id,
                                          MigPlacement placement) override;
  Status DestroyMigInstance(uint32_t index, uint32_t gpu_instance_id) override;
  // Puts GPU `index` in MIG mode (or out of it, dropping its instances).
  void EnableMig(uint32_t index, bool enabled = true);
  // The next CreateMigInstance on `index` fails with `status` (ok: none).
  void FailMigCreates(uint32_t index, Status status);
  // While `in_use`, DestroyMigInstance of that instance fails (a process is on it).
  void SetMigInUse(uint32_t index, uint32_t gpu_instance_id, bool in_use);

  struct MemoryLimit {
    uint64_t soft_bytes = 0;
    uint64_t hard_bytes = 0;
    bool operator==(const MemoryLimit&) const = default;
  };
  // The driver limits set on GPU `index`, by cgroup path.
  std::map<std::string, MemoryLimit> MemoryLimits(uint32_t index) const;
  // Every SetMemoryLimits call so far.
  int memory_limit_calls() const;
  // Every SetMemoryLimits on `index` fails with `status` (ok: none fails).
  void FailMemoryLimits(uint32_t index, Status status);
  // Only the clears (soft 0, hard kNoMemoryLimit) on `index` fail with
  // `status` (ok: none fails); sets still work.
  void FailMemoryLimitClears(uint32_t index, Status status);

  struct Call {
    uint32_t index;
    SettingValue value;
  };
  std::vector<Call> Calls() const;
  // Runs inside every Set before it applies (e.g. to block or record order).
  void SetHook(std::function<void(uint32_t index, const SettingValue&)> hook);
  // The next Set on `index` (every Set while `sticky`) fails with `status`.
  void FailSets(uint32_t index, Status status, bool sticky = false);
  // Every Processes call that reached a GPU so far.
  int process_reads() const;
  // What Processes(index) reports from now on.
  void SetProcesses(uint32_t index, std::vector<GpuProcess> processes);
  // Adds NVML utilization samples of GPU `index` (returned by
  // ProcessUtilizationSince when newer than its argument).
  void AddUtilization(uint32_t index, const std::vector<ProcessUtilization>& samples);
  // Adds device busy samples of GPU `index` (returned by BusySince when newer
  // than its argument).
  void AddBusy(uint32_t index, const std::vector<BusySample>& samples);
  // While `fail`, Read(index) fails (kUnavailable), as for a GPU that fell off the bus.
  void FailReads(uint32_t index, bool fail);
  // Direct access to a GPU's record (tests change sampled values).
  void Mutate(uint32_t index, const std::function<void(GpuInfo&)>& f);

 private:
  mutable Mutex mu_;
  std::vector<GpuInfo> gpus_;
  std::vector<std::vector<GpuProcess>> processes_;
  std::vector<std::vector<ProcessUtilization>> utilization_;
  std::vector<std::vector<BusySample>> busy_;
  std::vector<Call> calls_;
  std::vector<uint32_t> failing_reads_;
  std::function<void(uint32_t, const SettingValue&)> hook_;
  struct Failure {
    uint32_t index;
    Status status;
    bool sticky;
  };
  std::vector<Failure> failures_;
  std::map<uint32_t, std::map<std::string, MemoryLimit>> memory_limits_;
  std::map<uint32_t, Status> memory_limit_failures_;
  std::map<uint32_t, Status> memory_limit_clear_failures_;
  int memory_limit_calls_ = 0;
  struct FakeMig {
    std::vector<MigInstance> instances;
    std::vector<uint32_t> in_use;  // GPU instance ids
    Status next_create_failure;
  };
  std::map<uint32_t, FakeMig> mig_;
  uint64_t mig_uuids_ = 0;
  int process_reads_ = 0;
};

}  // namespace gpuslice::daemon
