#include "sim/smi/nvml_api.h"

#include <dlfcn.h>

namespace gpuslice::smi {

bool NvmlApi::Load(const char* soname, std::string* error) {
  handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* msg = dlerror();
    *error = msg != nullptr ? msg : soname;
    return false;
  }
#define GS_SMI_RESOLVE(name) name = reinterpret_cast<decltype(name)>(dlsym(handle_, #name));
  GS_SMI_NVML_FUNCTIONS(GS_SMI_RESOLVE)
#undef GS_SMI_RESOLVE
  return true;
}

const char* NvmlApi::ErrorString(nvmlReturn_t r) const {
  if (nvmlErrorString != nullptr) return nvmlErrorString(r);
  return r == NVML_ERROR_FUNCTION_NOT_FOUND ? "Function Not Found" : "Unknown Error";
}

}  // namespace gpuslice::smi
