// The limiter's hook for every interposed entry point: one function per line
// of shims/cuda_hooks.inc and shims/nvml_hooks.inc, with the exported
// symbol's name and, after the process state it works on, its parameters, in
// namespace gpuslice::limiter::hooks. The exported shims (shims/*.cc) call
// these with the process's own state (ProcessState::Get(), passed once:
// GS_OWN_STATE_FIRST); a test calls them with a state built on its own
// driver table (process_state.h). dlsym and cuGetProcAddress hand out the
// shims.
//
// Contract of every hook: noexcept, never aborts, returns the driver's own
// error codes; thread-safe; safe to call before cuInit and after fork.
#pragma once

#include "cuda_abi/cuda_driver_api.h"
#include "nvml_abi/nvml.h"

namespace gpuslice::limiter {
class ProcessState;
}  // namespace gpuslice::limiter

// A shim's call of its hook: `hooks::name GS_OWN_STATE_FIRST args` passes
// the process's own state (process_state.h) before the arguments.
#define GS_OWN_STATE_FIRST(...) \
  (::gpuslice::limiter::ProcessState::Get() __VA_OPT__(, ) __VA_ARGS__)

namespace gpuslice::limiter::hooks {

#define GS_CUDA_HOOK(name, params, args) CUresult name GS_PREPEND_STATE_ params noexcept;
#define GS_NVML_HOOK(name, params, args) nvmlReturn_t name GS_PREPEND_STATE_ params noexcept;
#define GS_PREPEND_STATE_(...) (ProcessState & l __VA_OPT__(, ) __VA_ARGS__)
#include "limiter/shims/cuda_hooks.inc"
#include "limiter/shims/nvml_hooks.inc"
#undef GS_PREPEND_STATE_
#undef GS_CUDA_HOOK
#undef GS_NVML_HOOK

}  // namespace gpuslice::limiter::hooks
