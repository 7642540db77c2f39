#include "limiter/core/context_footprint.h"

namespace gpuslice::limiter {

uint64_t SettledContextBytes(uint64_t driver_bytes, uint64_t charged_bytes, uint64_t estimate,
                             uint64_t granularity) {
  uint64_t bytes = 0;
  if (driver_bytes >= charged_bytes) {
    const uint64_t missing = driver_bytes - charged_bytes;
    bytes = missing > UINT64_MAX - estimate ? UINT64_MAX : estimate + missing;
  } else {
    const uint64_t surplus = charged_bytes - driver_bytes;
    bytes = surplus >= estimate ? 0 : estimate - surplus;
  }
  if (granularity == 0 || bytes % granularity == 0) return bytes;
  const uint64_t down = bytes - bytes % granularity;
  return down > UINT64_MAX - granularity ? down : down + granularity;
}

}  // namespace gpuslice::limiter
