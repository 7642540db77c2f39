#include "control/capacity_estimator.h"

#include <algorithm>

namespace gpuslice::control {

void CapacityEstimator::Tick(int32_t device_busy_bp, bool wanting) {
  if (device_busy_bp < 0) return;
  const int64_t target =
      wanting ? std::clamp<int64_t>(device_busy_bp + kMarginBp, kMinBp, kMaxBp) : kMaxBp;
  const int64_t now = capacity_bp_;
  const int64_t step = (target - now) / (wanting ? 4 : 16);
  capacity_bp_ = static_cast<uint32_t>(std::clamp<int64_t>(now + (step != 0 ? step
                                                                            : (target > now   ? 1
                                                                               : target < now ? -1
                                                                                              : 0)),
                                                           kMinBp, kMaxBp));
}

}  // namespace gpuslice::control
