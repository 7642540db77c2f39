#include "daemon/api/tenant_routes.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "common/log.h"
#include "common/quantity.h"
#include "daemon/api/gpu_routes.h"
#include "daemon/tenants/identity.h"
#include "daemon/tenants/tcp_peer.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

Status UnknownFields(const json& obj, const std::set<std::string>& known,
                     const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    if (!known.contains(key)) {
      std::string message = "unknown field \"";
      message += where;
      message += key;
      message += '"';
      return InvalidArgument(message);
    }
  }
  return Status::Ok();
}

// {"memory_bytes": N} or {"memory": N | "8GiB"}, {"compute_percent": P} or
// {"compute": P | "50%"}; `where` prefixes field names in errors.
StatusOr<GpuLimit> ParseLimit(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument("\"" + where + "\" must be an object");
  GS_RETURN_IF_ERROR(
      UnknownFields(j, {"memory_bytes", "memory", "compute_percent", "compute"}, where + "."));
  GpuLimit limit;
  for (const char* key : {"memory_bytes", "memory"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (it->is_number_unsigned()) {
      limit.memory_bytes = it->get<uint64_t>();
    } else if (it->is_string() && std::string(key) == "memory") {
      auto bytes = ParseBytes(it->get<std::string>());
      if (!bytes.ok())
        return InvalidArgument("\"" + where + ".memory\": " + bytes.status().message());
      limit.memory_bytes = *bytes;
    } else {
      return InvalidArgument("\"" + where + "." + key + "\" must be a number of bytes" +
                             (std::string(key) == "memory" ? " or a quantity like \"8GiB\"" : ""));
    }
  }
  for (const char* key : {"compute_percent", "compute"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    StatusOr<uint32_t> p = InvalidArgument("");
    if (it->is_number_unsigned() && it->get<uint64_t>() >= 1 && it->get<uint64_t>() <= 100) {
      p = static_cast<uint32_t>(it->get<uint64_t>());
    } else if (it->is_string() && std::string(key) == "compute") {
      p = ParsePercent(it->get<std::string>());
    }
    if (!p.ok() || *p < 1) {
      return InvalidArgument("\"" + where + "." + key + "\" must be a percentage from 1 to 100");
    }
    limit.compute_percent = *p;
  }
  return limit;
}

// {"request": 0..100, "priority": "latency" | "batch", "weight": 1..1000},
// every field optional; `where` prefixes field names in errors.
StatusOr<ScheduleEntry> ParseScheduleEntry(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument("\"" + where + "\" must be an object");
  GS_RETURN_IF_ERROR(
      UnknownFields(j, {"request", "priority", "weight", "memory_request"}, where + "."));
  ScheduleEntry entry;
  if (auto it = j.find("memory_request"); it != j.end() && !it->is_null()) {
    if (it->is_number_unsigned()) {
      entry.memory_request_bytes = it->get<uint64_t>();
    } else if (it->is_string()) {
      auto bytes = ParseBytes(it->get<std::string>());
      if (!bytes.ok()) {
        return InvalidArgument("\"" + where + ".memory_request\": " + bytes.status().message());
      }
      entry.memory_request_bytes = *bytes;
    } else {
      return InvalidArgument("\"" + where +
                             ".memory_request\" must be a number of bytes or a quantity like "
                             "\"8GiB\"");
    }
  }
  if (auto it = j.find("request"); it != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() > 100) {
      return InvalidArgument("\"" + where + ".request\" must be a percentage from 0 to 100");
    }
    entry.request_percent = static_cast<uint32_t>(it->get<uint64_t>());
  }
  if (auto it = j.find("priority"); it != j.end() && !it->is_null()) {
    auto p = it->is_string() ? ParsePriority(it->get<std::string>())
                             : StatusOr<Priority>(InvalidArgument("a string"));
    if (!p.ok()) {
      return InvalidArgument("\"" + where + R"(.priority" must be "latency" or "batch")");
    }
    entry.priority = *p;
  }
  if (auto it = j.find("weight"); it != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() < 1 || it->get<uint64_t>() > 1000) {
      return InvalidArgument("\"" + where + ".weight\" must be from 1 to 1000");
    }
    entry.weight = static_cast<uint32_t>(it->get<uint64_t>());
  }
  return entry;
}

