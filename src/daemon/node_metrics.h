// The Prometheus text of /metrics beyond the GPUs' own families (metrics.h):
// tenants, groups, the backstops, enforcers, tiers, MPS, reverts and saves,
// each part's families in this fixed order.
//
// Thread-safe as each part's FormatMetrics is.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/backstop/backstop_monitor.h"
#include "daemon/enforce/enforcers.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/groups/group_controllers.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/group_tiers.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

// The parts, all outliving the call.
struct NodeMetricsSources {
  const TenantRegistry& registry;
  const GpuMonitor& monitor;
  const GpuUsageCache& usage;
  const GroupControllers& controllers;
  const BackstopMonitor& backstop;
  const Enforcers& enforcers;
  const GroupTiers& tiers;
  const mps::MpsManager& mps;
  const GpuManager& manager;
  const StateStore& state;
};
std::string FormatNodeMetrics(const NodeMetricsSources& sources);

// gpuslice_mps_state_save_failures_total: writes of the MPS state file that failed.
std::string FormatMpsStateMetrics(uint64_t save_failures);

}  // namespace gpuslice::daemon
