#include "daemon/node_metrics.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/groups/group_metrics.h"
#include "daemon/tenants/tenant_metrics.h"

namespace gpuslice::daemon {

std::string FormatNodeMetrics(const NodeMetricsSources& s) {
  const std::shared_ptr<const Snapshot> gpus = s.monitor.Current();
  std::map<std::string, int> gpu_index;
  for (const GpuInfo& gpu : gpus->gpus) gpu_index[gpu.uuid] = static_cast<int>(gpu.index);
  const GroupControllers& controllers = s.controllers;
  std::string text =
      FormatTenantMetrics(s.registry, UsageOfEach(*gpus, *s.usage.Current()),
                          [&controllers](const std::string& g, const std::string& u) {
                            return controllers.ShareOf(g, u);
                          }) +
      FormatGroupMetrics(controllers.Snapshot(), gpu_index);
  text += s.backstop.FormatMetrics();  // memory and compute findings, one family
  text += s.enforcers.FormatMetrics(gpu_index);
  text += s.tiers.FormatMetrics();
  text += FormatMpsStateMetrics(s.mps.GetStatus().save_failures);
  text += FormatRevertMetrics(s.manager.Reverts());
  text += s.state.FormatMetrics();  // failed saves per record
  return text;
}

std::string FormatMpsStateMetrics(uint64_t save_failures) {
  return "# HELP gpuslice_mps_state_save_failures_total Writes of the MPS state file that "
         "failed.\n# TYPE gpuslice_mps_state_save_failures_total counter\n"
         "gpuslice_mps_state_save_failures_total " +
         std::to_string(save_failures) + "\n";
}

}  // namespace gpuslice::daemon
