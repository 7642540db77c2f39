// SamplePercent: an nvmlDeviceGetSamples value of a utilization sample as a
// percent (0..100), whichever of the union's types NVML said it filled.
#pragma once

#include <algorithm>
#include <cstdint>

#include "nvml_abi/nvml.h"

namespace gpuslice::nvml_abi {

inline uint32_t SamplePercent(nvmlValueType_t type, const nvmlValue_t& v) {
  double percent = 0;
  switch (type) {
    case NVML_VALUE_TYPE_DOUBLE:
      percent = v.dVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      percent = v.uiVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      percent = static_cast<double>(v.ulVal);
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      percent = static_cast<double>(v.ullVal);
      break;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      percent = static_cast<double>(v.sllVal);
      break;
  }
  return static_cast<uint32_t>(std::clamp(percent, 0.0, 100.0));
}

}  // namespace gpuslice::nvml_abi
