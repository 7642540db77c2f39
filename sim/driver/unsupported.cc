// Every name a real libcuda.so.1 exports, as a weak definition that returns
// CUDA_ERROR_NOT_SUPPORTED: the entry points the simulator implements
// (entry_*.cc) are strong definitions and win at link time; the rest exist,
// resolve (dlsym, cuGetProcAddress), and fail cleanly instead of crashing.
//
// Deliberately does not include cuda.h: the names are defined here without
// their parameters. On x86-64 (System V) and AArch64 a caller passing
// arguments to a function that reads none is harmless: arguments live in
// registers or the caller's frame, the caller cleans up, and the int return
// value is where a CUresult is expected.
#include <atomic>

#include "common/log.h"

namespace {
constexpr int kCudaErrorNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED

// Logs the first call of each name (at debug level), then nothing.
int Unsupported(const char* name, std::atomic<bool>* logged) {
  if (!logged->exchange(true, std::memory_order_relaxed)) {
    GS_LOG(kDebug, "sim-driver", "%s is not simulated; returning CUDA_ERROR_NOT_SUPPORTED", name);
  }
  return kCudaErrorNotSupported;
}
}  // namespace

#define GS_DRIVER_EXPORT(name)                                         \
  extern "C" __attribute__((weak, visibility("default"))) int name() { \
    static std::atomic<bool> logged{false};                            \
    return Unsupported(#name, &logged);                                \
  }
#include "cuda_abi/driver_exports.inc"
#undef GS_DRIVER_EXPORT
