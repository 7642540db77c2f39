// The NVML entry points NvmlBackend resolves with dlsym, shared by its
// source files (nvml_backend.cc, nvml_backend_mig.cc). Internal to gpu/.
#pragma once

#include "daemon/gpu/nvml_backend.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::daemon {

// X(name, return, arguments): every NVML entry point the daemon calls.
#define GS_NVML_FUNCTIONS(X)                                                                    \
  X(nvmlInit_v2, (void))                                                                        \
  X(nvmlShutdown, (void))                                                                       \
  X(nvmlErrorString, (nvmlReturn_t))                                                            \
  X(nvmlDeviceGetCount_v2, (unsigned int*))                                                     \
  X(nvmlDeviceGetHandleByIndex_v2, (unsigned int, nvmlDevice_t*))                               \
  X(nvmlDeviceGetName, (nvmlDevice_t, char*, unsigned int))                                     \
  X(nvmlDeviceGetUUID, (nvmlDevice_t, char*, unsigned int))                                     \
  X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t*))                                     \
  X(nvmlDeviceGetUtilizationRates, (nvmlDevice_t, nvmlUtilization_t*))                          \
  X(nvmlDeviceGetPowerUsage, (nvmlDevice_t, unsigned int*))                                     \
  X(nvmlDeviceGetPowerManagementLimit, (nvmlDevice_t, unsigned int*))                           \
  X(nvmlDeviceGetPowerManagementLimitConstraints, (nvmlDevice_t, unsigned int*, unsigned int*)) \
  X(nvmlDeviceGetPowerManagementDefaultLimit, (nvmlDevice_t, unsigned int*))                    \
  X(nvmlDeviceGetTotalEnergyConsumption, (nvmlDevice_t, unsigned long long*))                   \
  X(nvmlDeviceGetClockInfo, (nvmlDevice_t, nvmlClockType_t, unsigned int*))                     \
  X(nvmlDeviceGetMaxClockInfo, (nvmlDevice_t, nvmlClockType_t, unsigned int*))                  \
  X(nvmlDeviceGetPersistenceMode, (nvmlDevice_t, nvmlEnableState_t*))                           \
  X(nvmlDeviceGetComputeMode, (nvmlDevice_t, nvmlComputeMode_t*))                               \
  X(nvmlDeviceGetTemperature, (nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*))          \
  X(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*)) \
  X(nvmlDeviceGetProcessUtilization,                                                            \
    (nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*, unsigned long long))         \
  X(nvmlDeviceSetPowerManagementLimit, (nvmlDevice_t, unsigned int))                            \
  X(nvmlDeviceSetGpuLockedClocks, (nvmlDevice_t, unsigned int, unsigned int))                   \
  X(nvmlDeviceResetGpuLockedClocks, (nvmlDevice_t))                                             \
  X(nvmlDeviceSetMemoryLockedClocks, (nvmlDevice_t, unsigned int, unsigned int))                \
  X(nvmlDeviceResetMemoryLockedClocks, (nvmlDevice_t))                                          \
  X(nvmlDeviceSetPersistenceMode, (nvmlDevice_t, nvmlEnableState_t))                            \
  X(nvmlDeviceSetComputeMode, (nvmlDevice_t, nvmlComputeMode_t))

// Optional entry points: null where the driver lacks them (an older driver,
// a GPU without MIG); what depends on them is reported absent.
#define GS_NVML_OPTIONAL_FUNCTIONS(X)                                                              \
  X(nvmlSystemGetDriverVersion, (char*, unsigned int))                                             \
  X(nvmlDeviceGetCudaComputeCapability, (nvmlDevice_t, int*, int*))                                \
  X(nvmlDeviceGetMigMode, (nvmlDevice_t, unsigned int*, unsigned int*))                            \
  X(nvmlDeviceSetMemoryLimits_v1, (nvmlDevice_t, nvmlSetMemoryLimits_v1_t*))                       \
  X(nvmlEventSetCreate, (nvmlEventSet_t*))                                                         \
  X(nvmlEventSetFree, (nvmlEventSet_t))                                                            \
  X(nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t, unsigned long long*))                         \
  X(nvmlDeviceRegisterEvents, (nvmlDevice_t, unsigned long long, nvmlEventSet_t))                  \
  X(nvmlEventSetWait_v2, (nvmlEventSet_t, nvmlEventData_t*, unsigned int))                         \
  X(nvmlDeviceGetSamples, (nvmlDevice_t, nvmlSamplingType_t, unsigned long long, nvmlValueType_t*, \
                           unsigned int*, nvmlSample_t*))                                          \
  GS_NVML_MIG_FUNCTIONS(X)

// MIG management (nvml_backend_mig.cc): all present or the backend has no MIG.
#define GS_NVML_MIG_FUNCTIONS(X)                                                                \
  X(nvmlDeviceGetGpuInstanceProfileInfoV,                                                       \
    (nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_v2_t*))                             \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2,                                              \
    (nvmlDevice_t, unsigned int, nvmlGpuInstancePlacement_t*, unsigned int*))                   \
  X(nvmlDeviceCreateGpuInstanceWithPlacement,                                                   \
    (nvmlDevice_t, unsigned int, const nvmlGpuInstancePlacement_t*, nvmlGpuInstance_t*))        \
  X(nvmlGpuInstanceDestroy, (nvmlGpuInstance_t))                                                \
  X(nvmlDeviceGetGpuInstances, (nvmlDevice_t, unsigned int, nvmlGpuInstance_t*, unsigned int*)) \
  X(nvmlDeviceGetGpuInstanceById, (nvmlDevice_t, unsigned int, nvmlGpuInstance_t*))             \
  X(nvmlGpuInstanceGetInfo, (nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*))                        \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfo,                                               \
    (nvmlGpuInstance_t, unsigned int, unsigned int, nvmlComputeInstanceProfileInfo_t*))         \
  X(nvmlGpuInstanceCreateComputeInstance,                                                       \
    (nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t*))                                  \
  X(nvmlComputeInstanceDestroy, (nvmlComputeInstance_t))                                        \
  X(nvmlGpuInstanceGetComputeInstances,                                                         \
    (nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t*, unsigned int*))                   \
  X(nvmlComputeInstanceGetInfo_v2, (nvmlComputeInstance_t, nvmlComputeInstanceInfo_t*))         \
  X(nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t, unsigned int*))                              \
  X(nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t, unsigned int, nvmlDevice_t*))           \
  X(nvmlDeviceGetGpuInstanceId, (nvmlDevice_t, unsigned int*))                                  \
  X(nvmlDeviceGetComputeInstanceId, (nvmlDevice_t, unsigned int*))

// NOLINTBEGIN(bugprone-macro-parentheses): `name` is a declarator and a symbol name.
struct NvmlBackend::Api {
#define GS_NVML_MEMBER(name, args) decltype(&::name) name = nullptr;
  GS_NVML_FUNCTIONS(GS_NVML_MEMBER)
  GS_NVML_OPTIONAL_FUNCTIONS(GS_NVML_MEMBER)
#undef GS_NVML_MEMBER
};
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace gpuslice::daemon
