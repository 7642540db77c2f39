// The limiter's hook for every interposed entry point: one function per line
// of shims/cuda_hooks.inc and shims/nvml_hooks.inc, with the exported
// symbol's name and signature, in namespace gpuslice::limiter::hooks. The
// exported shims (shims/*.cc) forward to these; dlsym and cuGetProcAddress
// hand out the shims.
//
// Contract of every hook: noexcept, never aborts, returns the driver's own
// error codes; thread-safe; safe to call before cuInit and after fork.
#pragma once

#include "cuda_abi/cuda_driver_api.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::limiter::hooks {

#define GS_CUDA_HOOK(name, params, args) CUresult name params noexcept;
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK

#define GS_NVML_HOOK(name, params, args) nvmlReturn_t name params noexcept;
#include "limiter/shims/nvml_hooks.inc"
#undef GS_NVML_HOOK

}  // namespace gpuslice::limiter::hooks
