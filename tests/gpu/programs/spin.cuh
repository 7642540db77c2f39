// A kernel that keeps one SM thread busy for a given time by the GPU's global
// timer (nanoseconds, shared by every context on the device).
#pragma once

#include <cstdint>

namespace gpuslice::gpu_tier {

__device__ inline uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` of GPU time as the global timer counts it (time the context
// is switched out counts too: a spin that is preempted ends on time).
__global__ void SpinFor(uint64_t ns) {
  const uint64_t start = GlobalTimer();
  while (GlobalTimer() - start < ns) {
  }
}

}  // namespace gpuslice::gpu_tier
