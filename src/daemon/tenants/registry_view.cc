#include "daemon/tenants/registry_view.h"

#include <algorithm>
#include <utility>

namespace gpuslice::daemon {

GroupControl ControlOfGroup(const Group& group, const std::vector<const Tenant*>& members) {
  GroupControl control{.host_pids = {}, .limits = group.limits, .requested = {}};
  for (const Tenant* t : members) {
    control.host_pids.push_back(t->host_pid);
    control.requested = LowerLimits(control.requested, t->requested);
  }
  return control;
}

GroupSchedule EffectiveSchedule(const Group& group, const GroupControl& control,
                                const std::string& uuid) {
  const ScheduleEntry entry = ScheduleEntryOn(group.schedule, uuid);
  GroupSchedule out;
  out.limit_percent =
      std::clamp<uint32_t>(control.LimitOn(uuid).compute_percent.value_or(100), 1, 100);
  out.request_percent = std::min(entry.request_percent.value_or(0), out.limit_percent);
  out.priority = entry.priority.value_or(Priority::kBatch);
  out.weight = std::clamp<uint32_t>(entry.weight.value_or(1), 1, 1000);
  out.paused = group.paused;
  return out;
}

std::map<std::string, GpuLimit> EffectiveLimitsOf(const Tenant& tenant, const Group* group) {
  std::map<std::string, GpuLimit> out;
  for (const std::string& uuid : tenant.devices) {
    out[uuid] = Lower(group != nullptr ? LimitOn(group->limits, uuid) : GpuLimit{},
                      LimitOn(tenant.requested, uuid));
  }
  return out;
}

RegistryView RegistryView::Of(uint64_t version, std::map<pid_t, Tenant> tenants,
                              std::map<std::string, Group> groups) {
  RegistryView view{.version = version,
                    .tenants = std::move(tenants),
                    .groups = std::move(groups),
                    .control = {}};
  std::map<std::string, std::vector<const Tenant*>> members;
  for (const auto& [pid, t] : view.tenants) members[t.group].push_back(&t);
  for (const auto& [id, g] : view.groups) {
    auto m = members.find(id);
    view.control.emplace(
        id, ControlOfGroup(g, m == members.end() ? std::vector<const Tenant*>{} : m->second));
  }
  return view;
}

std::vector<const Tenant*> RegistryView::MembersOf(const std::string& id) const {
  std::vector<const Tenant*> out;
  auto it = control.find(id);
  if (it == control.end()) return out;
  out.reserve(it->second.host_pids.size());
  for (int32_t pid : it->second.host_pids) out.push_back(&tenants.at(pid));
  return out;
}

std::optional<std::string> RegistryView::GroupOf(uint32_t pid) const {
  auto it = tenants.find(static_cast<pid_t>(pid));
  if (it == tenants.end()) return std::nullopt;
  return it->second.group;
}

std::optional<uint64_t> RegistryView::StartTimeOf(uint32_t pid) const {
  auto it = tenants.find(static_cast<pid_t>(pid));
  if (it == tenants.end()) return std::nullopt;
  return it->second.start_time;
}

std::optional<GpuLimit> RegistryView::LimitOf(const std::string& id,
                                              const std::string& uuid) const {
  auto it = control.find(id);
  if (it == control.end()) return std::nullopt;
  return it->second.LimitOn(uuid);
}

std::optional<GroupSchedule> RegistryView::ScheduleOn(const std::string& id,
                                                      const std::string& uuid) const {
  auto g = groups.find(id);
  if (g == groups.end()) return std::nullopt;
  return EffectiveSchedule(g->second, control.at(id), uuid);
}

std::map<std::string, GpuLimit> RegistryView::EffectiveLimits(const Tenant& tenant) const {
  auto g = groups.find(tenant.group);
  return EffectiveLimitsOf(tenant, g == groups.end() ? nullptr : &g->second);
}

}  // namespace gpuslice::daemon
