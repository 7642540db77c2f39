// NvmlGpus: the GPUs as NVML sees them, for `gpuslice top` when no daemon
// answers (DESIGN.md section 1: never linked; libnvidia-ml.so.1 is loaded by
// soname at run time, so the library search path picks the real driver or
// the simulator's). Reads index, UUID, name, utilisation, memory and power;
// a reading NVML refuses is left absent.
//
// Thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/top/top_model.h"
#include "common/status.h"

namespace gpuslice::cli::top {

class NvmlGpus {
 public:
  // Loads `library` and initialises NVML; kUnavailable naming the library
  // (or NVML's error) when that fails.
  static StatusOr<std::unique_ptr<NvmlGpus>> Open(const char* library = "libnvidia-ml.so.1");
  ~NvmlGpus();
  NvmlGpus(const NvmlGpus&) = delete;
  NvmlGpus& operator=(const NvmlGpus&) = delete;

  // Every GPU now, by index.
  std::vector<GpuInfo> Read() const;

  struct Api;  // the resolved entry points (nvml_gpus.cc)

 private:
  NvmlGpus() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

}  // namespace gpuslice::cli::top
