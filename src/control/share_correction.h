// ShareCorrection: closes the compute limit's loop on the measured share
// (DESIGN.md section 2, compute limits).
//
// The launch gate paces each launch by its estimated device time
// (CostEstimator), so a group's share is its rate only while the estimate is
// right. An estimate can lag: a change within the estimator's shift factor
// (kernels 1.4x longer) is averaged in over a whole horizon, and meanwhile
// the group runs at 1.4x its cap. NVML's windows say what the group really
// got, every 1/6 s: after each, the group's measured share over the newest
// windows is compared with its rate, and a group measured over it (beyond
// the measurement's own noise) has its charges multiplied by a factor that
// rises with the excess (a multiplicative integral step of gain 1/2). The
// factor falls back the same way while the group is measured under its rate,
// never below 1: a group is never charged less than its estimate, so the
// loop only ever slows a group down, whatever its estimate says, and a group
// that cannot reach its rate is left alone.
//
// A change of rate (a limit set live, a scheduler's grant) makes the older
// windows no evidence, and so does a workload change the estimator detected
// (its new estimate is already the correction; the windows around the change
// hold a backlog the launch gate has drained since): the factor goes back to
// 1 and the correction waits kSettleNs.
//
// Not thread-safe: owned by the group controller's thread, one per device.
#pragma once

#include <cstdint>

namespace gpuslice::control {

class ShareCorrection {
 public:
  // The measured share is taken over the newest windows covering this much.
  static constexpr int64_t kWindowNs = 333'000'000;
  // After a change of rate or of workload, no correction for this long.
  static constexpr int64_t kSettleNs = 1'500'000'000;
  // The most a group's charges are multiplied by.
  static constexpr double kMaxFactor = 4.0;

  // After an NVML window ending at `now_ns`: the group's measured share
  // `share` (0..1; negative: none) over the last kWindowNs, its rate `rate`
  // (0..1], and its charge per launch `charge_ns` (the measurement's
  // granularity: a window holds whole kernels).
  void Update(int64_t now_ns, double share, double rate, int64_t charge_ns);

  // The estimator detected a workload change at `now_ns` (see above).
  void Hold(int64_t now_ns) {
    factor_ = 1.0;
    settle_until_ns_ = now_ns + kSettleNs;
  }

  // What to multiply the group's charges by (>= 1).
  double factor() const { return factor_; }

 private:
  double factor_ = 1.0;
  double rate_ = 0;
  int64_t settle_until_ns_ = 0;
};

}  // namespace gpuslice::control
