// The JSON of the registry's records: what the API shows (docs/api.md
// "Tenants and groups") and what the state store keeps (records "groups"
// and "tenants"; DESIGN.md section 4, "Durability"). A record read back
// equals the one written; a malformed one is kInvalidArgument saying what.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "daemon/groups/group_schedule.h"
#include "daemon/tenants/registry_types.h"

namespace gpuslice::daemon {

nlohmann::json GpuLimitJson(const GpuLimit& limit);
// {key: GpuLimitJson} for each key of `limits`.
nlohmann::json LimitsJson(const Limits& limits);
// {"request": N, "priority": "latency", "weight": W}, unset fields left out.
nlohmann::json ScheduleEntryJson(const ScheduleEntry& entry);
// The effective values on one GPU: {"request", "limit", "priority", "weight", "paused"}.
nlohmann::json GroupScheduleJson(const GroupSchedule& schedule);
nlohmann::json GroupJson(const Group& group);
nlohmann::json TenantJson(const Tenant& tenant);
StatusOr<Group> GroupFromJson(const nlohmann::json& j);
StatusOr<Tenant> TenantFromJson(const nlohmann::json& j);

}  // namespace gpuslice::daemon