// The UUID a key of "limits" or "schedule" names ("all" stays "all").
StatusOr<std::string> GpuKey(const std::string& key, const std::string& where,
                             const Snapshot& snapshot) {
  if (key == kAllGpus) return key;
  auto ids = ParseGpuIds(key, snapshot.gpus);
  if (!ids.ok() || ids->size() != 1) {
    return InvalidArgument("\"" + where + "." + key +
                           R"(": name one GPU (an index or a UUID) or "all")");
  }
  return snapshot.gpus[ids->front()].uuid;
}

// A limit's fields ({"memory", "compute_percent", ...}): the keys of the
// single form, which no GPU key can be.
bool IsLimitField(const std::string& key) {
  return key == "memory_bytes" || key == "memory" || key == "compute_percent" || key == "compute";
}

// A registration's own limits: one for every GPU ({"memory": "8GiB",
// "compute_percent": 50}), or by GPU ({"GPU-…": {...}, "1": {...}, "all":
// {...}}). The two forms do not mix.
Status ParseRegistrationLimits(const json& j, const Snapshot& snapshot, Registration& reg) {
  if (!j.is_object()) {
    return InvalidArgument(
        "\"limits\" must be an object: {\"memory\", \"compute_percent\"} for every GPU, or "
        "{GPU UUID | index | \"all\": {\"memory\", \"compute_percent\"}}");
  }
  bool single = false;
  for (const auto& [key, value] : j.items()) single = single || IsLimitField(key);
  if (single || j.empty()) {
    GS_ASSIGN_OR_RETURN(reg.limits, ParseLimit(j, "limits"));
    return Status::Ok();
  }
  for (const auto& [key, value] : j.items()) {
    auto gpu = GpuKey(key, "limits", snapshot);
    if (!gpu.ok()) {
      return InvalidArgument("unknown field \"limits." + key +
                             R"(": neither a limit (memory, compute_percent) nor one GPU )"
                             R"((an index or a UUID) nor "all")");
    }
    GS_ASSIGN_OR_RETURN(GpuLimit limit, ParseLimit(value, "limits." + key));
    reg.gpu_limits[*gpu] = Lower(reg.gpu_limits[*gpu], limit);
  }
  return Status::Ok();
}

// Devices as the client names them (UUIDs, indexes as numbers or strings);
// none or an empty list: every GPU.
StatusOr<std::vector<std::string>> ParseDevices(const json& body, const Snapshot& snapshot) {
  std::vector<std::string> out;
  auto it = body.find("devices");
  if (it == body.end() || it->is_null() || (it->is_array() && it->empty())) {
    for (const GpuInfo& g : snapshot.gpus) out.push_back(g.uuid);
    return out;
  }
  if (!it->is_array()) return InvalidArgument("\"devices\" must be a list of GPU UUIDs or indexes");
  for (const json& d : *it) {
    std::string id;
    if (d.is_number_unsigned()) {
      id = std::to_string(d.get<uint64_t>());
    } else if (d.is_string()) {
      id = d.get<std::string>();
    } else {
      return InvalidArgument("\"devices\" must be a list of GPU UUIDs or indexes");
    }
    auto gpus = ParseGpuIds(id, snapshot.gpus);
    if (!gpus.ok()) return InvalidArgument("\"devices\": " + gpus.status().message());
    for (uint32_t g : *gpus) {
      if (std::find(out.begin(), out.end(), snapshot.gpus[g].uuid) == out.end()) {
        out.push_back(snapshot.gpus[g].uuid);
      }
    }
  }
  return out;
}

StatusOr<ClaimedHints> ParseHints(const json& body) {
  ClaimedHints h;
  auto it = body.find("hints");
  if (it == body.end() || it->is_null()) return h;
  if (!it->is_object()) return InvalidArgument("\"hints\" must be an object");
  GS_RETURN_IF_ERROR(
      UnknownFields(*it, {"pod_name", "pod_namespace", "container_name", "pod_uid"}, "hints."));
  for (auto [key, field] :
       {std::pair{"pod_name", &h.pod_name}, std::pair{"pod_namespace", &h.pod_namespace},
        std::pair{"container_name", &h.container_name}, std::pair{"pod_uid", &h.pod_uid}}) {
    auto v = it->find(key);
    if (v == it->end() || v->is_null()) continue;
    if (!v->is_string() || v->get<std::string>().size() > 253) {
      return InvalidArgument(std::string("\"hints.") + key + "\" must be a string (at most 253)");
    }
    *field = v->get<std::string>();
  }
  return h;
}

