#include "daemon/tenants/registry_json.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

template <typename T>
json Optional(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Reads an optional unsigned field of `j`; false if present and malformed.
template <typename T>
bool ReadOptional(const json& j, const char* key, std::optional<T>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number_unsigned()) return false;
  out = it->get<T>();
  return true;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

json GpuLimitJson(const GpuLimit& limit) {
  return {{"memory_bytes", Optional(limit.memory_bytes)},
          {"compute_percent", Optional(limit.compute_percent)}};
}

json ScheduleEntryJson(const ScheduleEntry& entry) {
  json j = json::object();
  if (entry.request_percent) j["request"] = *entry.request_percent;
  if (entry.priority) j["priority"] = PriorityName(*entry.priority);
  if (entry.weight) j["weight"] = *entry.weight;
  if (entry.memory_request_bytes) j["memory_request_bytes"] = *entry.memory_request_bytes;
  return j;
}

json GroupScheduleJson(const GroupSchedule& s) {
  return {{"request", s.request_percent},
          {"limit", s.limit_percent},
          {"priority", PriorityName(s.priority)},
          {"weight", s.weight},
          {"paused", s.paused}};
}

json LimitsJson(const Limits& limits) {
  json out = json::object();
  for (const auto& [gpu, limit] : limits) out[gpu] = GpuLimitJson(limit);
  return out;
}

json GroupJson(const Group& g) {
  json schedule = json::object();
  for (const auto& [gpu, entry] : g.schedule) schedule[gpu] = ScheduleEntryJson(entry);
  return {{"id", g.id},
          {"limits", LimitsJson(g.limits)},
          {"schedule", std::move(schedule)},
          {"paused", g.paused},
          {"tier", TierName(g.tier)},
          {"owner", {{"uid", Optional(g.owner_uid)}, {"pod_uid", g.owner_pod_uid}}},
          {"created_at_ns", g.created_at_ns},
          {"forget_when_empty", g.forget_when_empty}};
}

json TenantJson(const Tenant& t) {
  return {{"host_pid", t.host_pid},
          {"container_pid", t.container_pid},
          {"start_time", t.start_time},
          {"uid", t.uid},
          {"group", t.group},
          {"pod_uid", t.cgroup.pod_uid},
          {"container_id", t.cgroup.container_id},
          {"runtime", t.cgroup.runtime},
          {"qos", t.cgroup.qos},
          {"cgroup", t.cgroup.path},
          {"cgroup_v2", t.cgroup.unified_path},
          {"pod", t.hints.pod_name},
          {"namespace", t.hints.pod_namespace},
          {"container", t.hints.container_name},
          {"claimed_pod_uid", t.hints.pod_uid},
          {"hint_conflicts", t.hint_conflicts},
          {"tier", TierName(t.tier)},
          {"devices", t.devices},
          {"requested_limits", LimitsJson(t.requested)},
          {"registered_at_ns", t.registered_at_ns}};
}

StatusOr<Group> GroupFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("a group is not an object");
  Group g;
  g.id = Str(j, "id");
  GS_RETURN_IF_ERROR(ValidateGroupId(g.id));
  GS_ASSIGN_OR_RETURN(g.tier, ParseTier(Str(j, "tier")));
  if (auto limits = j.find("limits"); limits != j.end() && limits->is_object()) {
    for (const auto& [gpu, l] : limits->items()) {
      GpuLimit limit;
      if (!l.is_object() || !ReadOptional(l, "memory_bytes", limit.memory_bytes) ||
          !ReadOptional(l, "compute_percent", limit.compute_percent)) {
        return InvalidArgument("group " + g.id + ": a malformed limit for " + gpu);
      }
      g.limits[gpu] = limit;
    }
  }
  // Absent in a checkpoint older than scheduling: no schedule, not paused.
  if (auto schedule = j.find("schedule"); schedule != j.end() && schedule->is_object()) {
    for (const auto& [gpu, e] : schedule->items()) {
      ScheduleEntry entry;
      if (!e.is_object() || !ReadOptional(e, "request", entry.request_percent) ||
          !ReadOptional(e, "weight", entry.weight) ||
          !ReadOptional(e, "memory_request_bytes", entry.memory_request_bytes)) {
        return InvalidArgument("group " + g.id + ": a malformed schedule for " + gpu);
      }
      if (auto p = e.find("priority"); p != e.end() && p->is_string()) {
        GS_ASSIGN_OR_RETURN(entry.priority, ParsePriority(p->get<std::string>()));
      }
      GS_RETURN_IF_ERROR(ValidateScheduleEntry(entry, "schedule." + gpu));
      g.schedule[gpu] = entry;
    }
  }
  if (auto paused = j.find("paused"); paused != j.end() && paused->is_boolean()) {
    g.paused = paused->get<bool>();
  }
  if (auto owner = j.find("owner"); owner != j.end() && owner->is_object()) {
    if (!ReadOptional(*owner, "uid", g.owner_uid)) return InvalidArgument("a malformed owner uid");
    g.owner_pod_uid = Str(*owner, "pod_uid");
  }
  g.created_at_ns = j.value("created_at_ns", int64_t{0});
  if (auto forget = j.find("forget_when_empty"); forget != j.end() && forget->is_boolean()) {
    g.forget_when_empty = forget->get<bool>();
  }
  return g;
}

StatusOr<Tenant> TenantFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("a tenant is not an object");
  try {
    Tenant t;
    t.host_pid = j.at("host_pid").get<pid_t>();
    t.container_pid = j.at("container_pid").get<pid_t>();
    t.start_time = j.at("start_time").get<uint64_t>();
    t.uid = j.at("uid").get<uid_t>();
    t.group = j.at("group").get<std::string>();
    t.cgroup = CgroupInfo{Str(j, "cgroup"),  Str(j, "pod_uid"), Str(j, "container_id"),
                          Str(j, "runtime"), Str(j, "qos"),     Str(j, "cgroup_v2")};
    t.hints = ClaimedHints{Str(j, "pod"), Str(j, "namespace"), Str(j, "container"),
                           Str(j, "claimed_pod_uid")};
    t.hint_conflicts = j.value("hint_conflicts", std::vector<std::string>{});
    GS_ASSIGN_OR_RETURN(t.tier, ParseTier(Str(j, "tier")));
    t.devices = j.value("devices", std::vector<std::string>{});
    if (auto r = j.find("requested_limits"); r != j.end() && r->is_object()) {
      if (r->contains("memory_bytes") || r->contains("compute_percent")) {
        // A checkpoint of before per-GPU requests: one limit for every GPU.
        GpuLimit all;
        ReadOptional(*r, "memory_bytes", all.memory_bytes);
        ReadOptional(*r, "compute_percent", all.compute_percent);
        t.requested[kAllGpus] = all;
      } else {
        for (const auto& [gpu, l] : r->items()) {
          GpuLimit limit;
          if (!l.is_object() || !ReadOptional(l, "memory_bytes", limit.memory_bytes) ||
              !ReadOptional(l, "compute_percent", limit.compute_percent)) {
            return InvalidArgument("tenant " + std::to_string(t.host_pid) +
                                   ": a malformed requested limit for " + gpu);
          }
          t.requested[gpu] = limit;
        }
      }
    }
    t.registered_at_ns = j.value("registered_at_ns", int64_t{0});
    return t;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("a malformed tenant: ") + e.what());
  }
}

}  // namespace gpuslice::daemon
