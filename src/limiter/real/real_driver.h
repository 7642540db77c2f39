// The real CUDA driver and NVML, loaded by soname (libcuda.so.1,
// libnvidia-ml.so.1) on first use: typed tables of the entry points the
// limiter interposes (from shims/*_hooks.inc) and of the few it calls for
// itself. The simulated GPU is picked up exactly like a real driver: through
// the library search path.
//
// A library that cannot be loaded leaves every entry null; CallCuda/CallNvml
// then return CUDA_ERROR_NOT_INITIALIZED / NVML_ERROR_LIBRARY_NOT_FOUND, and an
// entry point the library lacks returns CUDA_ERROR_NOT_SUPPORTED /
// NVML_ERROR_FUNCTION_NOT_FOUND. NVIDIA's stub libcuda.so loads and answers
// every call with its own error (CUDA_ERROR_STUB_LIBRARY), which passes through.
//
// Thread-safe. The tables are filled once and never freed.
#pragma once

#include <atomic>

#include "cuda_abi/cuda_driver_api.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::limiter::real {

// NOLINTBEGIN(bugprone-macro-parentheses): the X-macros expand to declarations.
struct CudaTable {
  bool loaded = false;  // libcuda.so.1 was found
#define GS_CUDA_HOOK(name, params, args) CUresult(*name) params = nullptr;
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
  // Called by the limiter itself, never interposed.
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGetUuid_v2) cuDeviceGetUuid_v2 = nullptr;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuStreamGetCtx) cuStreamGetCtx = nullptr;
  decltype(&::cuStreamGetDevice) cuStreamGetDevice = nullptr;  // r570+ (CUDA 12.8)
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuStreamIsCapturing) cuStreamIsCapturing = nullptr;
  decltype(&::cuStreamQuery) cuStreamQuery = nullptr;
  decltype(&::cuEventCreate) cuEventCreate = nullptr;
  decltype(&::cuEventRecord) cuEventRecord = nullptr;
  decltype(&::cuEventQuery) cuEventQuery = nullptr;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime = nullptr;
  decltype(&::cuEventDestroy_v2) cuEventDestroy_v2 = nullptr;
  decltype(&::cuArrayGetMemoryRequirements) cuArrayGetMemoryRequirements = nullptr;
  decltype(&::cuMemPoolGetAttribute) cuMemPoolGetAttribute = nullptr;
  decltype(&::cuDeviceGetMemPool) cuDeviceGetMemPool = nullptr;
  decltype(&::cuDeviceGetDefaultMemPool) cuDeviceGetDefaultMemPool = nullptr;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
  decltype(&::cuDeviceGetGraphMemAttribute) cuDeviceGetGraphMemAttribute = nullptr;
  decltype(&::cuGraphGetNodes) cuGraphGetNodes = nullptr;
  decltype(&::cuGraphNodeGetType) cuGraphNodeGetType = nullptr;
  decltype(&::cuGraphMemAllocNodeGetParams) cuGraphMemAllocNodeGetParams = nullptr;
  decltype(&::cuMipmappedArrayGetMemoryRequirements) cuMipmappedArrayGetMemoryRequirements =
      nullptr;
};

struct NvmlTable {
  bool loaded = false;
#define GS_NVML_HOOK(name, params, args) nvmlReturn_t(*name) params = nullptr;
#include "limiter/shims/nvml_hooks.inc"
#undef GS_NVML_HOOK
  decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) nvmlDeviceGetCount_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) nvmlDeviceGetHandleByIndex_v2 = nullptr;
  decltype(&::nvmlInit_v2) nvmlInit_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByUUID) nvmlDeviceGetHandleByUUID = nullptr;
  decltype(&::nvmlDeviceGetSamples) nvmlDeviceGetSamples = nullptr;
};
// NOLINTEND(bugprone-macro-parentheses)

namespace detail {
// The CUDA table once a call of Cuda() found it loaded (never reset), so
// that every later call is one load inline (the allocation, free and launch
// paths make one or two each).
inline constinit std::atomic<const CudaTable*> loaded_cuda{nullptr};
const CudaTable& CudaSlow();
}  // namespace detail

// The tables, loaded on first call.
inline const CudaTable& Cuda() {
  if (const CudaTable* t = detail::loaded_cuda.load(std::memory_order_acquire)) [[likely]] {
    return *t;
  }
  return detail::CudaSlow();
}
const NvmlTable& Nvml();

// The CUDA table if a call to Cuda() has loaded it (libcuda.so.1 found and
// its entry points resolved), else nullptr; never loads anything.
const CudaTable* CudaIfLoaded();

// The loaded libraries' handles (nullptr if not loaded), for dlsym and
// cuGetProcAddress passthrough.
void* CudaHandle();
void* NvmlHandle();

// glibc's own dlsym (the limiter interposes dlsym).
void* RealDlsym(void* handle, const char* name);

// Calls `fn` through `call` if present, else returns the error for a missing
// library or entry point.
template <typename Fn, typename Call>
CUresult CallCuda(Fn fn, Call&& call) {
  if (fn == nullptr) return Cuda().loaded ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  return call(fn);
}
// Calls `table`'s `entry` through `call` if present, else returns the error
// for a missing library or entry point (as CallCuda above, on any table).
template <typename Fn, typename Call>
CUresult CallCuda(const CudaTable& table, Fn CudaTable::*entry, Call&& call) {
  const Fn fn = table.*entry;
  if (fn == nullptr) return table.loaded ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  return call(fn);
}
template <typename Fn, typename Call>
nvmlReturn_t CallNvml(const NvmlTable& table, Fn NvmlTable::*entry, Call&& call) {
  const Fn fn = table.*entry;
  if (fn == nullptr) {
    return table.loaded ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  return call(fn);
}
template <typename Fn, typename Call>
nvmlReturn_t CallNvml(Fn fn, Call&& call) {
  if (fn == nullptr) {
    return Nvml().loaded ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  return call(fn);
}

}  // namespace gpuslice::limiter::real
