// RealNvml: the few NVML functions the gpu tier reads, loaded with dlopen from
// libnvidia-ml.so.1 (the toolkit ships no NVML link stub). Header-only; used by
// the tests (outside the slice: they see the real device) and by the
// calibration program.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

#include "nvml_abi/nvml.h"

namespace gpuslice::gpu_tier {

class RealNvml {
 public:
  // Loads and initialises NVML; ok() says whether it worked, error() why not.
  RealNvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      error_ = std::string("dlopen libnvidia-ml.so.1: ") + dlerror();
      return;
    }
    init_ = Sym<decltype(&nvmlInit_v2)>("nvmlInit_v2");
    by_index_ = Sym<decltype(&nvmlDeviceGetHandleByIndex)>("nvmlDeviceGetHandleByIndex_v2");
    if (by_index_ == nullptr) {
      by_index_ = Sym<decltype(&nvmlDeviceGetHandleByIndex)>("nvmlDeviceGetHandleByIndex");
    }
    by_uuid_ = Sym<decltype(&nvmlDeviceGetHandleByUUID)>("nvmlDeviceGetHandleByUUID");
    uuid_ = Sym<decltype(&nvmlDeviceGetUUID)>("nvmlDeviceGetUUID");
    utilization_ =
        Sym<decltype(&nvmlDeviceGetProcessUtilization)>("nvmlDeviceGetProcessUtilization");
    processes_ = Sym<decltype(&nvmlDeviceGetComputeRunningProcesses_v3)>(
        "nvmlDeviceGetComputeRunningProcesses_v3");
    if (init_ == nullptr || by_index_ == nullptr || utilization_ == nullptr ||
        processes_ == nullptr) {
      error_ = "libnvidia-ml.so.1 lacks a needed function";
      return;
    }
    if (nvmlReturn_t rc = init_(); rc != NVML_SUCCESS) {
      error_ = "nvmlInit_v2: " + std::to_string(rc);
      return;
    }
    ok_ = true;
  }
  RealNvml(const RealNvml&) = delete;
  RealNvml& operator=(const RealNvml&) = delete;
  ~RealNvml() {
    if (lib_ != nullptr) dlclose(lib_);
  }

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  // The device with this UUID ("GPU-…"), else by index; nullptr if neither.
  nvmlDevice_t Device(const std::string& uuid, unsigned index = 0) const {
    nvmlDevice_t device = nullptr;
    if (!uuid.empty() && by_uuid_ != nullptr && by_uuid_(uuid.c_str(), &device) == NVML_SUCCESS) {
      return device;
    }
    return by_index_(index, &device) == NVML_SUCCESS ? device : nullptr;
  }

  // The device's UUID ("GPU-…"); "" if unknown.
  std::string Uuid(nvmlDevice_t device) const {
    char buf[96] = {};
    if (uuid_ == nullptr || uuid_(device, buf, sizeof buf) != NVML_SUCCESS) return "";
    return buf;
  }

  // Per-process utilization samples newer than `since` (µs since the epoch).
  std::vector<nvmlProcessUtilizationSample_t> Samples(nvmlDevice_t device,
                                                      unsigned long long since) const {
    unsigned count = 0;
    nvmlReturn_t rc = utilization_(device, nullptr, &count, since);
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS) return {};
    std::vector<nvmlProcessUtilizationSample_t> samples(count + 8);
    count = static_cast<unsigned>(samples.size());
    if (utilization_(device, samples.data(), &count, since) != NVML_SUCCESS) return {};
    samples.resize(count);
    return samples;
  }

  // The device memory the driver says `pid` uses; -1 if it is not listed.
  long long UsedMemory(nvmlDevice_t device, unsigned pid) const {
    std::vector<nvmlProcessInfo_t> infos(256);
    unsigned count = static_cast<unsigned>(infos.size());
    if (processes_(device, &count, infos.data()) != NVML_SUCCESS) return -1;
    for (unsigned i = 0; i < count; ++i) {
      if (infos[i].pid == pid) return static_cast<long long>(infos[i].usedGpuMemory);
    }
    return -1;
  }

 private:
  template <typename F>
  F Sym(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }

  void* lib_ = nullptr;
  bool ok_ = false;
  std::string error_;
  decltype(&nvmlInit_v2) init_ = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex) by_index_ = nullptr;
  decltype(&nvmlDeviceGetHandleByUUID) by_uuid_ = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid_ = nullptr;
  decltype(&nvmlDeviceGetProcessUtilization) utilization_ = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) processes_ = nullptr;
};

}  // namespace gpuslice::gpu_tier
