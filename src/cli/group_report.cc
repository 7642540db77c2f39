#include "cli/group_report.h"

#include <algorithm>
#include <cstdio>

#include "common/quantity.h"

namespace gpuslice::cli {
namespace {

// " (MIG 1g.20gb MIG-… on GPU-…)" for a group that holds an instance.
std::string MigText(const RegistryGroup& g) { return g.mig.empty() ? "" : " (MIG " + g.mig + ")"; }

std::string MemoryLimitText(uint64_t bytes) {
  return bytes == kUnlimitedBytes ? "unlimited" : FormatBytes(bytes);
}

// "30% (29.7% used)": the limit and, once measured, the group's share.
std::string ComputeText(const DeviceReport& d) {
  std::string text =
      d.compute_limit >= kUnlimitedPercent ? "unlimited" : std::to_string(d.compute_limit) + "%";
  if (d.compute_share_percent >= 0) {
    char used[32];
    snprintf(used, sizeof used, " (%.1f%% used)", d.compute_share_percent);
    text += used;
  }
  return text;
}

nlohmann::json TenantJson(const RegisteredTenant& t, std::optional<bool> attached) {
  nlohmann::json j = {
      {"host_pid", t.host_pid},
      {"container_pid", t.container_pid},
      {"pod", t.pod.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.pod)},
      {"container", t.container.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.container)},
      {"tier", t.tier}};
  if (attached) j["attached"] = *attached;
  return j;
}

bool Attached(const GroupReport& g, int32_t host_pid) {
  return std::any_of(g.members.begin(), g.members.end(), [&](const MemberReport& m) {
    return m.tenant && m.tenant->host_pid == host_pid;
  });
}

// "pod prod/web-0 app", "" without one.
std::string TenantText(const RegisteredTenant& t) {
  std::string text = "host pid " + std::to_string(t.host_pid);
  if (t.container_pid != t.host_pid)
    text += " (pid " + std::to_string(t.container_pid) + " inside)";
  if (!t.pod.empty()) text += " pod " + t.pod;
  if (!t.container.empty()) text += " container " + t.container;
  return text;
}

}  // namespace

std::vector<RegistryGroup> MergeRegistry(std::vector<RegistryGroup> registry,
                                         std::vector<GroupReport>& reports) {
  std::vector<RegistryGroup> unmatched;
  for (RegistryGroup& r : registry) {
    auto report = std::find_if(reports.begin(), reports.end(),
                               [&](const GroupReport& g) { return g.group == r.id; });
    if (report == reports.end()) {
      unmatched.push_back(std::move(r));
      continue;
    }
    std::vector<bool> taken(r.tenants.size(), false);
    auto take = [&](MemberReport& m, size_t i) {
      taken[i] = true;
      m.tenant = r.tenants[i];
    };
    // Host pids first (a member outside a pid namespace), then container pids.
    for (MemberReport& m : report->members) {
      for (size_t i = 0; i < r.tenants.size(); ++i) {
        if (!taken[i] && r.tenants[i].host_pid == m.pid) {
          take(m, i);
          break;
        }
      }
    }
    for (MemberReport& m : report->members) {
      if (m.tenant) continue;
      size_t found = r.tenants.size();
      int candidates = 0;
      for (size_t i = 0; i < r.tenants.size(); ++i) {
        if (!taken[i] && r.tenants[i].container_pid == m.pid) {
          found = i;
          ++candidates;
        }
      }
      if (candidates == 1) take(m, found);
    }
    report->registry = std::move(r);
  }
  return unmatched;
}

std::string ShortUuid(const std::string& uuid) {
  const size_t prefix = uuid.starts_with("GPU-") || uuid.starts_with("MIG-") ? 4 : 0;
  const size_t dash = uuid.find('-', prefix);
  return dash == std::string::npos ? uuid : uuid.substr(0, dash);
}

