#include "control/share_correction.h"

#include <algorithm>
#include <cmath>

namespace gpuslice::control {
namespace {

// The measurement's own noise: NVML's whole-percent rounding and jitter, and
// a window's share being made of whole kernels (two kernels more or less in
// kWindowNs: one at each end).
double Tolerance(int64_t charge_ns) {
  return 0.03 +
         2 * static_cast<double>(charge_ns) / static_cast<double>(ShareCorrection::kWindowNs);
}

}  // namespace

void ShareCorrection::Update(int64_t now_ns, double share, double rate, int64_t charge_ns,
                             bool held) {
  // Held back in every window since held_since_ns_.
  if (!held) {
    held_since_ns_ = -1;
  } else if (held_since_ns_ < 0) {
    held_since_ns_ = last_update_ns_;
  }
  last_update_ns_ = now_ns;
  if (rate <= 0 || rate >= 1) {
    factor_ = 1.0;
    rate_ = rate;
    return;
  }
  if (rate != rate_) {
    rate_ = rate;
    Hold(now_ns);
    return;
  }
  if (share < 0 || charge_ns <= 0) return;
  const double tolerance = Tolerance(charge_ns);
  const double step = std::sqrt(std::max(share, 0.01) / rate);
  // Held back by its budget throughout the windows measured: what NVML says
  // is what its charges let it have.
  const bool held_throughout = held && now_ns - held_since_ns_ >= kWindowNs;
  const bool settled_down = now_ns >= settle_down_until_ns_;
  const bool settled = now_ns >= settle_until_ns_ || (settled_down && held_throughout);
  if (settled && share > rate + tolerance) {
    factor_ = std::min(kMaxFactor, factor_ * step);  // over: slower
  } else if (settled && factor_ > 1.0 && share < rate) {
    factor_ = std::max(1.0, factor_ * step);  // back towards 1 from above
  } else if (settled_down && held_throughout &&
             (share < rate - tolerance || (factor_ < 1.0 && share < rate))) {
    factor_ = std::max(kMinFactor, factor_ * step);  // under while held back: faster
  } else if (settled_down && factor_ < 1.0 && (share > rate || !held)) {
    factor_ = std::min(1.0, factor_ * std::max(step, kRelaxStep));  // back towards 1 from below
  }
}

}  // namespace gpuslice::control
