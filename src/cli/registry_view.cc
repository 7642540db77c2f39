#include "cli/registry_view.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>

#include "cli/group_report.h"
#include "common/quantity.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

int64_t Int(const json& j, const char* key, int64_t fallback = 0) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

uint64_t UInt(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

const json& Array(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

// "1.00GiB": FormatBytes without its space, for space-separated lists.
std::string Compact(uint64_t bytes) {
  std::string text = FormatBytes(bytes);
  std::erase(text, ' ');
  return text;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string LimitText(const json& limit) {
  std::string memory = "unlimited";
  std::string compute = "unlimited";
  if (limit.is_object()) {
    if (auto m = limit.find("memory_bytes"); m != limit.end() && m->is_number_unsigned()) {
      memory = FormatBytes(m->get<uint64_t>());
    }
    if (auto c = limit.find("compute_percent"); c != limit.end() && c->is_number_unsigned()) {
      compute = std::to_string(c->get<uint64_t>()) + "%";
    }
  }
  return memory + " / " + compute;
}

// "30% 60% latency 2 45.5%" from a group view's GPU entry ("schedule" and
// "grant_percent"); "-" for what the daemon does not send.
std::string ScheduleText(const json& gpu) {
  const json s = gpu.is_object() ? gpu.value("schedule", json()) : json();
  auto percent = [](const json& j, const char* key) -> std::string {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "-";
    char buf[32];
    snprintf(buf, sizeof buf, "%g%%", j[key].get<double>());
    return buf;
  };
  char buf[160];
  snprintf(buf, sizeof buf, "%-7s %-5s %-8s %-6s %s", percent(s, "request").c_str(),
           percent(s, "limit").c_str(), OrDash(Str(s, "priority")).c_str(),
           s.is_object() && s.contains("weight") && s["weight"].is_number_unsigned()
               ? std::to_string(s["weight"].get<uint64_t>()).c_str()
               : "-",
           percent(gpu, "grant_percent").c_str());
  return buf;
}

// "GPU-ABC" and "abc" name the same GPU: lower case, without "gpu-".
std::string UuidKey(std::string uuid) {
  std::transform(uuid.begin(), uuid.end(), uuid.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (uuid.starts_with("gpu-")) uuid.erase(0, 4);
  return uuid;
}

StatusOr<std::string> ResolveGpu(const std::string& device,
                                 const std::vector<std::string>& gpu_uuids) {
  const bool digits = !device.empty() && std::all_of(device.begin(), device.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
  if (digits) {
    const size_t index = device.size() < 6 ? std::stoul(device) : gpu_uuids.size();
    if (index < gpu_uuids.size()) return gpu_uuids[index];
    return InvalidArgument("no GPU " + device + " on this node (it has " +
                           std::to_string(gpu_uuids.size()) + ")");
  }
  for (const std::string& uuid : gpu_uuids) {
    if (UuidKey(uuid) == UuidKey(device)) return uuid;
  }
  return InvalidArgument("no GPU with UUID " + device + " on this node");
}

// Sets (or, for nullopt, removes) `field` in the limits object `limits`
// for the `flag` pairs (see GroupPutBody).
template <typename T>
Status Apply(json& limits, const char* field, const std::vector<std::pair<std::string, T>>& flag,
             T unlimited, const std::vector<std::string>& gpu_uuids) {
  for (const auto& [device, value] : flag) {
    std::string key = "all";
    if (device.empty()) {
      for (auto& [gpu, entry] : limits.items()) entry.erase(field);
    } else {
      GS_ASSIGN_OR_RETURN(key, ResolveGpu(device, gpu_uuids));
      if (value == unlimited && limits.contains("all") && limits["all"].contains(field)) {
        return InvalidArgument("GPU " + device + ": the group's " + field +
                               " limit is set for every GPU; one GPU cannot be unlimited while "
                               "it is (give one value for every GPU first)");
      }
    }
    if (value == unlimited) {
      if (limits.contains(key)) limits[key].erase(field);
    } else {
      limits[key][field] = value;
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<RegistryGroup>> ParseRegistry(const json& tenants_body,
                                                   const json& groups_body) {
  if (!tenants_body.is_object() || !tenants_body.contains("tenants") || !groups_body.is_object() ||
      !groups_body.contains("groups")) {
    return Internal("the daemon's registry answer is not {\"tenants\": …} and {\"groups\": …}");
  }
  std::map<std::string, RegistryGroup> by_id;
  for (const json& g : Array(groups_body, "groups")) {
    const std::string id = Str(g, "id");
    if (id.empty()) continue;
    by_id[id] = {id, Str(g, "tier"), {}, {}, ""};
    if (const json mig = g.value("mig", json()); mig.is_object()) {
      by_id[id].mig = Str(mig, "profile") + " " + Str(mig, "uuid") + " on " + Str(mig, "gpu");
    }
    for (const json& gpu : Array(g, "gpus")) {
      const json e = gpu.value("enforcer", json());
      if (!e.is_object()) continue;
      const json memory = e.value("memory", json::object());
      const json compute = e.value("compute", json::object());
      GroupEnforcer ge{static_cast<int>(Int(gpu, "index")),
                       Str(gpu, "uuid"),
                       Str(memory, "enforcer"),
                       Str(memory, "reason"),
                       Str(compute, "enforcer"),
                       Str(compute, "reason")};
      if (ge.memory == "none" && ge.compute == "none") continue;
      by_id[id].enforcers.push_back(std::move(ge));
    }
  }
  for (const json& t : Array(tenants_body, "tenants")) {
    const std::string group = Str(t, "group");
    RegistryGroup& g = by_id[group];
    if (g.id.empty()) g = {group, Str(t, "tier"), {}, {}, ""};
    g.tenants.push_back({static_cast<int32_t>(Int(t, "host_pid")),
                         static_cast<int32_t>(Int(t, "container_pid")), PodText(t),
                         Str(t, "container"), Str(t, "tier")});
  }
  std::vector<RegistryGroup> out;
  for (auto& [id, g] : by_id) {
    std::sort(g.tenants.begin(), g.tenants.end(),
              [](const auto& a, const auto& b) { return a.host_pid < b.host_pid; });
    out.push_back(std::move(g));
  }
  return out;
}

std::string PodText(const json& tenant) {
  const std::string pod = Str(tenant, "pod");
  const std::string ns = Str(tenant, "namespace");
  if (pod.empty()) return "";
  return ns.empty() ? pod : ns + "/" + pod;
}

std::string TenantsText(const json& body) {
  const json& tenants = Array(body, "tenants");
  if (tenants.empty()) return "no tenants\n";
  std::string out;
  char line[1024];
  snprintf(line, sizeof line, "%-9s %-13s %-20s %-28s %-16s %-7s %-28s %s\n", "HOST PID",
           "CONTAINER PID", "GROUP", "POD", "CONTAINER", "TIER", "MEMORY", "SHARE");
  out += line;
  for (const json& t : tenants) {
    std::string memory;
    std::string share;
    for (const json& g : Array(t, "gpus")) {
      const std::string gpu = std::to_string(Int(g, "index", -1)) + ":";
      if (!memory.empty()) memory += ' ';
      memory += gpu + Compact(UInt(g, "memory_used_bytes"));
      if (!share.empty()) share += ' ';
      if (auto s = g.find("share"); s != g.end() && s->is_number()) {
        char pct[32];
        snprintf(pct, sizeof pct, "%.0f%%", s->get<double>() * 100);
        share += gpu + pct;
      } else {
        share += gpu + "-";
      }
    }
    snprintf(line, sizeof line, "%-9lld %-13lld %-20s %-28s %-16s %-7s %-28s %s\n",
             static_cast<long long>(Int(t, "host_pid")),
             static_cast<long long>(Int(t, "container_pid")), OrDash(Str(t, "group")).c_str(),
             OrDash(PodText(t)).c_str(), OrDash(Str(t, "container")).c_str(),
             OrDash(Str(t, "tier")).c_str(), OrDash(memory).c_str(), OrDash(share).c_str());
    out += line;
  }
  return out;
}

std::string GroupsText(const json& groups) {
  if (!groups.is_array() || groups.empty()) return "no groups\n";
  std::string out;
  char line[1024];
  for (const json& g : groups) {
    const json owner = g.is_object() ? g.value("owner", json::object()) : json::object();
    std::string owner_text = "admin";
    if (owner.is_object() && owner.contains("uid") && owner["uid"].is_number_integer()) {
      owner_text = "uid " + std::to_string(owner["uid"].get<int64_t>());
      if (!Str(owner, "pod_uid").empty()) owner_text += ", pod " + Str(owner, "pod_uid");
    }
    const bool paused =
        g.is_object() && g.value("paused", json()).is_boolean() && g["paused"].get<bool>();
    snprintf(line, sizeof line, "group %s: tier %s, owner %s, %zu member(s)%s\n",
             Str(g, "id").c_str(), OrDash(Str(g, "tier")).c_str(), owner_text.c_str(),
             Array(g, "members").size(), paused ? ", PAUSED" : "");
    out += line;
    const json& gpus = Array(g, "gpus");
    if (gpus.empty()) continue;
    snprintf(line, sizeof line, "  %-4s %-16s %-28s %-12s %s\n", "GPU", "UUID",
             "LIMIT MEMORY / COMPUTE", "MEMORY USED", "REQUEST LIMIT PRIORITY WEIGHT GRANT");
    out += line;
    for (const json& d : gpus) {
      snprintf(line, sizeof line, "  %-4lld %-16s %-28s %-12s %s\n",
               static_cast<long long>(Int(d, "index", -1)), ShortUuid(Str(d, "uuid")).c_str(),
               LimitText(d.value("limit", json())).c_str(),
               FormatBytes(UInt(d, "memory_used_bytes")).c_str(), ScheduleText(d).c_str());
      out += line;
    }
  }
  return out;
}

StatusOr<json> GroupPutBody(const json& current, const GroupSetFlags& flags,
                            const std::vector<std::string>& gpu_uuids) {
  json limits = current.is_object() ? current : json::object();
  // Drop null fields so that "removed" and "never set" look the same.
  for (auto& [gpu, entry] : limits.items()) {
    if (!entry.is_object()) {
      entry = json::object();
      continue;
    }
    for (auto it = entry.begin(); it != entry.end();) {
      it = it->is_null() ? entry.erase(it) : std::next(it);
    }
  }
  GS_RETURN_IF_ERROR(
      Apply<uint64_t>(limits, "memory_bytes", flags.memory, kUnlimitedBytes, gpu_uuids));
  GS_RETURN_IF_ERROR(Apply<uint32_t>(limits, "compute_percent", flags.compute,
                                     static_cast<uint32_t>(kUnlimitedPercent), gpu_uuids));
  for (auto it = limits.begin(); it != limits.end();) {
    it = it->empty() ? limits.erase(it) : std::next(it);
  }
  json body = {{"limits", limits}};
  if (!flags.tier.empty()) body["tier"] = flags.tier;
  return body;
}

StatusOr<json> GroupScheduleBody(const json& current, const GroupSetFlags& flags,
                                 const std::vector<std::string>& gpu_uuids) {
  json schedule = current.is_object() ? current : json::object();
  for (auto& [gpu, entry] : schedule.items()) {
    if (!entry.is_object()) entry = json::object();
  }
  // No value is "unlimited" here: the sentinels never match.
  GS_RETURN_IF_ERROR(Apply<uint32_t>(schedule, "request", flags.request, UINT32_MAX, gpu_uuids));
  GS_RETURN_IF_ERROR(
      Apply<std::string>(schedule, "priority", flags.priority, std::string(), gpu_uuids));
  GS_RETURN_IF_ERROR(Apply<uint32_t>(schedule, "weight", flags.weight, UINT32_MAX, gpu_uuids));
  for (auto it = schedule.begin(); it != schedule.end();) {
    it = it->empty() ? schedule.erase(it) : std::next(it);
  }
  return schedule;
}

}  // namespace gpuslice::cli
