#include "daemon/mps/mps_routes.h"

#include <set>

#include "common/quantity.h"

namespace gpuslice::daemon::mps {
namespace {

using json = nlohmann::json;

// The request body as a JSON object whose keys are all in `allowed`.
StatusOr<json> ParseBody(const std::string& body, const std::set<std::string>& allowed) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidArgument("the request body is not JSON");
  if (!parsed.is_object()) return InvalidArgument("the request body must be a JSON object");
  for (const auto& [key, value] : parsed.items()) {
    if (!allowed.contains(key)) return InvalidArgument("unknown field '" + key + "'");
  }
  return parsed;
}

StatusOr<std::string> RequiredString(const json& body, const std::string& key) {
  if (!body.contains(key)) return InvalidArgument("'" + key + "' is required");
  if (!body[key].is_string()) return InvalidArgument("'" + key + "' must be a string");
  return body[key].get<std::string>();
}

// A GPU list: a string ("0,1", a UUID) or one index as a number.
StatusOr<std::string> GpuField(const json& body, const std::string& key) {
  if (body.contains(key) && body[key].is_number_unsigned()) {
    return std::to_string(body[key].get<uint64_t>());
  }
  auto text = RequiredString(body, key);
  if (!text.ok()) {
    return InvalidArgument("'" + key + "' must be a GPU index, UUID, or a comma-separated list");
  }
  return text;
}

StatusOr<TenantSettings> ParseSettings(const json& body) {
  TenantSettings s;
  if (body.contains("active_thread_percentage")) {
    const json& v = body["active_thread_percentage"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 100) {
      return InvalidArgument("'active_thread_percentage' must be an integer 1-100, not " +
                             v.dump());
    }
    s.active_thread_percentage = v.get<uint32_t>();
  }
  if (body.contains("pinned_memory_limit")) {
    const json& v = body["pinned_memory_limit"];
    if (v.is_number_unsigned()) {
      s.pinned_memory_limit = v.get<uint64_t>();
    } else if (v.is_string()) {
      auto bytes = ParseBytes(v.get<std::string>());
      if (!bytes.ok()) return bytes.status().WithContext("'pinned_memory_limit'");
      s.pinned_memory_limit = *bytes;
    } else {
      return InvalidArgument("'pinned_memory_limit' must be a quantity (\"4G\") or bytes, not " +
                             v.dump());
    }
  }
  if (body.contains("client_priority")) {
    const json& v = body["client_priority"];
    if (!v.is_number_integer()) {
      return InvalidArgument("'client_priority' must be 0 or 1, not " + v.dump());
    }
    s.client_priority = static_cast<int>(std::clamp<int64_t>(v.get<int64_t>(), -1, 2));
  }
  if (body.contains("sm_partition_percent")) {
    const json& v = body["sm_partition_percent"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 100) {
      return InvalidArgument("'sm_partition_percent' must be an integer 1-100, not " + v.dump());
    }
    s.sm_partition_percent = v.get<uint32_t>();
  }
  GS_RETURN_IF_ERROR(ValidateSettings(s));
  return s;
}

json SettingsJson(const TenantSettings& s) {
  json j = json::object();
  if (s.active_thread_percentage) j["active_thread_percentage"] = *s.active_thread_percentage;
  if (s.pinned_memory_limit) j["pinned_memory_limit"] = *s.pinned_memory_limit;
  if (s.client_priority) j["client_priority"] = *s.client_priority;
  if (s.sm_partition_percent) j["sm_partition_percent"] = *s.sm_partition_percent;
  return j;
}

json AcquireJson(const std::string& tenant, const AcquireResult& r) {
  json j = {{"tenant", tenant}, {"tier", TierName(r.tier)}, {"env", r.env}};
  if (!r.reason.empty()) j["reason"] = r.reason;
  json gpus = json::array();
  for (const GpuEnv& g : r.per_gpu) {
    gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"env", g.env}});
  }
  j["gpus"] = gpus;
  return j;
}

}  // namespace

ApiResponse HandleStatus(MpsManager& manager, const ApiRequest& /*request*/) {
  const MpsStatus s = manager.GetStatus();
  json gpus = json::array();
  for (const GpuMpsStatus& g : s.gpus) {
    json gpu = {{"index", g.index},
                {"uuid", g.uuid},
                {"running", g.running},
                {"control_pid", g.control_pid},
                {"pipe_dir", g.pipe_dir},
                {"log_dir", g.log_dir},
                {"previous_compute_mode", ComputeModeName(g.previous_compute_mode)},
                {"tenants", g.tenants},
                {"health", HealthName(g.health)},
                {"restarts", g.restarts}};
    if (!g.last_error.empty()) gpu["last_error"] = g.last_error;
    gpu["sm_partitions"] = g.sm_partitions;  // tenant -> SMs (MPS v3)
    gpus.push_back(std::move(gpu));
  }
  json body = {{"available", s.available},
               {"protocol", s.protocol},
               {"control_binary", s.control_binary},
               {"root", s.root},
               {"gpus", gpus},
               {"state_save_failures", s.save_failures}};
  if (!s.last_save_error.empty()) body["last_state_save_error"] = s.last_save_error;
  if (!s.available) body["reason"] = s.reason;
  return ApiResponse::Json(200, body);
}