// Which process a registration is for (see the header's rules).
StatusOr<Registration> WhoRegisters(const ApiRequest& req, const json& body,
                                    const TenantRoutesOptions& options) {
  Registration reg;
  std::optional<int64_t> named;
  if (auto it = body.find("pid"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > INT32_MAX) {
      return InvalidArgument("\"pid\" must be a positive integer");
    }
    named = it->get<int64_t>();
  }
  if (req.caller.via_tcp) {
    if (!req.caller.token_ok) {
      return PermissionDenied("registering over TCP needs a valid bearer token");
    }
    if (!named) return InvalidArgument("\"pid\" is required over TCP (the host pid to register)");
    reg.pid = static_cast<pid_t>(*named);
    // Not on the token's word: the pid must hold this very connection.
    const Caller& c = req.caller;
    if (!c.tcp_client || !c.tcp_server ||
        !HoldsTcpConnection(options.proc_root, reg.pid, *c.tcp_client, *c.tcp_server)) {
      const std::string from = c.tcp_client ? EndpointText(*c.tcp_client) : "an unknown address";
      GS_LOG(kWarn, "gpusliced", "event=registration_refused reason=pid_not_proven pid=%d from=%s",
             static_cast<int>(reg.pid), from.c_str());
      return PermissionDenied("pid " + std::to_string(reg.pid) +
                              " does not hold this connection (" + from +
                              "): over TCP a process registers only itself, as on the Unix socket");
    }
    return reg;  // the registry identifies it
  }
  if (!req.caller.pid || *req.caller.pid <= 0 || !req.caller.uid) {
    return PermissionDenied("the caller could not be identified (no SO_PEERCRED)");
  }
  reg.pid = *req.caller.pid;
  reg.uid = req.caller.uid;
  if (named && *named != reg.pid) {
    // The client may number itself in its own pid namespace.
    auto id = IdentifyProcess(options.proc_root, reg.pid);
    if (!id.ok() || id->container_pid != *named) {
      return PermissionDenied("a client on the Unix socket can only register itself (pid " +
                              std::to_string(reg.pid) + "), not pid " + std::to_string(*named));
    }
  }
  return reg;
}

json LimitsByGpu(const std::map<std::string, GpuLimit>& limits) {
  json out = json::object();
  for (const auto& [uuid, l] : limits) out[uuid] = GpuLimitJson(l);
  return out;
}

