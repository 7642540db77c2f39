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
// rises with the excess (a multiplicative integral step of gain 1/2).
//
// The loop is two-sided: an estimate can lag upwards too (kernels 1.4x
// shorter, within the shift factor, are averaged in over a horizon while the
// group runs at 0.7x its cap). A group measured under its rate beyond the
// noise *while held back by its budget* (some launch of it waited for budget
// since the previous window: it wanted more than its charges let it have;
// the caller also rules out pauses, the scheduler's holds and a full
// device) in every window measured (kWindowNs: a group that resumes after a
// pause waits for budget at once, while its measured share still holds the
// pause) has its factor lowered the same way, down to kMinFactor; once
// lowered, on while it is under its rate at all (else it would settle at the
// noise's edge). A group that did not wait is limited by something else
// (its own CPU, synchronisation): lower charges would not raise its share
// and would only let it overshoot once that changes, so its factor is not
// lowered, and one below 1 goes back towards 1 (at least kRelaxStep per
// window). A factor below 1 also rises as one above 1 does while the group
// is measured over its rate.
//
// A change of rate (a limit set live, a scheduler's grant) makes the older
// windows no evidence, and so does a workload change the estimator detected
// (its new estimate is already the correction; the windows around the change
// hold a backlog the launch gate has drained since): the factor goes back to
// 1 and the correction waits kSettleNs. A group held back by its budget
// throughout the windows measured waits only kSettleDownNs, either way: a
// backlog drains without waiting for budget, so its windows (busy whatever
// the charges) are never taken for the new estimate's error, and that error
// (the estimate of the new workload approaches the new cost from above or
// below over about a horizon) is corrected within a second of the change.
//
// Not thread-safe: owned by the group controller's thread, one per device.
#pragma once

#include <cstdint>

namespace gpuslice::control {

class ShareCorrection {
 public:
  // The measured share is taken over the newest windows covering this much.
  static constexpr int64_t kWindowNs = 333'000'000;
  // After a change of rate or of workload, no correction for this long...
  static constexpr int64_t kSettleNs = 1'500'000'000;
  // ...except for a group held back by its budget: this long (see above).
  static constexpr int64_t kSettleDownNs = 500'000'000;
  // The most a group's charges are multiplied by, and the least.
  static constexpr double kMaxFactor = 4.0;
  static constexpr double kMinFactor = 0.5;
  // A factor below 1 of a group that did not wait for its budget goes back
  // towards 1 by at least this (multiplied) per window.
  static constexpr double kRelaxStep = 1.1;

  // After an NVML window ending at `now_ns`: the group's measured share
  // `share` (0..1; negative: none) over the last kWindowNs, its rate `rate`
  // (0..1], its charge per launch `charge_ns` (the measurement's
  // granularity: a window holds whole kernels), and whether some launch of
  // the group waited for its budget since the previous window (`held`).
  void Update(int64_t now_ns, double share, double rate, int64_t charge_ns, bool held);

  // The estimator detected a workload change at `now_ns` (see above).
  void Hold(int64_t now_ns) {
    factor_ = 1.0;
    settle_until_ns_ = now_ns + kSettleNs;
    settle_down_until_ns_ = now_ns + kSettleDownNs;
  }

  // What to multiply the group's charges by (kMinFactor..kMaxFactor).
  double factor() const { return factor_; }

 private:
  double factor_ = 1.0;
  double rate_ = 0;
  int64_t settle_until_ns_ = 0;
  int64_t settle_down_until_ns_ = 0;
  int64_t last_update_ns_ = 0;  // the previous window's end
  int64_t held_since_ns_ = -1;  // every window since was held; -1: the last was not
};

}  // namespace gpuslice::control
