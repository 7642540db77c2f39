// Every entry point of the real libnvidia-ml.so.1 that the simulator does not
// implement (nvml_unsupported.inc, generated from the names of NVIDIA's
// nvml.h), defined so that it exists, resolves with dlsym, and answers
// NVML_ERROR_NOT_SUPPORTED ("the requested operation is not available on the
// target device") instead of crashing a caller that looked it up. The stubs
// are weak: should nvml_entry.cc implement a name before the table is
// regenerated, its strong definition wins.
//
// Uniform stub: deliberately does not include nvml.h, so the names are
// defined without their parameters (int name()). On x86-64 (System V) and
// AArch64 a caller passing arguments to a function that reads none is
// harmless: arguments live in registers or the caller's frame, the caller
// cleans up, and the int return value is where an nvmlReturn_t (a C enum) is
// expected. Every name in the table returns nvmlReturn_t; the one NVML
// function that does not (nvmlErrorString) is implemented.
#include <atomic>

#include "common/log.h"

namespace {
constexpr int kNvmlErrorNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED

// Logs the first call of each name (at debug level), then nothing.
int Unsupported(const char* name, std::atomic<bool>* logged) {
  if (!logged->exchange(true, std::memory_order_relaxed)) {
    GS_LOG(kDebug, "sim-nvml", "%s is not simulated; returning NVML_ERROR_NOT_SUPPORTED", name);
  }
  return kNvmlErrorNotSupported;
}
}  // namespace

#define GS_NVML_UNSUPPORTED(name)                                      \
  extern "C" __attribute__((weak, visibility("default"))) int name() { \
    static std::atomic<bool> logged{false};                            \
    return Unsupported(#name, &logged);                                \
  }
#include "sim/nvml/nvml_unsupported.inc"
#undef GS_NVML_UNSUPPORTED
