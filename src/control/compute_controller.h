// ComputeController: the compute half of a group's controller (DESIGN.md
// sections 2-3). It runs wherever the group is controlled: in the member that
// holds the controller role (the limiter's keeper thread) or in gpusliced.
//
// For each device of the group with a compute limit, every tick it records
// the group's launch count (the segment's compute budget), reads the
// utilization samples newer than the last ones it saw, adds up those of the
// group's members, and feeds both to a CostEstimator. It publishes the
// estimated device time per launch, which the launch path paces by, and the
// measured share for `gpuslice status` (GroupSegment::PublishEstimate).
//
// Members are matched by pid in the utilization source's namespace (NVML:
// the host's). The limiter passes its slots' pids, so inside a container with
// its own pid namespace no sample matches and the charge stays at the
// members' bootstrap measurement (an upper bound: the group stays under its
// limit; that is logged once). The daemon passes the host pids of its
// registry, which always match.
//
// Not thread-safe: one instance, on the controlling thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "control/cost_estimator.h"
#include "control/utilization_source.h"
#include "shm/group_segment.h"

namespace gpuslice::control {

class ComputeController {
 public:
  // How often to tick while some device has a compute limit: several times
  // per NVML sampling window (1/6 s at the shortest).
  static constexpr std::chrono::milliseconds kPeriod{50};

  // The pids of the group's members, in the utilization source's namespace.
  using MemberPids = std::function<std::vector<int32_t>()>;

  struct Clocks {
    const Clock& realtime;   // the time base of utilization samples
    const Clock& monotonic;  // the segment's time base
  };

  // REQUIRES: `segment`, `source` and the clocks outlive the controller.
  ComputeController(GroupSegment& segment, UtilizationSource& source, MemberPids members,
                    Clocks clocks);

  // One step for every compute-limited device. Returns true if some device
  // has a compute limit (the caller then ticks every kPeriod).
  bool Tick();

 private:
  struct Device {
    CostEstimator estimator;
    uint64_t last_seen_us = 0;  // newest sample timestamp consumed
    bool matched_once = false;  // some sample matched a member
    int64_t first_tick_ns = 0;
    uint64_t launches_at_first_tick = 0;
    bool paced_launch_seen = false;  // launches moved since the first tick
  };

  void TickDevice(int dev, Device& d);

  GroupSegment& segment_;
  UtilizationSource& source_;
  MemberPids members_;
  Clocks clocks_;
  std::array<std::unique_ptr<Device>, kGroupMaxDevices> devices_{};
  bool warned_unavailable_ = false;
  bool warned_unmatched_ = false;
};

}  // namespace gpuslice::control
