// Whether a real NVIDIA GPU and driver are present, for the gpu test tier.
//
// Real means: libcuda.so.1 loads (by soname, as a CUDA program would), is not
// the simulator (under the build's sim/ directory) nor the toolkit's link
// stub (under a stubs/ directory), cuInit(0) succeeds and at least one device
// is listed. Failing that, a real `nvidia-smi -L` (not the simulator's, which
// also lives under sim/) that lists a GPU counts too.
#pragma once

#include <string>

namespace gpuslice::gpu_tier {

struct GpuPresence {
  bool present = false;
  std::string reason;  // why not present, or what was found
  std::string driver;  // the path libcuda.so.1 resolved to ("" if it did not load)
};

// True if `library` (a resolved path) is the simulator of the build in
// `build_dir` or a toolkit stub: not a real driver.
bool IsFakeDriver(const std::string& library, const std::string& build_dir);

// Probes once per process (cached): dlopen, cuInit, cuDeviceGetCount, then
// nvidia-smi -L.
const GpuPresence& DetectGpu(const std::string& build_dir);

}  // namespace gpuslice::gpu_tier
