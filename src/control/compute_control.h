// ComputeControl: the compute half of whoever controls a group, as the
// GroupKeeper steps it (DESIGN.md section 3). Two exist: a member's
// ComputeController (NVML's per-process samples: the group is alone on its
// device or nobody schedules it) and gpusliced's LaunchCostMeter (the launch
// gates' own timing markers: gpusliced's turns make them exact).
#pragma once

#include <chrono>

namespace gpuslice::control {

class ComputeControl {
 public:
  // How often to tick while some device of the group is paced.
  static constexpr std::chrono::milliseconds kPeriod{50};

  virtual ~ComputeControl() = default;
  // One step at the clock's now. Returns true if some device of the group is
  // paced (the caller then ticks every kPeriod).
  virtual bool Tick() = 0;
};

}  // namespace gpuslice::control
