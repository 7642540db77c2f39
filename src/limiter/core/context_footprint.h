// What a CUDA context really costs on its device (DESIGN.md section 2: "each
// context's own reservation" is counted).
//
// The driver reserves device memory for every context: local memory for each
// resident thread, the printf FIFO, the device heap, loaded code. How much
// depends on the GPU, the driver and the context's limits, so the limiter
// charges an estimate first (GPUSLICE_CONTEXT_BYTES, 300 MiB by default) and,
// on a device with a memory limit, settles on the driver's own figure right
// after the context exists: NVML's per-process usage on that device minus
// everything else the process has charged there. Measured on an H100 80GB with
// driver r580 and CUDA 13: 518 MiB per context (docs/gpu-tier.md), so the
// estimate alone let the process hold 218 MiB beyond its cap.
//
// Pure: no NVML, no CUDA; the hooks measure and this decides.
#pragma once

#include <cstdint>

namespace gpuslice::limiter {

// The context's settled charge, rounded up to `granularity`: `estimate`
// corrected by how far the driver's count of the process on the device
// (`driver_bytes`) is from what the process has charged there (`charged_bytes`,
// which includes the estimate). Never below zero.
uint64_t SettledContextBytes(uint64_t driver_bytes, uint64_t charged_bytes, uint64_t estimate,
                             uint64_t granularity);

}  // namespace gpuslice::limiter