GroupReport ReadGroupReport(const GroupSegment& segment, int64_t now_ns) {
  GroupReport r{.group = segment.group(),
                .path = segment.path(),
                .devices = {},
                .members = {},
                .registry = std::nullopt};
  r.live = segment.HasAttachedProcess();
  if (!r.live) r.idle_ns = std::max<int64_t>(0, now_ns - segment.LastAliveNs());
  const GroupSnapshot snap = segment.Snapshot();
  r.ledger_evictions = snap.ledger_evictions;
  for (const GroupSnapshot::Device& d : snap.devices) {
    DeviceReport report{d.index,       d.uuid,           d.memory_used,  d.memory_limit,
                        d.memory_peak, d.alloc_failures, d.compute_limit};
    if (d.share_bp >= 0) report.compute_share_percent = d.share_bp / 100.0;
    report.launch_charge_ns = d.charge_ns;
    report.launches = d.launches;
    report.throttled_launches = d.throttled;
    report.throttled_ns = d.throttled_ns;
    r.devices.push_back(std::move(report));
  }
  for (const GroupSnapshot::Member& m : snap.members) {
    r.members.push_back({m.slot, m.pid, m.name, m.memory, std::nullopt});
  }
  return r;
}

nlohmann::json StatusJson(const std::vector<GroupReport>& groups, const DaemonView& daemon) {
  using nlohmann::json;
  json out = {{"groups", json::array()}};
  for (const GroupReport& g : groups) {
    json devices = json::array();
    for (const DeviceReport& d : g.devices) {
      devices.push_back({
          {"index", d.index},
          {"uuid", d.uuid},
          {"memory_used_bytes", d.memory_used},
          {"memory_limit_bytes",
           d.memory_limit == kUnlimitedBytes ? json(nullptr) : json(d.memory_limit)},
          {"memory_peak_bytes", d.memory_peak},
          {"alloc_failures", d.alloc_failures},
          {"compute_limit_percent",
           d.compute_limit >= kUnlimitedPercent ? json(nullptr) : json(d.compute_limit)},
          {"compute_share_percent",
           d.compute_share_percent < 0 ? json(nullptr) : json(d.compute_share_percent)},
          {"launch_charge_ns", d.launch_charge_ns > 0 ? json(d.launch_charge_ns) : json(nullptr)},
          {"launches", d.launches},
          {"throttled_launches", d.throttled_launches},
          {"throttled_seconds", static_cast<double>(d.throttled_ns) / 1e9},
      });
    }
    json members = json::array();
    for (const MemberReport& m : g.members) {
      json per_device = json::array();
      uint64_t total = 0;
      for (size_t d = 0; d < m.memory.size(); ++d) {
        per_device.push_back({{"index", d}, {"memory_bytes", m.memory[d]}});
        total += m.memory[d];
      }
      json member = {{"slot", m.slot},
                     {"pid", m.pid},
                     {"name", m.name},
                     {"memory_bytes", total},
                     {"devices", per_device}};
      if (daemon.used) {
        member["tenant"] = m.tenant ? TenantJson(*m.tenant, std::nullopt) : json(nullptr);
      }
      members.push_back(std::move(member));
    }
    json group = {{"group", g.group},
                  {"path", g.path},
                  {"live", g.live},
                  {"idle_seconds", g.live ? json(nullptr) : json(g.idle_ns / 1'000'000'000)},
                  {"live_members", g.members.size()},
                  {"ledger_evictions", g.ledger_evictions},
                  {"devices", devices},
                  {"members", members}};
    if (daemon.used) {
      group["tier"] = g.registry ? json(g.registry->tier) : json(nullptr);
      if (g.registry && !g.registry->mig.empty()) group["mig"] = g.registry->mig;
      json tenants = json::array();
      if (g.registry) {
        for (const RegisteredTenant& t : g.registry->tenants) {
          tenants.push_back(TenantJson(t, Attached(g, t.host_pid)));
        }
      }
      group["tenants"] = g.registry ? tenants : json(nullptr);
      json enforcers = json::array();
      if (g.registry) {
        for (const GroupEnforcer& e : g.registry->enforcers) {
          enforcers.push_back(
              {{"gpu", e.gpu},
               {"uuid", e.uuid},
               {"memory", {{"enforcer", e.memory}, {"reason", e.memory_reason}}},
               {"compute", {{"enforcer", e.compute}, {"reason", e.compute_reason}}}});
        }
      }
      group["enforcers"] = g.registry ? enforcers : json(nullptr);
    }
    out["groups"].push_back(std::move(group));
  }
  if (!daemon.used) {
    out["daemon"] = nullptr;
    return out;
  }
  out["daemon"] = {{"socket", daemon.socket},
                   {"answered", daemon.answered},
                   {"error", daemon.answered ? json(nullptr) : json(daemon.error)}};
  json only = json::array();
  for (const RegistryGroup& r : daemon.registry_only) {
    json tenants = json::array();
    for (const RegisteredTenant& t : r.tenants) tenants.push_back(TenantJson(t, false));
    only.push_back({{"group", r.id}, {"tier", r.tier}, {"tenants", tenants}});
  }
  out["registry_only_groups"] = std::move(only);
  return out;
}

std::string EnforcerText(const std::vector<GroupEnforcer>& enforcers) {
  std::string out;
  for (const GroupEnforcer& e : enforcers) {
    out += "  enforcer GPU " + std::to_string(e.gpu) + ": memory " + e.memory + " (" +
           e.memory_reason + "); compute " + e.compute + " (" + e.compute_reason + ")\n";
  }
  return out;
}

std::string IdleText(int64_t ns) {
  constexpr int64_t kHour = 3600;
  constexpr int64_t kDay = 24 * kHour;
  const int64_t s = ns / 1'000'000'000;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 2 * kHour) return std::to_string(s / 60) + "m";
  if (s < 2 * kDay) return std::to_string(s / kHour) + "h";
  return std::to_string(s / kDay) + "d";
}

std::string StatusText(const std::vector<GroupReport>& groups, const DaemonView& daemon) {
  std::string out;
  if (groups.empty() && daemon.registry_only.empty()) out = "no groups\n";
  char line[512];
  if (out.empty()) {
    snprintf(line, sizeof line, "%-20s %-16s %-27s %-22s %s\n", "GROUP", "DEVICE",
             "MEMORY USED / LIMIT", "COMPUTE", "MEMBERS");
    out += line;
  }
  for (const GroupReport& g : groups) {
    const std::string members =
        g.live ? std::to_string(g.members.size()) : "none, idle " + IdleText(g.idle_ns);
    if (g.devices.empty()) {
      snprintf(line, sizeof line, "%-20s %-16s %-27s %-22s %s\n", g.group.c_str(), "-", "-", "-",
               members.c_str());
      out += line;
    }
    for (const DeviceReport& d : g.devices) {
      const std::string device = std::to_string(d.index) + " " + ShortUuid(d.uuid);
      const std::string memory =
          FormatBytes(d.memory_used) + " / " + MemoryLimitText(d.memory_limit);
      snprintf(line, sizeof line, "%-20s %-16s %-27s %-22s %s\n", g.group.c_str(), device.c_str(),
               memory.c_str(), ComputeText(d).c_str(), members.c_str());
      out += line;
    }
    for (const MemberReport& m : g.members) {
      std::string memory;
      for (size_t d = 0; d < m.memory.size(); ++d) {
        if (!memory.empty()) memory += ", ";
        memory += "GPU " + std::to_string(d) + " " + FormatBytes(m.memory[d]);
      }
      snprintf(line, sizeof line, "  pid %-8d %-16s %s\n", m.pid, m.name.c_str(),
               memory.empty() ? "-" : memory.c_str());
      out += line;
      if (m.tenant) out += "    tenant: " + TenantText(*m.tenant) + "\n";
    }
    if (g.ledger_evictions > 0) {
      out += "  ledger lock: " + std::to_string(g.ledger_evictions) +
             " holder(s) evicted for holding it past the deadline (stopped or hung inside)\n";
    }
    if (g.registry) {
      out += "  registry: tier " + g.registry->tier + MigText(*g.registry) + ", " +
             std::to_string(g.registry->tenants.size()) + " tenant(s)\n";
      out += EnforcerText(g.registry->enforcers);
      for (const RegisteredTenant& t : g.registry->tenants) {
        if (!Attached(g, t.host_pid)) out += "    tenant: " + TenantText(t) + ", not attached\n";
      }
    }
  }
  for (const RegistryGroup& r : daemon.registry_only) {
    const std::string members = std::to_string(r.tenants.size()) + " registered, no segment";
    snprintf(line, sizeof line, "%-20s %-16s %-27s %-22s %s\n", r.id.c_str(), "-", "-", "-",
             members.c_str());
    out += line;
    out += "  registry: tier " + r.tier + MigText(r) + ", " + std::to_string(r.tenants.size()) +
           " tenant(s)\n";
    out += EnforcerText(r.enforcers);
    for (const RegisteredTenant& t : r.tenants) out += "    tenant: " + TenantText(t) + "\n";
  }
  if (daemon.used && !daemon.answered && daemon.socket_exists) {
    out += "gpusliced: " + daemon.error + " (segments only)\n";
  }
  return out;
}

}  // namespace gpuslice::cli
