#include "daemon/gpu/gpu_json.h"

#include "daemon/gpu/compute_mode.h"
#include "daemon/gpu/setting.h"

namespace gpuslice::daemon {
namespace {

nlohmann::json Locked(const std::optional<ClockRange>& r) {
  if (!r) return nullptr;
  return {{"min_mhz", r->min_mhz}, {"max_mhz", r->max_mhz}};
}

}  // namespace

nlohmann::json GpuFeaturesJson(const GpuFeatures& f) {
  return {{"driver_version", f.driver_version},
          {"mig", f.mig},
          {"cgroup_v2", f.cgroup_v2},
          {"memory_limits", f.memory_limits_api},
          {"mps",
           {{"available", f.mps_protocol != 0},
            {"protocol",
             f.mps_protocol == 0 ? nlohmann::json(nullptr) : nlohmann::json(f.mps_protocol)},
            {"reason", f.mps_reason}}}};
}

nlohmann::json GpuJson(const GpuInfo& g) {
  return {
      {"index", g.index},
      {"uuid", g.uuid},
      {"name", g.name},
      {"memory",
       {{"total_bytes", g.memory_total_bytes},
        {"used_bytes", g.memory_used_bytes},
        {"free_bytes", g.memory_free_bytes}}},
      {"utilization",
       {{"gpu_percent", g.utilization_gpu_percent},
        {"memory_percent", g.utilization_memory_percent}}},
      {"power",
       {{"draw_watts", g.power_draw_mw / 1000.0},
        {"limit_watts", g.power_limit_mw / 1000.0},
        {"default_limit_watts", g.power_default_mw / 1000.0},
        {"min_limit_watts", g.power_min_mw / 1000.0},
        {"max_limit_watts", g.power_max_mw / 1000.0}}},
      {"energy_joules", static_cast<double>(g.energy_mj) / 1000.0},
      {"clocks",
       {{"sm_mhz", g.sm_clock_mhz},
        {"memory_mhz", g.memory_clock_mhz},
        {"max_sm_mhz", g.max_sm_clock_mhz},
        {"max_memory_mhz", g.max_memory_clock_mhz},
        {"locked_gpu", Locked(g.locked_gpu_clocks)},
        {"locked_memory", Locked(g.locked_memory_clocks)}}},
      {"temperature_c", g.temperature_c},
      {"persistence", g.persistence},
      {"compute_mode", ComputeModeName(g.compute_mode)},
      {"mps", g.mps},
      {"features", GpuFeaturesJson(g.features)},
      {"xid",
       {{"errors", g.xid_errors},
        {"last", g.last_xid},
        {"critical", g.critical_xid},
        {"healthy", g.critical_xid == 0}}},
  };
}

nlohmann::json GpuJson(const GpuInfo& g, const GpuReadState& read) {
  nlohmann::json j = GpuJson(g);
  j["reachable"] = !read.failed;
  j["read_error"] = read.failed ? nlohmann::json(read.error) : nlohmann::json(nullptr);
  j["read_failures"] = read.failures;
  return j;
}

}  // namespace gpuslice::daemon
