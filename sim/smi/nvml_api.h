// The NVML entry points the simulated nvidia-smi uses, resolved at run time
// from whatever "libnvidia-ml.so.1" the dynamic loader finds (LD_PRELOAD,
// LD_LIBRARY_PATH, RUNPATH, system paths), exactly like the real tool: an
// interposer or another library on the search path changes what it shows.
//
// Every entry point is optional: a missing one reads as
// NVML_ERROR_FUNCTION_NOT_FOUND through Call().
//
// Not thread-safe; one per process.
#pragma once

#include <string>

#include "nvml_abi/nvml.h"

namespace gpuslice::smi {

// X(name): every NVML function the tool may call.
#define GS_SMI_NVML_FUNCTIONS(X)                   \
  X(nvmlInit_v2)                                   \
  X(nvmlShutdown)                                  \
  X(nvmlErrorString)                               \
  X(nvmlSystemGetDriverVersion)                    \
  X(nvmlSystemGetCudaDriverVersion_v2)             \
  X(nvmlSystemGetProcessName)                      \
  X(nvmlDeviceGetCount_v2)                         \
  X(nvmlDeviceGetHandleByIndex_v2)                 \
  X(nvmlDeviceGetHandleByUUID)                     \
  X(nvmlDeviceGetHandleByPciBusId_v2)              \
  X(nvmlDeviceGetIndex)                            \
  X(nvmlDeviceGetName)                             \
  X(nvmlDeviceGetUUID)                             \
  X(nvmlDeviceGetSerial)                           \
  X(nvmlDeviceGetPciInfo_v3)                       \
  X(nvmlDeviceGetMemoryInfo)                       \
  X(nvmlDeviceGetMemoryInfo_v2)                    \
  X(nvmlDeviceGetUtilizationRates)                 \
  X(nvmlDeviceGetPowerUsage)                       \
  X(nvmlDeviceGetPowerManagementLimit)             \
  X(nvmlDeviceGetPowerManagementDefaultLimit)      \
  X(nvmlDeviceGetPowerManagementLimitConstraints)  \
  X(nvmlDeviceGetEnforcedPowerLimit)               \
  X(nvmlDeviceGetTemperature)                      \
  X(nvmlDeviceGetClockInfo)                        \
  X(nvmlDeviceGetMaxClockInfo)                     \
  X(nvmlDeviceGetPersistenceMode)                  \
  X(nvmlDeviceGetComputeMode)                      \
  X(nvmlDeviceGetPerformanceState)                 \
  X(nvmlDeviceGetFanSpeed)                         \
  X(nvmlDeviceGetDisplayActive)                    \
  X(nvmlDeviceGetTotalEccErrors)                   \
  X(nvmlDeviceGetMigMode)                          \
  X(nvmlDeviceSetMigMode)                          \
  X(nvmlDeviceGetGpuInstanceProfileInfoV)          \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2) \
  X(nvmlDeviceGetGpuInstanceRemainingCapacity)     \
  X(nvmlDeviceCreateGpuInstance)                   \
  X(nvmlDeviceGetGpuInstances)                     \
  X(nvmlGpuInstanceDestroy)                        \
  X(nvmlGpuInstanceGetInfo)                        \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfo)  \
  X(nvmlGpuInstanceCreateComputeInstance)          \
  X(nvmlGpuInstanceGetComputeInstances)            \
  X(nvmlComputeInstanceGetInfo_v2)                 \
  X(nvmlComputeInstanceDestroy)                    \
  X(nvmlDeviceGetMigDeviceHandleByIndex)           \
  X(nvmlDeviceSetMemoryLimits_v1)                  \
  X(nvmlDeviceGetMemoryLimits_v1)                  \
  X(nvmlDeviceGetComputeRunningProcesses_v3)

class NvmlApi {
 public:
  // Loads `soname` (normally "libnvidia-ml.so.1"). On failure returns false
  // and sets *error to the loader's message.
  bool Load(const char* soname, std::string* error);

  // Calls entry point `fn` (a member pointer below) with `args`, or returns
  // NVML_ERROR_FUNCTION_NOT_FOUND if the library lacks it.
  template <typename Fn, typename... Args>
  nvmlReturn_t Call(Fn NvmlApi::*fn, Args... args) const {
    Fn f = this->*fn;
    return f == nullptr ? NVML_ERROR_FUNCTION_NOT_FOUND : f(args...);
  }

  // nvmlErrorString, or a fallback when the library lacks it.
  const char* ErrorString(nvmlReturn_t r) const;

// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is the declared member's name
#define GS_SMI_DECLARE(name) decltype(&::name) name = nullptr;
  GS_SMI_NVML_FUNCTIONS(GS_SMI_DECLARE)
#undef GS_SMI_DECLARE

 private:
  void* handle_ = nullptr;  // never closed: the process exits soon after
};

}  // namespace gpuslice::smi
