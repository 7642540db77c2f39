// Which exported shim stands for which entry point: used by the dlsym and
// cuGetProcAddress interposition to hand out shims instead of real entries.
//
// Thread-safe; the lookups allocate nothing.
#pragma once

#include <string_view>

namespace gpuslice::limiter {

// The exported CUDA shim named `name` (e.g. "cuMemAlloc_v2"), or nullptr if
// the limiter does not interpose that name.
void* CudaShim(std::string_view name);

// The shim for the real driver entry point `real_fn` (as returned by the real
// cuGetProcAddress), or nullptr if that entry point is not interposed.
void* CudaShimForReal(void* real_fn);

// True if `fn` is one of the exported CUDA shims.
bool IsCudaShim(const void* fn);

// The exported NVML shim named `name`, or nullptr.
void* NvmlShim(std::string_view name);

}  // namespace gpuslice::limiter
