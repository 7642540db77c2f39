// The exported CUDA driver entry points: one thin extern "C" function per
// line of cuda_hooks.inc, forwarding to gpuslice::limiter::hooks. A reentrant
// call (the limiter itself, or the driver calling back into an exported name
// while the limiter is inside a hook on this thread) goes straight to the
// real driver.
#include "common/hot.h"
#include "limiter/hooks.h"
#include "limiter/launch_fast_path.h"
#include "limiter/process_state.h"
#include "limiter/real/real_driver.h"
#include "limiter/reentrancy.h"
#include "limiter/symbols.h"

// The entry points on the paths a driver call interrupts (allocation and
// free) or that run millions of times a second (launches) are marked hot
// here, the others not: the hot ones then sit together in .text.hot with the
// rest of those paths (common/hot.h), a few code pages in all.
extern "C" {
GS_HOT decltype(::cuMemAlloc_v2) cuMemAlloc_v2;
GS_HOT decltype(::cuMemFree_v2) cuMemFree_v2;
GS_HOT decltype(::cuLaunchKernel) cuLaunchKernel;
GS_HOT decltype(::cuLaunchKernel_ptsz) cuLaunchKernel_ptsz;
GS_HOT decltype(::cuLaunchKernelEx) cuLaunchKernelEx;
GS_HOT decltype(::cuLaunchKernelEx_ptsz) cuLaunchKernelEx_ptsz;
GS_HOT decltype(::cuGraphLaunch) cuGraphLaunch;
GS_HOT decltype(::cuGraphLaunch_ptsz) cuGraphLaunch_ptsz;
}

namespace gpuslice::limiter {
namespace {

// The entry points that only launch kernels: while nothing is paced they go
// straight to the driver (launch_fast_path.h). Graph launches always take
// their hook, which charges graph memory.
constexpr bool IsKernelLaunch(std::string_view name) {
  return name == "cuLaunchKernel" || name == "cuLaunchKernel_ptsz" || name == "cuLaunchKernelEx" ||
         name == "cuLaunchKernelEx_ptsz" || name == "cuLaunchCooperativeKernel" ||
         name == "cuLaunchCooperativeKernel_ptsz";
}

}  // namespace
}  // namespace gpuslice::limiter

// A hook's call through the reentrancy guard.
#define GS_GUARDED_CALL(name, args)                                                    \
  ::gpuslice::limiter::ReentrancyGuard guard;                                          \
  if (guard.reentered())                                                               \
    return ::gpuslice::limiter::real::CallCuda(::gpuslice::limiter::real::Cuda().name, \
                                               [&](auto fn) { return fn args; });      \
  return ::gpuslice::limiter::hooks::name GS_OWN_STATE_FIRST args;

// Every shim gets an out-of-line guarded call, which only the kernel launches
// use: their shim is then the fast path's test and a tail call either way,
// with no frame of its own.
#define GS_CUDA_HOOK(name, params, args)                                   \
  namespace gpuslice::limiter::guarded {                                   \
  [[maybe_unused]] __attribute__((noinline)) static CUresult name params { \
    GS_GUARDED_CALL(name, args)                                            \
  }                                                                        \
  }                                                                        \
  extern "C" __attribute__((visibility("default"))) CUresult name params { \
    if constexpr (::gpuslice::limiter::IsKernelLaunch(#name)) {            \
      if (const auto direct = ::gpuslice::limiter::LaunchFastPath::Direct( \
              &::gpuslice::limiter::real::CudaTable::name)) [[likely]] {   \
        return direct args;                                                \
      }                                                                    \
      return ::gpuslice::limiter::guarded::name args;                      \
    } else {                                                               \
      GS_GUARDED_CALL(name, args)                                          \
    }                                                                      \
  }
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
#undef GS_GUARDED_CALL

namespace gpuslice::limiter {

// The exported shim named `name`, or nullptr if the limiter does not
// interpose it (declared in limiter/symbols.h).
void* CudaShim(std::string_view name) {
  struct Entry {
    std::string_view name;
    void* shim;
  };
  static const Entry kShims[] = {
#define GS_CUDA_HOOK(n, params, args) {#n, reinterpret_cast<void*>(&::n)},
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
  };
  for (const Entry& e : kShims) {
    if (e.name == name) return e.shim;
  }
  return nullptr;
}

bool IsCudaShim(const void* fn) {
#define GS_CUDA_HOOK(n, params, args) \
  if (fn == reinterpret_cast<const void*>(&::n)) return true;
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
  return false;
}

// The shim standing in for the real entry point `real_fn` (a pointer the real
// driver handed out), or nullptr if that entry point is not interposed.
void* CudaShimForReal(void* real_fn) {
  if (real_fn == nullptr) return nullptr;
  const real::CudaTable& t = real::Cuda();
#define GS_CUDA_HOOK(n, params, args) \
  if (reinterpret_cast<void*>(t.n) == real_fn) return reinterpret_cast<void*>(&::n);
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
  return nullptr;
}

}  // namespace gpuslice::limiter
