// ComputeController: the compute half of the group controller (DESIGN.md
// section 3), run on the GroupKeeper thread of whichever member holds the
// controller role.
//
// For each device of the group with a compute limit, every tick it records the
// group's launch count (DeviceCompute::launches), reads NVML's per-process
// utilization samples newer than the last ones it saw, adds up the samples of
// the group's members, and feeds both to a CostEstimator
// (core/cost_estimator.h). It publishes the estimated device time per launch
// (DeviceCompute::charge_ns), which the launch path paces by, and the
// measured share (share_bp) for `gpuslice status`.
//
// NVML reports host pids; members are matched by the pids in their slots, so
// inside a container whose pid namespace differs no sample matches and the
// charge stays at the members' bootstrap measurement (an upper bound: the
// group stays under its limit). That is logged once.
//
// Not thread-safe: one instance, on the keeper thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

#include "limiter/core/cost_estimator.h"
#include "nvml_abi/nvml.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

class ComputeController {
 public:
  // How often to tick while some device has a compute limit: several times
  // per NVML sampling window (1/6 s at the shortest).
  static constexpr std::chrono::milliseconds kPeriod{50};

  explicit ComputeController(GroupSegment* segment) : segment_(segment) {}

  // One step for every compute-limited device. Returns true if some device
  // has a compute limit (the keeper then ticks every kPeriod).
  bool Tick();

 private:
  struct Device {
    CostEstimator estimator;
    nvmlDevice_t handle = nullptr;
    uint64_t last_seen_us = 0;  // newest NVML sample timestamp consumed
    bool matched_once = false;  // some sample matched a member
    int64_t first_tick_ns = 0;
  };

  void TickDevice(int dev, Device& d);
  bool NvmlReady();

  GroupSegment* segment_;
  std::array<std::unique_ptr<Device>, kGroupMaxDevices> devices_{};
  int nvml_state_ = 0;  // 0 untried, 1 ready, -1 unavailable
  bool warned_unmatched_ = false;
};

}  // namespace gpuslice::limiter
