// GroupSchedule: how one group shares one GPU with the others (issue 13,
// DESIGN.md section 4). The registry (src/daemon/tenants) owns the values and
// answers them per group and GPU; GroupControllers reads them every tick
// through its ScheduleOf callback and feeds them to that GPU's
// control::ShareScheduler. Declared here so src/daemon/groups does not depend
// on the registry.
#pragma once

#include <cstdint>

namespace gpuslice::daemon {

enum class Priority { kBatch, kLatency };

struct GroupSchedule {           // per GPU, per group
  uint32_t request_percent = 0;  // 0..100, guaranteed share when wanted
  uint32_t limit_percent = 100;  // 1..100 (the group's compute limit, as
                                 //   GpuLimit::compute_percent, lowered by its tenants')
  Priority priority = Priority::kBatch;
  uint32_t weight = 1;  // 1..1000, share of the surplus
  bool paused = false;  // the group's
};

}  // namespace gpuslice::daemon
