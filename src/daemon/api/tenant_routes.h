// The tenants-and-groups part of the API (docs/api.md "Tenants and
// groups"): registration, the tenant list with the driver's per-process
// usage, and group limits. Registered on an ApiRouter by AddTenantRoutes.
//
// Who may do what:
//  - POST /v1/tenants: on the Unix socket a process registers itself (the
//    daemon takes its pid from SO_PEERCRED; a "pid" in the body must be that
//    process, as the host or its own pid namespace numbers it). Over TCP a
//    bearer token is needed and the body must name a host pid that exists.
//  - DELETE /v1/tenants/{pid}: the tenant itself (same pid or uid) or an admin.
//  - PUT and DELETE /v1/groups/{id}, POST /v1/groups/{id}/pause|resume:
//    admins only (the server checks).
//  - Every GET: anyone who reaches the socket.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "daemon/api/api.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/group_tiers.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

struct TenantRoutesOptions {
  // Whether the caller is root, in the admin group, or a TCP client with a
  // valid token (the server's Authorize for a mutating route).
  std::function<bool(const Caller&)> is_admin;
  std::string proc_root = "/proc";  // to read the container pid of a Unix caller
  // Grants the tier a group asks for (MPS for `mps` groups). Null: no MPS
  // here, every tenant runs `shared` (an `mps` group's say why).
  GroupTiers* tiers = nullptr;
  // What gpusliced's group control says of `group` on GPU `uuid`
  // (GroupControllers::ShareOf); null or nullopt: nothing (shown as null).
  struct Share {
    std::optional<uint32_t> grant_bp;  // the scheduler's grant; nullopt: not scheduled
    int32_t share_bp = -1;             // what the group ran over the last second; -1: unknown
  };
  std::function<std::optional<Share>(const std::string& group, const std::string& uuid)> share_of;
  // The enforcer of `group`'s limits on GPU `uuid`, per dimension
  // (EnforcerChoiceJson); null or a null result: unknown (shown as null).
  std::function<nlohmann::json(const std::string& group, const std::string& uuid)> enforcer_of;
  // How many holders of `group`'s ledger lock were evicted for holding it
  // past the deadline (GroupSnapshot::ledger_evictions); null or nullopt:
  // the daemon does not see the group's segment (shown as null).
  std::function<std::optional<uint64_t>(const std::string& group)> ledger_evictions_of;
};

// A registration's reply carries the tier granted ("tier", "tier_reason",
// "env", "mps_gpus"); tenant and group views carry "tier_granted" and
// "tier_reason" beside the tier the group asks for ("tier").
//
// Registers POST/GET /v1/tenants, DELETE /v1/tenants/{pid}, GET /v1/groups,
// GET/PUT/DELETE /v1/groups/{id}, POST /v1/groups/{id}/pause|resume. PUT's
// "limits" and "schedule" each replace the group's when present and leave
// them as they are when absent; a schedule that would put a GPU's requests
// above 100 is 409 with code "request_overcommit", a request above the
// group's compute limit 400. A registration's "schedule" that is not
// applied is named in the reply's "schedule_refused". REQUIRES: the arguments outlive the router.
void AddTenantRoutes(ApiRouter& router, TenantRegistry& registry, const GpuMonitor& monitor,
                     const GpuUsageCache& usage, const TenantRoutesOptions& options);

}  // namespace gpuslice::daemon
