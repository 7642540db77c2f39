// Prometheus series of the groups the daemon controls, from their segments
// (docs/api.md "Metrics"): what only the limiter sees — launches paced and
// throttled, the time they waited, allocations refused — and whether the
// daemon holds the group's controller role. Labels: group, gpu (index, when
// the GPU is known) and uuid. Pure function; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "daemon/groups/group_controllers.h"

namespace gpuslice::daemon {

// `gpu_index`: the node's index of each GPU UUID.
std::string FormatGroupMetrics(const std::vector<GroupControllers::GroupControl>& groups,
                               const std::map<std::string, int>& gpu_index);

}  // namespace gpuslice::daemon
