#include "daemon/groups/group_metrics.h"

#include <cstdio>

#include "daemon/metrics.h"

namespace gpuslice::daemon {
namespace {

struct Family {
  const char* name;
  const char* type;
  const char* help;
  std::string samples;
};

std::string Label(const char* name, const std::string& value) {
  return std::string(name) + "=\"" + EscapeLabelValue(value) + "\"";
}

}  // namespace

std::string FormatGroupMetrics(const std::vector<GroupControllers::GroupControl>& groups,
                               const std::map<std::string, int>& gpu_index) {
  Family controlled{"gpuslice_group_controlled_by_daemon", "gauge",
                    "1 if the daemon holds the group's controller role, 0 if a member does.", ""};
  Family launches{"gpuslice_group_launches_total", "counter",
                  "Kernel launches the group's limiter paced on the GPU.", ""};
  Family throttled{"gpuslice_group_launches_throttled_total", "counter",
                   "Launches that waited for the group's compute budget.", ""};
  Family throttled_s{"gpuslice_group_throttled_seconds_total", "counter",
                     "Time the group's launches waited for its compute budget.", ""};
  Family refusals{"gpuslice_group_alloc_refusals_total", "counter",
                  "Allocations the limiter refused for the group's memory limit.", ""};
  Family charged{"gpuslice_group_memory_charged_bytes", "gauge",
                 "GPU memory charged to the group in its segment (the limiter's count).", ""};
  Family evictions{"gpuslice_group_ledger_evictions_total", "counter",
                   "Members evicted from the group's ledger lock for holding it past the deadline "
                   "(stopped, hung or dead inside).",
                   ""};
  Family grant{
      "gpuslice_group_compute_grant_percent", "gauge",
      "The scheduler's current share of the GPU for the group (100: not paced by it; 0: paused).",
      ""};
  for (const GroupControllers::GroupControl& g : groups) {
    const std::string group = Label("group", g.group);
    controlled.samples +=
        std::string(controlled.name) + "{" + group + "} " + (g.controlling ? "1" : "0") + "\n";
    evictions.samples += std::string(evictions.name) + "{" + group + "} " +
                         std::to_string(g.segment.ledger_evictions) + "\n";
    for (const GroupSnapshot::Device& d : g.segment.devices) {
      std::string labels = "{" + group;
      if (auto it = gpu_index.find(d.uuid); it != gpu_index.end()) {
        labels += ',';
        labels += Label("gpu", std::to_string(it->second));
      }
      labels += ',';
      labels += Label("uuid", d.uuid);
      labels += '}';
      char seconds[32];
      snprintf(seconds, sizeof seconds, "%.9g", static_cast<double>(d.throttled_ns) / 1e9);
      launches.samples += launches.name + labels + " " + std::to_string(d.launches) + "\n";
      throttled.samples += throttled.name + labels + " " + std::to_string(d.throttled) + "\n";
      throttled_s.samples += throttled_s.name + labels + " " + seconds + "\n";
      refusals.samples += refusals.name + labels + " " + std::to_string(d.alloc_failures) + "\n";
      charged.samples += charged.name + labels + " " + std::to_string(d.memory_used) + "\n";
      char percent[32];
      snprintf(percent, sizeof percent, "%.2f",
               g.segment.paused  ? 0.0
               : d.grant_bp == 0 ? 100.0
                                 : static_cast<double>(d.grant_bp) / 100);
      grant.samples += grant.name + labels + " " + percent + "\n";
    }
  }
  std::string out;
  for (const Family* f : {&controlled, &evictions, &launches, &throttled, &throttled_s, &refusals,
                          &charged, &grant}) {
    out += std::string("# HELP ") + f->name + " " + f->help + "\n";
    out += std::string("# TYPE ") + f->name + " " + f->type + "\n";
    out += f->samples;
  }
  return out;
}

}  // namespace gpuslice::daemon