ApiResponse PostTenant(const ApiRequest& req, TenantRegistry& registry, const GpuMonitor& monitor,
                       const TenantRoutesOptions& options) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return ApiResponse::FromStatus(InvalidArgument("the request body is not valid JSON"));
  }
  if (!body.is_object()) {
    return ApiResponse::FromStatus(InvalidArgument("the request body must be a JSON object"));
  }
  if (Status s = UnknownFields(
          body, {"group", "devices", "tier", "limits", "hints", "pid", "schedule"}, "");
      !s.ok()) {
    return ApiResponse::FromStatus(s);
  }
  auto group = body.find("group");
  if (group == body.end() || !group->is_string()) {
    return ApiResponse::FromStatus(InvalidArgument("\"group\" is required (a string)"));
  }
  auto snapshot = monitor.Current();
  auto reg = WhoRegisters(req, body, options);
  if (!reg.ok()) return ApiResponse::FromStatus(reg.status());
  reg->group = group->get<std::string>();
  auto devices = ParseDevices(body, *snapshot);
  if (!devices.ok()) return ApiResponse::FromStatus(devices.status());
  reg->devices = std::move(*devices);
  if (auto tier = body.find("tier"); tier != body.end() && !tier->is_null()) {
    if (!tier->is_string())
      return ApiResponse::FromStatus(InvalidArgument("\"tier\" must be a string"));
    auto t = ParseTier(tier->get<std::string>());
    if (!t.ok())
      return ApiResponse::FromStatus(InvalidArgument("\"tier\": " + t.status().message()));
    reg->tier = *t;
  }
  if (auto limits = body.find("limits"); limits != body.end() && !limits->is_null()) {
    if (Status s = ParseRegistrationLimits(*limits, *snapshot, *reg); !s.ok()) {
      return ApiResponse::FromStatus(s);
    }
  }
  if (auto schedule = body.find("schedule"); schedule != body.end() && !schedule->is_null()) {
    auto entry = ParseScheduleEntry(*schedule, "schedule");
    if (!entry.ok()) return ApiResponse::FromStatus(entry.status());
    reg->schedule = *entry;
  }
  auto hints = ParseHints(body);
  if (!hints.ok()) return ApiResponse::FromStatus(hints.status());
  reg->hints = std::move(*hints);
  // docs/mps.md "Tiers": while MPS runs on a GPU it is EXCLUSIVE_PROCESS, so
  // `shared` and other groups' `mps` cannot meet on one GPU; refuse, naming
  // the groups in the way.
  if (options.tiers != nullptr) {
    const std::optional<Group> g = registry.GroupOf(reg->group);
    const Tier tier = reg->tier.value_or(g ? g->tier : Tier::kShared);
    if (Status s = options.tiers->CheckPlacement(reg->group, tier, reg->devices); !s.ok()) {
      return ApiResponse::FromStatus(s);
    }
  }
  std::string schedule_refused;
  auto tenant = registry.Register(*reg, &schedule_refused);
  if (!tenant.ok()) return ApiResponse::FromStatus(tenant.status());
  GroupTiers::Grant grant;
  if (options.tiers != nullptr) {
    grant = options.tiers->GrantFor(*tenant);
  } else if (tenant->tier == Tier::kMps) {
    grant.reason = "this daemon does not manage MPS";
  } else if (tenant->tier == Tier::kMig) {
    grant.refusal = FailedPrecondition("this daemon does not manage MIG");
  }
  // A `mig` group without its instance has nowhere to run (docs/mig.md):
  // the registration is undone and refused with the reason.
  if (!grant.refusal.ok()) {
    (void)registry.Unregister(tenant->host_pid);
    return ApiResponse::FromStatus(FailedPrecondition(grant.refusal.message()));
  }
  json out = {{"tenant", TenantJson(*tenant)},
              {"effective_limits", LimitsByGpu(registry.EffectiveLimits(*tenant))},
              {"tier", TierName(grant.tier)},
              {"tier_reason", grant.reason},
              {"env", grant.env},
              {"mps_gpus", json::array()}};
  for (const mps::GpuEnv& e : grant.per_gpu) {
    out["mps_gpus"].push_back({{"index", e.index}, {"uuid", e.uuid}, {"env", e.env}});
  }
  if (grant.mig) out["mig"] = MigGrantJson(*grant.mig);
  if (auto g = registry.GroupOf(tenant->group)) out["group"] = GroupJson(*g);
  if (!schedule_refused.empty()) out["schedule_refused"] = schedule_refused;
  return ApiResponse::Json(201, out);
}

// What `group` ran of GPU `uuid` over the last second, a fraction (the
// scheduler's figure, docs/scheduling.md "Evidence"), or null when nothing
// says.
json GroupShare(const std::string& group, const std::string& uuid,
                const TenantRoutesOptions& options) {
  if (!options.share_of) return nullptr;
  const auto share = options.share_of(group, uuid);
  if (!share || share->share_bp < 0) return nullptr;
  return share->share_bp / 10000.0;
}

