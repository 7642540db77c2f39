// The exported NVML entry points: one thin extern "C" function per line of
// nvml_hooks.inc, forwarding to gpuslice::limiter::hooks (reentrant calls go
// straight to the real library, as in cuda_shims.cc).
#include "limiter/hooks.h"
#include "limiter/process_state.h"
#include "limiter/real/real_driver.h"
#include "limiter/reentrancy.h"
#include "limiter/symbols.h"

#define GS_NVML_HOOK(name, params, args)                                                 \
  extern "C" __attribute__((visibility("default"))) nvmlReturn_t name params {           \
    ::gpuslice::limiter::ReentrancyGuard guard;                                          \
    if (guard.reentered())                                                               \
      return ::gpuslice::limiter::real::CallNvml(::gpuslice::limiter::real::Nvml().name, \
                                                 [&](auto fn) { return fn args; });      \
    return ::gpuslice::limiter::hooks::name GS_OWN_STATE_FIRST args;                     \
  }
#include "limiter/shims/nvml_hooks.inc"
#undef GS_NVML_HOOK

namespace gpuslice::limiter {

void* NvmlShim(std::string_view name) {
  struct Entry {
    std::string_view name;
    void* shim;
  };
  static const Entry kShims[] = {
#define GS_NVML_HOOK(n, params, args) {#n, reinterpret_cast<void*>(&::n)},
#include "limiter/shims/nvml_hooks.inc"
#undef GS_NVML_HOOK
  };
  for (const Entry& e : kShims) {
    if (e.name == name) return e.shim;
  }
  return nullptr;
}

}  // namespace gpuslice::limiter