ApiResponse HandleTenants(MpsManager& manager, const ApiRequest& /*request*/) {
  json tenants = json::array();
  for (const TenantInfo& t : manager.Tenants()) {
    json tenant = {{"name", t.name},
                   {"tier", TierName(t.tier)},
                   {"gpus", t.gpus},
                   {"uuids", t.uuids},
                   {"settings", SettingsJson(t.settings)}};
    if (!t.reason.empty()) tenant["reason"] = t.reason;
    tenants.push_back(std::move(tenant));
  }
  return ApiResponse::Json(200, {{"tenants", tenants}});
}

ApiResponse HandleAcquire(MpsManager& manager, const ApiRequest& request) {
  auto body =
      ParseBody(request.body, {"tenant", "gpus", "active_thread_percentage", "pinned_memory_limit",
                               "client_priority", "sm_partition_percent"});
  if (!body.ok()) return ApiResponse::FromStatus(body.status());
  auto tenant = RequiredString(*body, "tenant");
  if (!tenant.ok()) return ApiResponse::FromStatus(tenant.status());
  auto gpus = GpuField(*body, "gpus");
  if (!gpus.ok()) return ApiResponse::FromStatus(gpus.status());
  auto settings = ParseSettings(*body);
  if (!settings.ok()) return ApiResponse::FromStatus(settings.status());
  auto result = manager.Acquire({*tenant, *gpus, *settings});
  if (!result.ok()) return ApiResponse::FromStatus(result.status());
  return ApiResponse::Json(200, AcquireJson(*tenant, *result));
}

ApiResponse HandleRelease(MpsManager& manager, const ApiRequest& request) {
  auto body = ParseBody(request.body, {"tenant"});
  if (!body.ok()) return ApiResponse::FromStatus(body.status());
  auto tenant = RequiredString(*body, "tenant");
  if (!tenant.ok()) return ApiResponse::FromStatus(tenant.status());
  Status released = manager.Release(*tenant);
  if (!released.ok()) return ApiResponse::FromStatus(released);
  return ApiResponse::Json(200, {{"tenant", *tenant}, {"released", true}});
}

ApiResponse HandleSettings(MpsManager& manager, const ApiRequest& request) {
  auto param = request.params.find("tenant");
  if (param == request.params.end()) {
    return ApiResponse::FromStatus(InvalidArgument("no tenant in the path"));
  }
  auto body = ParseBody(request.body.empty() ? "{}" : request.body,
                        {"active_thread_percentage", "pinned_memory_limit", "client_priority",
                         "sm_partition_percent"});
  if (!body.ok()) return ApiResponse::FromStatus(body.status());
  auto settings = ParseSettings(*body);
  if (!settings.ok()) return ApiResponse::FromStatus(settings.status());
  auto result = manager.UpdateSettings(param->second, *settings);
  if (!result.ok()) return ApiResponse::FromStatus(result.status());
  return ApiResponse::Json(200, AcquireJson(param->second, *result));
}

ApiResponse HandleTerminate(MpsManager& manager, const ApiRequest& request) {
  auto body = ParseBody(request.body, {"gpu", "client_pid"});
  if (!body.ok()) return ApiResponse::FromStatus(body.status());
  auto gpu = GpuField(*body, "gpu");
  if (!gpu.ok()) return ApiResponse::FromStatus(gpu.status());
  const json pid = body->value("client_pid", json());
  if (!pid.is_number_integer() || pid.get<int64_t>() <= 0 || pid.get<int64_t>() > INT32_MAX) {
    return ApiResponse::FromStatus(InvalidArgument("'client_pid' must be a positive pid"));
  }
  Status done = manager.TerminateClient(*gpu, static_cast<pid_t>(pid.get<int64_t>()));
  if (!done.ok()) return ApiResponse::FromStatus(done);
  return ApiResponse::Json(200, {{"gpu", *gpu}, {"client_pid", pid}, {"terminated", true}});
}

void RegisterMpsRoutes(ApiRouter& router, MpsManager& manager) {
  using Fn = ApiResponse (*)(MpsManager&, const ApiRequest&);
  auto bind = [&manager](Fn fn) {
    return [&manager, fn](const ApiRequest& request) { return fn(manager, request); };
  };
  router.Add("GET", "/v1/mps", Access::kRead, bind(HandleStatus));
  router.Add("GET", "/v1/mps/tenants", Access::kRead, bind(HandleTenants));
  router.Add("POST", "/v1/mps/acquire", Access::kMutate, bind(HandleAcquire));
  router.Add("POST", "/v1/mps/release", Access::kMutate, bind(HandleRelease));
  router.Add("POST", "/v1/mps/tenants/{tenant}/settings", Access::kMutate, bind(HandleSettings));
  router.Add("POST", "/v1/mps/terminate", Access::kMutate, bind(HandleTerminate));
}

}  // namespace gpuslice::daemon::mps