// A tenant with what the driver says it uses on each GPU: its record's JSON
// (`text`, TenantJson serialised) with "gpus" added, appended to `out`. Its
// share of a GPU is its group's (GroupShare) when it is the group's only
// member (`members_of`: live tenants per group); nothing is measured per
// process of a group.
void AppendTenantView(const Tenant& t, const std::string& text,
                      const std::map<std::string, Group>& groups,
                      const std::map<std::string, GroupTiers::GroupGrant>& grants,
                      const std::map<std::string, int>& members_of,
                      const std::vector<GpuUsage>& usage, const TenantRoutesOptions& options,
                      std::string& out) {
  auto group = groups.find(t.group);
  GroupTiers::Grant tier;
  if (group != groups.end()) {
    auto grant = grants.find(t.group);
    tier = GroupTiers::Describe(
        t, group->second, grant == grants.end() ? std::nullopt : std::optional(grant->second));
  }
  json gpus = json::array();
  for (const GpuUsage& u : usage) {
    const bool declared = std::find(t.devices.begin(), t.devices.end(), u.uuid) != t.devices.end();
    auto mem = u.memory_bytes.find(static_cast<uint32_t>(t.host_pid));
    if (!declared && mem == u.memory_bytes.end()) continue;
    auto members = members_of.find(t.group);
    const json share = members != members_of.end() && members->second == 1
                           ? GroupShare(t.group, u.uuid, options)
                           : json(nullptr);
    // As TenantRegistry::EffectiveLimits: the group's, lowered by the tenant's own.
    const GpuLimit limit =
        Lower(group == groups.end() ? GpuLimit{} : LimitOn(group->second.limits, u.uuid),
              LimitOn(t.requested, u.uuid));
    gpus.push_back(
        {{"index", u.index},
         {"uuid", u.uuid},
         {"memory_used_bytes", mem == u.memory_bytes.end() ? json(0) : json(mem->second)},
         {"share", share},
         {"limit", declared ? GpuLimitJson(limit) : GpuLimitJson(GpuLimit{})}});
  }
  out.append(text, 0, text.size() - 1);  // the record without its closing '}'
  out += ",\"gpus\":";
  out += gpus.dump();
  out += ",\"tier_granted\":";
  out += json(TierName(tier.tier)).dump();
  out += ",\"tier_reason\":";
  out += json(tier.reason).dump();
  out += '}';
}

json GroupView(const Group& g, const RegistryView& registry, const std::vector<GpuUsage>& usage,
               const TenantRoutesOptions& options) {
  const GroupTiers* tiers = options.tiers;
  json j = GroupJson(g);
  // The tier its members run on: for an `mps` group, what the MPS tenant
  // gives (null while it holds none: no member).
  j["tier_granted"] = TierName(Tier::kShared);
  j["tier_reason"] = "";
  j["mps_gpus"] = json::array();
  if (g.tier == Tier::kMig) {
    auto grant = tiers != nullptr ? tiers->GroupState(g.id) : std::nullopt;
    j["tier_granted"] = grant ? json(TierName(grant->tier)) : json(nullptr);
    j["tier_reason"] = grant ? grant->reason : "no MIG instance is held for the group (no member)";
    j["mig"] = grant && grant->mig ? MigGrantJson(*grant->mig) : json(nullptr);
  }
  if (g.tier == Tier::kMps) {
    auto grant = tiers != nullptr ? tiers->GroupState(g.id) : std::nullopt;
    if (grant) {
      j["tier_granted"] = TierName(grant->tier);
      j["tier_reason"] = grant->reason;
      j["mps_gpus"] = grant->uuids;
    } else {
      j["tier_granted"] = nullptr;
      j["tier_reason"] = tiers != nullptr ? "no MPS tenant is held for the group (no member)"
                                          : "this daemon does not manage MPS";
    }
  }
  const std::vector<const Tenant*> members = registry.MembersOf(g.id);
  json pids = json::array();
  for (const Tenant* t : members) pids.push_back(t->host_pid);
  j["members"] = std::move(pids);
  const std::optional<uint64_t> evictions =
      options.ledger_evictions_of ? options.ledger_evictions_of(g.id) : std::nullopt;
  j["ledger_evictions"] = evictions ? json(*evictions) : json(nullptr);
  json gpus = json::array();
  for (const GpuUsage& u : usage) {
    uint64_t used = 0;
    for (const Tenant* t : members) {
      if (auto m = u.memory_bytes.find(static_cast<uint32_t>(t->host_pid));
          m != u.memory_bytes.end()) {
        used += m->second;
      }
    }
    gpus.push_back({{"index", u.index},
                    {"uuid", u.uuid},
                    {"memory_used_bytes", used},
                    {"share", GroupShare(g.id, u.uuid, options)},
                    {"limit", GpuLimitJson(LimitOn(g.limits, u.uuid))}});
    // The scheduler's inputs on this GPU, and what it last granted.
    json& view = gpus.back();
    auto schedule = registry.ScheduleOn(g.id, u.uuid);
    view["schedule"] = schedule ? GroupScheduleJson(*schedule) : json(nullptr);
    std::optional<uint32_t> grant_bp;
    if (options.share_of) {
      if (auto share = options.share_of(g.id, u.uuid)) grant_bp = share->grant_bp;
    }
    view["grant_percent"] = grant_bp ? json(*grant_bp / 100.0) : json(nullptr);
    view["enforcer"] = options.enforcer_of ? options.enforcer_of(g.id, u.uuid) : json(nullptr);
  }
  j["gpus"] = std::move(gpus);
  return j;
}

