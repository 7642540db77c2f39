// The daemon's tenant registry as the CLI shows and changes it (docs/api.md
// "Tenants and groups"): the `tenants` table, `group show`, the body `group
// set` sends, and the registry's groups that `status` merges with the
// segments. Pure functions of the daemon's JSON: no socket, no output, so
// they are tested on JSON made in the test.
//
// A field the daemon leaves out or sends with another type reads as absent
// ("-" in a table), never as an exception: an older or newer daemon still
// prints.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpuslice::cli {

// One registered process, as `status` shows it beside a group's members.
struct RegisteredTenant {
  int32_t host_pid = 0;
  int32_t container_pid = 0;  // its own pid namespace's number (== host_pid outside one)
  std::string pod;            // "namespace/name" as claimed, "" when none
  std::string container;
  std::string tier;  // "shared", "mps" or "mig"
};

// A group as the registry knows it: its tier and its live tenants (by host pid).
// The enforcer of a group's limits on one GPU, per dimension (the daemon's
// "enforcer" of each of a group's GPUs; docs/backstop.md "Enforcers").
struct GroupEnforcer {
  int gpu = 0;
  std::string uuid;
  std::string memory, memory_reason;    // "driver", "limiter", "none"
  std::string compute, compute_reason;  // "mps", "limiter", "none"
};

struct RegistryGroup {
  std::string id;
  std::string tier;
  std::vector<RegisteredTenant> tenants;
  std::vector<GroupEnforcer> enforcers;  // GPUs where a dimension has an enforcer
  // A `mig` group's instance: "1g.20gb MIG-… on GPU-…"; "" for none.
  std::string mig;
};

// Groups from GET /v1/groups and GET /v1/tenants bodies, by id; a tenant whose
// group is not in `groups_body` gets a group of its own (tier from the tenant).
// kInternal when a body is not the object the daemon sends.
StatusOr<std::vector<RegistryGroup>> ParseRegistry(const nlohmann::json& tenants_body,
                                                   const nlohmann::json& groups_body);

// "prod/web-0" from a tenant's "namespace" and "pod" ("web-0" without a
// namespace, "" without a pod).
std::string PodText(const nlohmann::json& tenant);

// The `tenants` table from GET /v1/tenants's body: HOST PID, CONTAINER PID,
// GROUP, POD, CONTAINER, TIER, MEMORY (per GPU "0:1.00GiB"), SHARE (per GPU,
// percent of the GPU's SMs; "-" before the first sample). "no tenants" when
// empty.
std::string TenantsText(const nlohmann::json& body);

// `group show`: for each group (GroupView JSON: GET /v1/groups's "groups", or
// one GET /v1/groups/{id} in a list), a line with its tier, owner and member
// count (and "PAUSED" when paused), then one line per GPU with its limits
// (the "all" entry overlaid by the GPU's own), the driver's memory in use,
// and its schedule there: request, limit, priority, weight, and the
// scheduler's grant ("-" when unknown). "no groups" when empty.
std::string GroupsText(const nlohmann::json& groups);

// What `group set` was given; an empty list or tier leaves that part as is.
struct GroupSetFlags {
  std::vector<std::pair<std::string, uint64_t>> memory;   // MemoryLimitsByDevice
  std::vector<std::pair<std::string, uint32_t>> compute;  // ComputeLimitsByDevice
  std::string tier;                                       // "", "shared", "mps" or "mig"
  // Scheduling (docs/scheduling.md "Scheduling"), (device, value) as `compute`.
  std::vector<std::pair<std::string, uint32_t>> request;      // 0..100
  std::vector<std::pair<std::string, std::string>> priority;  // "latency" or "batch"
  std::vector<std::pair<std::string, uint32_t>> weight;       // 1..1000

  bool HasSchedule() const { return !request.empty() || !priority.empty() || !weight.empty(); }
};

// The body of PUT /v1/groups/{id}, which replaces a group's limits: the
// group's `current` limits (GroupJson's "limits", keyed by "all" or GPU UUID;
// null or {} for a new group) with `flags` applied, so that a flag not given
// keeps its limit:
//  - one value (device "") sets that field of "all" and clears it on every
//    GPU's own entry (one value means the same on every GPU);
//  - DEVICE=VALUE sets the field on that GPU's entry, DEVICE an index into
//    `gpu_uuids` (GET /v1/gpus's order) or a UUID, with or without "GPU-",
//    any case;
//  - "unlimited" removes the field (on one GPU: only where "all" has none,
//    else kInvalidArgument, since a GPU's entry cannot lift a limit "all"
//    sets); entries left empty are dropped.
// kInvalidArgument for a device that is not on the node.
StatusOr<nlohmann::json> GroupPutBody(const nlohmann::json& current, const GroupSetFlags& flags,
                                      const std::vector<std::string>& gpu_uuids);

// The "schedule" of PUT /v1/groups/{id}, which replaces the group's: its
// `current` schedule (GroupJson's "schedule": {"all" | UUID: {"request",
// "priority", "weight"}}; null or {} for a new group) with the request,
// priority and weight of `flags` applied as GroupPutBody applies limits (one
// value sets "all" and clears that field on every GPU's own entry; DEVICE
// an index or a UUID). kInvalidArgument for a device not on the node.
StatusOr<nlohmann::json> GroupScheduleBody(const nlohmann::json& current,
                                           const GroupSetFlags& flags,
                                           const std::vector<std::string>& gpu_uuids);

}  // namespace gpuslice::cli
