// RegistryView: the tenant registry at one instant (TenantRegistry::TakeView,
// one lock), for the consumers that read it once per tick or per request
// instead of asking group by group: the backstops and the enforcers on every
// GPU sample, the group controllers on every control tick, the tier manager,
// the metrics and the API's listings. Everything one consumer decides in one
// pass then comes from the same instant: no group is seen with tenants that
// another read of the same pass no longer has.
//
// A view is a copy: what changes after it was taken is not in it. The
// answers are the registry's own rules (registry.h), written once here and
// used by the registry's per-group calls too.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/groups/group_schedule.h"
#include "daemon/tenants/registry_types.h"

namespace gpuslice::daemon {

// What the registry says of one group's limits: the group's and its
// tenants' own.
struct GroupControl {
  std::vector<int32_t> host_pids;  // its tenants, ascending
  Limits limits;                   // the group's
  Limits requested;                // its tenants' own limits, the tightest on each GPU

  // The group's limit on GPU `uuid`, lowered by its tenants' own.
  GpuLimit LimitOn(const std::string& uuid) const {
    return Lower(daemon::LimitOn(limits, uuid), daemon::LimitOn(requested, uuid));
  }
};

// The control of `group` whose tenants are `members`.
GroupControl ControlOfGroup(const Group& group, const std::vector<const Tenant*>& members);

// How `group`, whose control is `control`, shares GPU `uuid` (registry rule
// 4): its limit is its compute limit lowered by its tenants' (1..100, 100
// when none), its request never above that limit, weight 1..1000.
GroupSchedule EffectiveSchedule(const Group& group, const GroupControl& control,
                                const std::string& uuid);

// Tenant `tenant`'s limit on each of its devices: `group`'s (null: none),
// lowered by its own.
std::map<std::string, GpuLimit> EffectiveLimitsOf(const Tenant& tenant, const Group* group);

struct RegistryView {
  // The registry's change count when the view was taken: of two views, the
  // one with the higher version is the newer (equal: the same records).
  uint64_t version = 0;
  std::map<pid_t, Tenant> tenants;              // by host pid
  std::map<std::string, Group> groups;          // every group, with or without tenants
  std::map<std::string, GroupControl> control;  // one per group, by id

  // Builds the view of these records (the registry does, under its lock).
  static RegistryView Of(uint64_t version, std::map<pid_t, Tenant> tenants,
                         std::map<std::string, Group> groups);

  // Group `id`'s tenants, by host pid; empty for an unknown group.
  std::vector<const Tenant*> MembersOf(const std::string& id) const;
  // The group of the tenant with host pid `pid`; nullopt: no tenant.
  std::optional<std::string> GroupOf(uint32_t pid) const;
  // The registered start time of the tenant with host pid `pid`
  // (/proc/<pid>/stat field 22); nullopt: no tenant.
  std::optional<uint64_t> StartTimeOf(uint32_t pid) const;
  // Group `id`'s limit on GPU `uuid`, lowered by its tenants' own;
  // nullopt: no such group.
  std::optional<GpuLimit> LimitOf(const std::string& id, const std::string& uuid) const;
  // As TenantRegistry::ScheduleOn; nullopt: no such group.
  std::optional<GroupSchedule> ScheduleOn(const std::string& id, const std::string& uuid) const;
  // As TenantRegistry::EffectiveLimits.
  std::map<std::string, GpuLimit> EffectiveLimits(const Tenant& tenant) const;
};

}  // namespace gpuslice::daemon
