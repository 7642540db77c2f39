#include "sim/core/stats.h"

#include <cstdio>

#include "common/quantity.h"
#include "sim/core/memory_limits.h"

namespace gpuslice::sim {

nlohmann::json StatsJson(const SimState& s, int64_t now_ns) {
  using nlohmann::json;
  json devices = json::array();
  for (uint32_t i = 0; i < s.device_count; ++i) {
    const DeviceState& d = s.devices[i];
    json limits = json::array();  // r615 per-cgroup memory limits
    for (const MemoryLimitRecord& m : d.memory_limits) {
      if (m.cgroup[0] == '\0') continue;
      limits.push_back({{"cgroup", m.cgroup},
                        {"soft_bytes", m.soft_bytes},
                        {"hard_bytes", m.hard_bytes},
                        {"used_bytes", CgroupUsedBytes(s, static_cast<int>(i), m.cgroup)}});
    }
    devices.push_back({{"index", i},
                       {"memory_limits", limits},
                       {"uuid", d.info.uuid},
                       {"name", d.info.name},
                       {"busy_ns", d.busy_ns},
                       {"kernels", d.kernels},
                       {"context_switches", d.switches},
                       {"memory_used_bytes", d.used_bytes},
                       {"memory_total_bytes", d.info.total_bytes},
                       {"energy_mj", d.energy_mj},
                       {"power_limit_mw", d.power_limit_mw},
                       {"compute_mode", d.compute_mode}});
  }
  json processes = json::array();
  for (const ProcessRecord& p : s.processes) {
    if (p.status == kProcessFree) continue;
    json per_device = json::array();
    for (uint32_t i = 0; i < s.device_count; ++i) {
      const auto& pd = p.devices[i];
      per_device.push_back({{"index", i},
                            {"busy_ns", pd.busy_ns},
                            {"kernels", pd.kernels},
                            {"memory_bytes", pd.memory_bytes},
                            {"peak_memory_bytes", pd.peak_memory_bytes}});
    }
    processes.push_back({{"pid", p.pid},
                         {"local_pid", p.local_pid},
                         {"host_pid", (p.flags & kProcessHostPid) != 0},
                         {"name", p.name},
                         {"cgroup", p.cgroup},
                         {"status", p.status == kProcessAlive ? "running" : "exited"},
                         {"first_seen_ns", p.first_seen_ns},
                         {"exit_ns", p.exit_ns},
                         {"devices", per_device}});
  }
  return {{"clock_ns", now_ns},
          {"driver_version", s.params.driver_version},
          {"since_reset_ns", now_ns - s.header.reset_ns},
          {"devices", devices},
          {"processes", processes}};
}

std::string StatsText(const SimState& s, int64_t now_ns) {
  std::string out;
  char line[256];
  const double window_s = static_cast<double>(now_ns - s.header.reset_ns) / 1e9;
  snprintf(line, sizeof line, "simulation clock %.3f s, %.3f s since reset\n",
           static_cast<double>(now_ns) / 1e9, window_s);
  out += line;
  out += "GPU  NAME                        BUSY%   KERNELS   SWITCHES  MEMORY USED\n";
  for (uint32_t i = 0; i < s.device_count; ++i) {
    const DeviceState& d = s.devices[i];
    double busy = window_s > 0 ? 100.0 * static_cast<double>(d.busy_ns) / 1e9 / window_s : 0;
    snprintf(line, sizeof line, "%-4u %-26.26s %6.2f %9llu %10lld  %s / %s\n", i, d.info.name, busy,
             static_cast<unsigned long long>(d.kernels), static_cast<long long>(d.switches),
             FormatBytes(d.used_bytes).c_str(), FormatBytes(d.info.total_bytes).c_str());
    out += line;
  }
  out += "\nPID      NAME             STATUS   GPU  BUSY(s)    KERNELS  MEMORY\n";
  for (const ProcessRecord& p : s.processes) {
    if (p.status == kProcessFree) continue;
    for (uint32_t i = 0; i < s.device_count; ++i) {
      const auto& pd = p.devices[i];
      if (pd.kernels == 0 && pd.peak_memory_bytes == 0) continue;
      snprintf(line, sizeof line, "%-8d %-16.16s %-8s %-4u %8.3f %10llu  %s\n", p.pid, p.name,
               p.status == kProcessAlive ? "running" : "exited", i,
               static_cast<double>(pd.busy_ns) / 1e9, static_cast<unsigned long long>(pd.kernels),
               FormatBytes(pd.memory_bytes).c_str());
      out += line;
    }
  }
  return out;
}

}  // namespace gpuslice::sim
