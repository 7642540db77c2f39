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

void ShareCorrection::Update(int64_t now_ns, double share, double rate, int64_t charge_ns) {
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
  if (share < 0 || charge_ns <= 0 || now_ns < settle_until_ns_) return;
  if (share > rate + Tolerance(charge_ns)) {
    factor_ = std::min(kMaxFactor, factor_ * std::sqrt(share / rate));
  } else if (factor_ > 1.0 && share < rate) {
    factor_ = std::max(1.0, factor_ * std::sqrt(std::max(share, 0.01) / rate));
  }
}

}  // namespace gpuslice::control
