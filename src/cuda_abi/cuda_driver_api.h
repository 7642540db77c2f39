// cuda.h as the driver itself sees it: every exported name is declared as
// itself (cuMemAlloc is the legacy 32-bit entry, cuMemAlloc_v2 the current
// one, cuLaunchKernel_ptsz the per-thread-stream one) instead of the
// application-facing renames. For code that defines or calls driver entry
// points by their exported names: the simulated driver and the limiter.
//
// Include it before anything else that could include <cuda.h>.
#pragma once

#if defined(CUDA_VERSION)
#error "cuda_abi/cuda_driver_api.h must be included before <cuda.h>"
#endif
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
