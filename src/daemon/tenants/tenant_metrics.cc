#include "daemon/tenants/tenant_metrics.h"

#include <charconv>
#include <map>

#include "daemon/metrics.h"

namespace gpuslice::daemon {
namespace {

std::string Number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

struct Family {
  std::string name;
  std::string type;
  std::string help;
  std::vector<std::string> samples;  // "{labels} value"
};

std::string Label(const char* name, const std::string& value) {
  return std::string(name) + "=\"" + EscapeLabelValue(value) + "\"";
}

}  // namespace

std::string FormatTenantMetrics(const TenantRegistry& registry, const std::vector<GpuUsage>& usage,
                                const GroupShareOf& share_of) {
  Family group_tenants{
      "gpuslice_group_tenants", "gauge", "Live registered tenants of the group.", {}};
  Family group_mem{"gpuslice_group_memory_used_bytes",
                   "gauge",
                   "GPU memory the group's tenants use, by the driver's count.",
                   {}};
  Family group_mem_limit{"gpuslice_group_memory_limit_bytes",
                         "gauge",
                         "The group's memory limit on the GPU (absent: none).",
                         {}};
  Family group_compute_limit{"gpuslice_group_compute_limit_ratio",
                             "gauge",
                             "The group's compute limit on the GPU (0-1; absent: none).",
                             {}};
  Family group_share{"gpuslice_group_compute_share_ratio",
                     "gauge",
                     "What the group ran of the GPU over the last second, by gpusliced's "
                     "group control (0-1; absent: not known).",
                     {}};
  Family tenant_mem{"gpuslice_tenant_memory_used_bytes",
                    "gauge",
                    "GPU memory the tenant uses, by the driver's count.",
                    {}};
  Family tenant_mem_limit{"gpuslice_tenant_memory_limit_bytes",
                          "gauge",
                          "The tenant's effective memory limit on the GPU (absent: none).",
                          {}};
  Family tenant_share{"gpuslice_tenant_compute_share_ratio",
                      "gauge",
                      "Its group's share (gpuslice_group_compute_share_ratio) when the "
                      "tenant is the group's only member (0-1; absent otherwise).",
                      {}};
  Family group_request{"gpuslice_group_compute_request_ratio",
                       "gauge",
                       "The compute share guaranteed to the group on the GPU (0-1).",
                       {}};
  Family group_sched_limit{"gpuslice_group_schedule_limit_ratio",
                           "gauge",
                           "The group's effective compute limit on the GPU as the scheduler holds "
                           "it: its own, lowered by its tenants' (0-1).",
                           {}};
  Family group_weight{
      "gpuslice_group_schedule_weight", "gauge", "The group's weight for the surplus.", {}};
  Family group_latency{"gpuslice_group_latency_priority",
                       "gauge",
                       "1 when the group has latency priority on the GPU, 0 for batch.",
                       {}};
  Family group_paused{"gpuslice_group_paused", "gauge", "1 while the group is paused, else 0.", {}};
  Family refused{
      "gpuslice_registrations_refused_total", "counter", "Registrations the daemon refused.", {}};

  const RegistryView view = registry.TakeView();  // every series of one scrape from one instant
  std::vector<std::string> gpu_labels;            // by position in usage
  gpu_labels.reserve(usage.size());
  for (const GpuUsage& u : usage) {
    gpu_labels.push_back(Label("gpu", std::to_string(u.index)) + "," + Label("uuid", u.uuid));
  }
  for (const auto& [id, g] : view.groups) {
    const std::vector<const Tenant*> m = view.MembersOf(id);
    std::string pod, ns;
    for (const Tenant* t : m) {
      if (pod.empty()) pod = t->hints.pod_name;
      if (ns.empty()) ns = t->hints.pod_namespace;
    }
    const std::string base =
        Label("group", g.id) + "," + Label("pod", pod) + "," + Label("namespace", ns);
    group_tenants.samples.push_back("{" + base + "} " + std::to_string(m.size()));
    group_paused.samples.push_back("{" + base + "} " + (g.paused ? "1" : "0"));
    std::vector<int32_t> shares(usage.size(), -1);  // by GPU; -1: not known
    for (size_t i = 0; i < usage.size(); ++i) {
      if (!share_of) break;
      shares[i] = share_of(g.id, usage[i].uuid).value_or(-1);
    }
    for (size_t i = 0; i < usage.size(); ++i) {
      const GpuUsage& u = usage[i];
      const std::string labels = "{" + base + "," + gpu_labels[i] + "}";
      uint64_t used = 0;
      for (const Tenant* t : m) {
        const auto pid = static_cast<uint32_t>(t->host_pid);
        if (auto it = u.memory_bytes.find(pid); it != u.memory_bytes.end()) used += it->second;
      }
      group_mem.samples.push_back(labels + " " + std::to_string(used));
      if (shares[i] >= 0) group_share.samples.push_back(labels + " " + Number(shares[i] / 1e4));
      const GpuLimit limit = LimitOn(g.limits, u.uuid);
      if (limit.memory_bytes) {
        group_mem_limit.samples.push_back(labels + " " + std::to_string(*limit.memory_bytes));
      }
      if (limit.compute_percent) {
        group_compute_limit.samples.push_back(labels + " " +
                                              Number(*limit.compute_percent / 100.0));
      }
      if (auto schedule = view.ScheduleOn(g.id, u.uuid)) {
        group_request.samples.push_back(labels + " " + Number(schedule->request_percent / 100.0));
        group_sched_limit.samples.push_back(labels + " " + Number(schedule->limit_percent / 100.0));
        group_weight.samples.push_back(labels + " " + std::to_string(schedule->weight));
        group_latency.samples.push_back(labels + " " +
                                        (schedule->priority == Priority::kLatency ? "1" : "0"));
      }
    }
    for (const Tenant* t : m) {
      const std::string tbase = base + "," + Label("container", t->hints.container_name) + "," +
                                Label("pid", std::to_string(t->host_pid));
      const auto limits = view.EffectiveLimits(*t);
      const auto pid = static_cast<uint32_t>(t->host_pid);
      for (size_t i = 0; i < usage.size(); ++i) {
        const GpuUsage& u = usage[i];
        auto mem = u.memory_bytes.find(pid);
        auto limit = limits.find(u.uuid);
        if (mem == u.memory_bytes.end() && limit == limits.end()) continue;  // not its GPU
        const std::string labels = "{" + tbase + "," + gpu_labels[i] + "}";
        tenant_mem.samples.push_back(labels + " " +
                                     std::to_string(mem == u.memory_bytes.end() ? 0 : mem->second));
        if (m.size() == 1 && shares[i] >= 0) {
          tenant_share.samples.push_back(labels + " " + Number(shares[i] / 1e4));
        }
        if (limit != limits.end() && limit->second.memory_bytes) {
          tenant_mem_limit.samples.push_back(labels + " " +
                                             std::to_string(*limit->second.memory_bytes));
        }
      }
    }
  }
  refused.samples.push_back(" " + std::to_string(registry.refused_count()));

  std::string out;
  for (const Family* f :
       {&group_tenants, &group_mem, &group_mem_limit, &group_compute_limit, &group_share,
        &group_request, &group_sched_limit, &group_weight, &group_latency, &group_paused,
        &tenant_mem, &tenant_mem_limit, &tenant_share, &refused}) {
    out += "# HELP " + f->name + " " + f->help + "\n";
    out += "# TYPE " + f->name + " " + f->type + "\n";
    for (const std::string& s : f->samples) out += f->name + s + "\n";
  }
  return out;
}

}  // namespace gpuslice::daemon
