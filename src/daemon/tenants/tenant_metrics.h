// Prometheus series of groups and tenants (docs/api.md "Metrics"),
// appended to the GPU series of GET /metrics. Labels: group, pod, namespace
// (the pod and namespace the members claim, "" outside a pod), gpu (index)
// and uuid; tenants add container and pid. Memory is the driver's count
// (NVML, host pids); compute shares are the group control's (`share_of`,
// docs/scheduling.md "Evidence"): a tenant has one only as its group's sole
// member. Limits are the daemon's. The registry is read once (one
// RegistryView), so every series of a scrape is of the same instant.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

// What `group` ran of GPU `uuid` over the last second, basis points;
// nullopt or negative: not known.
using GroupShareOf =
    std::function<std::optional<int32_t>(const std::string& group, const std::string& uuid)>;

std::string FormatTenantMetrics(const TenantRegistry& registry, const std::vector<GpuUsage>& usage,
                                const GroupShareOf& share_of);

}  // namespace gpuslice::daemon
