// Bytes per channel of a CUDA array format: the fact the simulated driver
// sizes arrays with and the limiter estimates them with.
//
// Header-only. For code built on cuda_abi/cuda_driver_api.h (the simulated
// driver and the limiter).
#pragma once

#include <cstddef>

#include "cuda_abi/cuda_driver_api.h"

namespace gpuslice::cuda_abi {

// Bytes of one channel of `f`; 0 for the packed and block-compressed formats
// this table does not size.
inline size_t ArrayFormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

}  // namespace gpuslice::cuda_abi
