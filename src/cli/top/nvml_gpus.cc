#include "cli/top/nvml_gpus.h"

#include <dlfcn.h>

#include "nvml_abi/nvml.h"

namespace gpuslice::cli::top {

struct NvmlGpus::Api {
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&::nvmlDeviceGetUUID) uuid = nullptr;
  // Optional: a reading without its function stays absent.
  decltype(&::nvmlDeviceGetName) name = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&::nvmlDeviceGetPowerUsage) power = nullptr;
  decltype(&::nvmlDeviceGetEnforcedPowerLimit) power_limit = nullptr;
};

namespace {

template <typename F>
void Resolve(void* handle, const char* name, F& into) {
  into = reinterpret_cast<F>(dlsym(handle, name));
}

}  // namespace

StatusOr<std::unique_ptr<NvmlGpus>> NvmlGpus::Open(const char* library) {
  std::unique_ptr<NvmlGpus> n(new NvmlGpus);
  n->handle_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (n->handle_ == nullptr) {
    const char* err = dlerror();
    return Unavailable(std::string("cannot load ") + library + ": " +
                       (err != nullptr ? err : "unknown error"));
  }
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  Resolve(n->handle_, "nvmlInit_v2", a.init);
  Resolve(n->handle_, "nvmlShutdown", a.shutdown);
  Resolve(n->handle_, "nvmlDeviceGetCount_v2", a.count);
  Resolve(n->handle_, "nvmlDeviceGetHandleByIndex_v2", a.handle);
  Resolve(n->handle_, "nvmlDeviceGetUUID", a.uuid);
  Resolve(n->handle_, "nvmlDeviceGetName", a.name);
  Resolve(n->handle_, "nvmlDeviceGetUtilizationRates", a.utilization);
  Resolve(n->handle_, "nvmlDeviceGetMemoryInfo", a.memory);
  Resolve(n->handle_, "nvmlDeviceGetPowerUsage", a.power);
  Resolve(n->handle_, "nvmlDeviceGetEnforcedPowerLimit", a.power_limit);
  if (a.init == nullptr || a.shutdown == nullptr || a.count == nullptr || a.handle == nullptr ||
      a.uuid == nullptr) {
    return Unavailable(std::string(library) + " lacks the NVML functions gpuslice top reads");
  }
  if (const nvmlReturn_t rc = a.init(); rc != NVML_SUCCESS) {
    a.shutdown = nullptr;  // nothing to shut down
    return Unavailable("nvmlInit failed with error " + std::to_string(static_cast<int>(rc)));
  }
  return n;
}

NvmlGpus::~NvmlGpus() {
  if (api_ && api_->shutdown != nullptr) api_->shutdown();
  // The library stays loaded: NVML may keep threads or handlers in it.
}

std::vector<GpuInfo> NvmlGpus::Read() const {
  std::vector<GpuInfo> out;
  const Api& a = *api_;
  unsigned int count = 0;
  if (a.count(&count) != NVML_SUCCESS) return out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    if (a.handle(i, &d) != NVML_SUCCESS) continue;
    char text[256] = {};
    if (a.uuid(d, text, sizeof text) != NVML_SUCCESS) continue;
    GpuInfo gpu;
    gpu.index = static_cast<int>(i);
    gpu.uuid = text;
    if (a.name != nullptr && a.name(d, text, sizeof text) == NVML_SUCCESS) gpu.name = text;
    if (nvmlUtilization_t u{}; a.utilization != nullptr && a.utilization(d, &u) == NVML_SUCCESS) {
      gpu.util_percent = u.gpu;
    }
    if (nvmlMemory_t m{}; a.memory != nullptr && a.memory(d, &m) == NVML_SUCCESS) {
      gpu.memory_used = m.used;
      gpu.memory_total = m.total;
    }
    if (unsigned int mw = 0; a.power != nullptr && a.power(d, &mw) == NVML_SUCCESS) {
      gpu.power_watts = mw / 1000.0;
    }
    if (unsigned int mw = 0; a.power_limit != nullptr && a.power_limit(d, &mw) == NVML_SUCCESS) {
      gpu.power_limit_watts = mw / 1000.0;
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

}  // namespace gpuslice::cli::top
