// Every name a real libcuda.so.1 exports, as a weak definition that returns
// CUDA_ERROR_NOT_SUPPORTED: the entry points the simulator implements
// (driver.cc) are strong definitions and win at link time; the rest exist,
// resolve, and fail cleanly instead of crashing the caller.
//
// Deliberately does not include cuda.h: the names are defined here without
// their parameters. On x86-64 (System V) a caller passing arguments to a
// function that takes none is harmless: arguments live in registers or the
// caller's frame, and the caller cleans up.
#include <atomic>
#include <cstdio>

#include "common/log.h"

namespace {
constexpr int kCudaErrorNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED

int Unsupported(const char* name) {
  GS_LOG(kDebug, "sim-driver", "%s is not simulated; returning CUDA_ERROR_NOT_SUPPORTED", name);
  return kCudaErrorNotSupported;
}
}  // namespace

#define GS_DRIVER_EXPORT(name) \
  extern "C" __attribute__((weak, visibility("default"))) int name() { return Unsupported(#name); }
#include "cuda_abi/driver_exports.inc"
#undef GS_DRIVER_EXPORT