// A refusal of the registry as the API answers it: an overcommit of the
// requests on a GPU is 409 with code "request_overcommit" (in "error", as
// every error's, and at the top level, as issue 13's contract has it).
ApiResponse GroupRefusal(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) {
    return ApiResponse::Json(409,
                             {{"error", {{"code", "request_overcommit"}, {"message", s.message()}}},
                              {"code", "request_overcommit"}});
  }
  return ApiResponse::FromStatus(s);
}

ApiResponse PutGroup(const ApiRequest& req, TenantRegistry& registry, const GpuMonitor& monitor) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return ApiResponse::FromStatus(InvalidArgument("the request body must be a JSON object"));
  }
  if (Status s = UnknownFields(body, {"limits", "tier", "schedule"}, ""); !s.ok()) {
    return ApiResponse::FromStatus(s);
  }
  auto snapshot = monitor.Current();
  TenantRegistry::GroupChange change;
  if (auto it = body.find("limits"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return ApiResponse::FromStatus(
          InvalidArgument("\"limits\" must be an object: {\"all\" | GPU index | UUID: {\"memory\", "
                          "\"compute_percent\"}}"));
    }
    Limits limits;
    for (const auto& [gpu, value] : it->items()) {
      auto limit = ParseLimit(value, "limits." + gpu);
      if (!limit.ok()) return ApiResponse::FromStatus(limit.status());
      auto key = GpuKey(gpu, "limits", *snapshot);
      if (!key.ok()) return ApiResponse::FromStatus(key.status());
      limits[*key] = *limit;
    }
    change.limits = std::move(limits);
  }
  if (auto it = body.find("schedule"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return ApiResponse::FromStatus(
          InvalidArgument("\"schedule\" must be an object: {\"all\" | GPU index | UUID: "
                          "{\"request\", \"priority\", \"weight\"}}"));
    }
    ScheduleSettings schedule;
    for (const auto& [gpu, value] : it->items()) {
      auto entry = ParseScheduleEntry(value, "schedule." + gpu);
      if (!entry.ok()) return ApiResponse::FromStatus(entry.status());
      auto key = GpuKey(gpu, "schedule", *snapshot);
      if (!key.ok()) return ApiResponse::FromStatus(key.status());
      schedule[*key] = *entry;
    }
    change.schedule = std::move(schedule);
  }
  if (auto it = body.find("tier"); it != body.end() && !it->is_null()) {
    auto t = it->is_string() ? ParseTier(it->get<std::string>())
                             : StatusOr<Tier>(InvalidArgument("\"tier\" must be a string"));
    if (!t.ok())
      return ApiResponse::FromStatus(InvalidArgument("\"tier\": " + t.status().message()));
    change.tier = *t;
  }
  auto g = registry.UpdateGroup(req.params.at("id"), change);
  if (!g.ok()) return GroupRefusal(g.status());
  return ApiResponse::Json(200, GroupJson(*g));
}

}  // namespace

