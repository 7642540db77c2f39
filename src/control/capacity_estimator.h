// CapacityEstimator: how much of one GPU's time the ShareScheduler hands out
// (DESIGN.md section 4, docs/scheduling.md "Capacity"). A device that
// switches between contexts executes less than all of its time: grants that
// add up to more than it runs are promises the round-robin, not the grants,
// decides. The evidence is the device's own busy time (NVML's device
// utilization, right whatever the processes): while some group wants more,
// the capacity moves a quarter of the way per tick towards what the device
// executed over the last second plus kMarginBp; while none does, a
// sixteenth of the way back to the whole device (work conservation: a
// capacity too low leaves the device idle only until someone asks).
//
// Pure. Not thread-safe.
#pragma once

#include <cstdint>

namespace gpuslice::control {

class CapacityEstimator {
 public:
  static constexpr uint32_t kMinBp = 5000;
  static constexpr uint32_t kMaxBp = 10000;
  static constexpr uint32_t kMarginBp = 50;

  // One tick: the device's busy share over the last second (basis points;
  // negative: not known, nothing changes) and whether some group wants more.
  void Tick(int32_t device_busy_bp, bool wanting);

  uint32_t capacity_bp() const { return capacity_bp_; }

 private:
  uint32_t capacity_bp_ = kMaxBp;
};

}  // namespace gpuslice::control
