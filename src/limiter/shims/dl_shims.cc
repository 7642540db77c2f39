// dlsym, interposed in both of glibc's versions (GLIBC_2.34, where libc took
// it over, and GLIBC_2.2.5 for programs built before), so that a program that
// dlopens libcuda.so.1 / libnvidia-ml.so.1 and looks names up itself gets the
// limiter's shims (DESIGN.md section 2, path 2).
//
// A name the limiter interposes, found by the lookup, is answered with the
// shim; everything else is glibc's answer. RTLD_NEXT is resolved relative to
// the caller (not to this library) by walking the link map after the
// caller's object.
#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "limiter/real/real_driver.h"
#include "limiter/symbols.h"

namespace gpuslice::limiter {
namespace {

// glibc's answer for `handle` as seen from `caller`.
void* Lookup(void* handle, const char* name, const void* caller) {
  if (handle != RTLD_NEXT) return real::RealDlsym(handle, name);
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr) {
    return nullptr;
  }
  for (link_map* next = map->l_next; next != nullptr; next = next->l_next) {
    if (void* p = real::RealDlsym(next, name)) return p;
  }
  return nullptr;
}

void* Dlsym(void* handle, const char* name, const void* caller) noexcept {
  void* found = Lookup(handle, name, caller);
  if (found == nullptr || name == nullptr) return found;
  if (name[0] == 'c' && name[1] == 'u') {
    if (void* shim = CudaShim(name)) return shim;
  } else if (strncmp(name, "nvml", 4) == 0) {
    if (void* shim = NvmlShim(name)) return shim;
  }
  return found;
}

}  // namespace
}  // namespace gpuslice::limiter

extern "C" {

__attribute__((visibility("default"), noinline)) void* gpuslice_dlsym(void* handle,
                                                                      const char* name) noexcept {
  return gpuslice::limiter::Dlsym(handle, name, __builtin_return_address(0));
}
__attribute__((visibility("default"), noinline)) void* gpuslice_dlsym_2_2_5(
    void* handle, const char* name) noexcept {
  return gpuslice::limiter::Dlsym(handle, name, __builtin_return_address(0));
}

}  // extern "C"

__asm__(".symver gpuslice_dlsym, dlsym@@GLIBC_2.34");
__asm__(".symver gpuslice_dlsym_2_2_5, dlsym@GLIBC_2.2.5");