void AddTenantRoutes(ApiRouter& router, TenantRegistry& registry, const GpuMonitor& monitor,
                     const GpuUsageCache& usage, const TenantRoutesOptions& options) {
  // Registration waits for the checkpoint (fsync): a worker thread. Anyone
  // who reaches the socket may register itself (Access::kRead at the server).
  router.Add("POST", "/v1/tenants", Access::kRead, Dispatch::kBlocking,
             [&registry, &monitor, options](const ApiRequest& req) {
               return PostTenant(req, registry, monitor, options);
             });
  router.Add("GET", "/v1/tenants", Access::kRead, Dispatch::kBlocking,
             [&registry, &monitor, &usage, options](const ApiRequest& req) {
               const auto u = UsageOfEach(*monitor.Current(), *usage.Current());
               auto group = req.query.find("group");
               std::map<std::string, Group> groups;
               for (Group& g : registry.Groups()) groups.emplace(g.id, std::move(g));
               const auto grants = options.tiers != nullptr
                                       ? options.tiers->GroupStates()
                                       : std::map<std::string, GroupTiers::GroupGrant>{};
               std::map<std::string, int> members_of;
               for (const Tenant& t : registry.Tenants()) ++members_of[t.group];
               ApiResponse r;
               r.body = "{\"tenants\":[";
               for (const auto& [t, text] : registry.TenantsWithJson()) {
                 if (group != req.query.end() && t.group != group->second) continue;
                 if (r.body.back() != '[') r.body += ',';
                 AppendTenantView(t, text, groups, grants, members_of, u, options, r.body);
               }
               r.body += "]}";
               return r;
             });
  router.Add("DELETE", "/v1/tenants/{pid}", Access::kRead, Dispatch::kBlocking,
             [&registry, options](const ApiRequest& req) {
               const std::string& text = req.params.at("pid");
               pid_t pid = 0;
               auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
               if (ec != std::errc() || end != text.data() + text.size() || pid <= 0) {
                 return ApiResponse::FromStatus(InvalidArgument("\"" + text + "\" is not a pid"));
               }
               auto tenant = registry.TenantOf(pid);
               if (!tenant) {
                 return ApiResponse::FromStatus(NotFound("no tenant with pid " + text));
               }
               const Caller& c = req.caller;
               const bool self =
                   !c.via_tcp && ((c.pid && *c.pid == pid) || (c.uid && *c.uid == tenant->uid));
               if (!self && !(options.is_admin && options.is_admin(c))) {
                 return ApiResponse::FromStatus(PermissionDenied(
                     "only the tenant itself (pid or uid " + std::to_string(tenant->uid) +
                     ") or an admin may unregister pid " + text));
               }
               if (Status s = registry.Unregister(pid); !s.ok()) return ApiResponse::FromStatus(s);
               return ApiResponse::Json(200, {{"unregistered", pid}, {"group", tenant->group}});
             });
  router.Add("GET", "/v1/groups", Access::kRead, Dispatch::kBlocking,
             [&registry, &monitor, &usage, options](const ApiRequest&) {
               const auto u = UsageOfEach(*monitor.Current(), *usage.Current());
               const RegistryView view = registry.TakeView();  // one instant for every group
               json list = json::array();
               for (const auto& [id, g] : view.groups) {
                 list.push_back(GroupView(g, view, u, options));
               }
               return ApiResponse::Json(200, {{"groups", std::move(list)}});
             });
  router.Add("GET", "/v1/groups/{id}", Access::kRead, Dispatch::kBlocking,
             [&registry, &monitor, &usage, options](const ApiRequest& req) {
               const std::string& id = req.params.at("id");
               const RegistryView view = registry.TakeView();
               auto g = view.groups.find(id);
               if (g == view.groups.end()) {
                 return ApiResponse::FromStatus(NotFound("no group \"" + id + "\""));
               }
               const auto u = UsageOfEach(*monitor.Current(), *usage.Current());
               return ApiResponse::Json(200, GroupView(g->second, view, u, options));
             });
  router.Add(
      "PUT", "/v1/groups/{id}", Access::kMutate, Dispatch::kBlocking,
      [&registry, &monitor](const ApiRequest& req) { return PutGroup(req, registry, monitor); });
  // Pause and resume: the flag is checkpointed, the daemon's scheduler sets
  // it in the group's segment (launches wait there; memory is kept).
  for (const bool pause : {true, false}) {
    router.Add("POST", pause ? "/v1/groups/{id}/pause" : "/v1/groups/{id}/resume", Access::kMutate,
               Dispatch::kBlocking, [&registry, pause](const ApiRequest& req) {
                 auto g = registry.SetPaused(req.params.at("id"), pause);
                 if (!g.ok()) return ApiResponse::FromStatus(g.status());
                 return ApiResponse::Json(200, {{"group", g->id}, {"paused", g->paused}});
               });
  }
  router.Add("DELETE", "/v1/groups/{id}", Access::kMutate, Dispatch::kBlocking,
             [&registry](const ApiRequest& req) {
               const std::string& id = req.params.at("id");
               if (Status s = registry.ForgetGroup(id); !s.ok()) return ApiResponse::FromStatus(s);
               return ApiResponse::Json(200, {{"forgotten", id}});
             });
}

}  // namespace gpuslice::daemon
