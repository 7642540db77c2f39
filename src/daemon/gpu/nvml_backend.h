// NvmlBackend: GpuBackend over NVML. libnvidia-ml.so.1 is loaded by soname
// with dlopen at run time (never linked), so the library search path chooses
// between the real driver and the simulated GPU.
//
// XID errors are watched on a thread of its own (xid_watch.h) from Open()
// on, and reported in each Read().
//
// Thread-safe: NVML itself is; the locked-clock record has its own mutex.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/xid_watch.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::daemon {

// The major number of a driver version ("615.10" -> 615); 0 when it has none.
int DriverMajor(std::string_view version);

class NvmlBackend final : public GpuBackend {
 public:
  // Loads NVML (`library`, default the soname), initialises it and finds every
  // GPU. kUnavailable naming the library when it cannot be loaded or started.
  static StatusOr<std::unique_ptr<NvmlBackend>> Open(const char* library = "libnvidia-ml.so.1");
  ~NvmlBackend() override;
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  uint32_t DeviceCount() const override;
  StatusOr<GpuInfo> Read(uint32_t index) override;
  StatusOr<GpuFacts> Facts(uint32_t index) override;
  StatusOr<SettingValue> Get(uint32_t index, SettingKind kind) override;
  Status Set(uint32_t index, const SettingValue& value) override;
  StatusOr<EnergyReading> Energy(uint32_t index) override;
  StatusOr<std::vector<GpuProcess>> Processes(uint32_t index) override;
  StatusOr<std::vector<ProcessUtilization>> ProcessUtilizationSince(uint32_t index,
                                                                    uint64_t since_us) override;
  // nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES).
  StatusOr<std::vector<BusySample>> BusySince(uint32_t index, uint64_t since_us) override;
  Status SetMemoryLimits(uint32_t index, const std::string& cgroup, uint64_t soft_bytes,
                         uint64_t hard_bytes) override;
  // NVML's MIG management (nvml_backend_mig.cc).
  StatusOr<std::vector<MigProfile>> MigProfiles(uint32_t index) override;
  StatusOr<std::vector<MigInstance>> MigInstances(uint32_t index) override;
  StatusOr<MigInstance> CreateMigInstance(uint32_t index, uint32_t profile_id,
                                          MigPlacement placement) override;
  Status DestroyMigInstance(uint32_t index, uint32_t gpu_instance_id) override;

  struct Api;  // the resolved entry points (nvml_backend.cc)

 private:
  class XidSource;
  NvmlBackend() = default;
  // Starts xids_ where NVML has event sets and a GPU supports XID events
  // (logged event=xid_watch_unavailable otherwise).
  void WatchXids();
  Status Check(nvmlReturn_t rc, const char* what, uint32_t index) const;
  // OK when GPU `index` exists, NVML has the MIG API and the GPU is in MIG mode.
  Status MigReady(uint32_t index) const;
  // The compute-instance profile of all of GPU instance `gi`'s slices.
  StatusOr<nvmlComputeInstanceProfileInfo_t> WholeComputeProfile(nvmlGpuInstance_t gi,
                                                                 uint32_t index) const;

  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<nvmlDevice_t> devices_;
  std::string driver_version_;  // "" when NVML does not say
  mutable Mutex mu_;
  std::vector<std::optional<ClockRange>> locked_gpu_ GUARDED_BY(mu_);
  std::vector<std::optional<ClockRange>> locked_mem_ GUARDED_BY(mu_);
  std::unique_ptr<XidWatch> xids_;  // null: no XID events; Read() fills GpuInfo's xid fields
};

}  // namespace gpuslice::daemon
