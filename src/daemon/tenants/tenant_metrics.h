// Prometheus series of groups and tenants (docs/api.md "Metrics"),
// appended to the GPU series of GET /metrics. Labels: group, pod, namespace
// (the pod and namespace the members claim, "" outside a pod), gpu (index)
// and uuid; tenants add container and pid. Memory and shares are the
// driver's count (NVML, host pids); limits are the daemon's.
// Pure function of its arguments; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

std::string FormatTenantMetrics(const TenantRegistry& registry, const std::vector<GpuUsage>& usage);

}  // namespace gpuslice::daemon
