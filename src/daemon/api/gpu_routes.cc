#include "daemon/api/gpu_routes.h"

#include <algorithm>
#include <cctype>
#include <future>

#include "daemon/gpu/gpu_json.h"
#include "daemon/gpu/gpu_selector.h"
#include "daemon/metrics.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

// ?wait=true|false (default true).
StatusOr<bool> WaitParam(const ApiRequest& req) {
  auto it = req.query.find("wait");
  if (it == req.query.end() || it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return InvalidArgument("wait must be true or false, not \"" + it->second + "\"");
}

json ErrorJson(const Status& s) {
  return {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}};
}

// Collects per-GPU results: 200 when all succeeded, the first error's status
// when all failed, 207 when some did. A GPU undone because another refused
// (kAborted: GpuManager rule 10) is marked "undone" and never chosen as the
// answer's error while a GPU's own refusal is there.
ApiResponse Aggregate(const std::vector<uint32_t>& gpus, const std::vector<GpuInfo>& info,
                      std::vector<std::future<Status>>& futures, json body) {
  json results = json::array();
  int ok = 0;
  Status first_error;
  for (size_t i = 0; i < gpus.size(); ++i) {
    Status s = futures[i].get();
    json r = {{"gpu", gpus[i]}, {"ok", s.ok()}};
    if (gpus[i] < info.size()) r["uuid"] = info[gpus[i]].uuid;
    if (s.ok()) {
      ++ok;
    } else {
      r["error"] = ErrorJson(s);
      const bool undone = s.code() == StatusCode::kAborted;
      if (undone) r["undone"] = true;
      if (first_error.ok() || (first_error.code() == StatusCode::kAborted && !undone)) {
        first_error = s;
      }
    }
    results.push_back(std::move(r));
  }
  body["results"] = std::move(results);
  int status = 200;
  if (ok == 0 && !gpus.empty()) {
    status = ApiResponse::FromStatus(first_error).status;
    body["error"] = ErrorJson(first_error);
  } else if (ok < static_cast<int>(gpus.size())) {
    status = 207;
  }
  return ApiResponse::Json(status, body);
}

struct LeaseRequest {
  LeaseOptions options;
  json body;
};

// The lease part of a PUT body: lease_s, permanent, holder.
StatusOr<LeaseOptions> ParseLease(const json& body, const Caller& caller,
                                  const GpuRoutesOptions& opts) {
  LeaseOptions lease;
  std::string label;
  if (auto it = body.find("holder"); it != body.end()) {
    if (!it->is_string()) return InvalidArgument("\"holder\" must be a string");
    label = it->get<std::string>();
  }
  GS_ASSIGN_OR_RETURN(lease.holder, HolderFor(caller, label));
  if (auto it = body.find("permanent"); it != body.end()) {
    if (!it->is_boolean()) return InvalidArgument("\"permanent\" must be true or false");
    lease.permanent = it->get<bool>();
  }
  int64_t lease_s = opts.default_lease_s;
  if (auto it = body.find("lease_s"); it != body.end()) {
    if (lease.permanent) return InvalidArgument(R"("lease_s" and "permanent" exclude each other)");
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 ||
        it->get<int64_t>() > opts.max_lease_s) {
      return InvalidArgument("\"lease_s\" must be an integer from 1 to " +
                             std::to_string(opts.max_lease_s) + " (seconds)");
    }
    lease_s = it->get<int64_t>();
  }
  if (!lease.permanent) lease.duration_ns = lease_s * 1'000'000'000;
  return lease;
}

ApiResponse PutSetting(const ApiRequest& req, GpuManager& manager, GpuMonitor& monitor,
                       const GpuRoutesOptions& opts) {
  auto snapshot = monitor.Current();
  auto kind = ParseSettingName(req.params.at("setting"));
  if (!kind.ok()) return ApiResponse::FromStatus(kind.status());
  auto gpus = ParseGpuIds(req.params.at("ids"), snapshot->gpus);
  if (!gpus.ok()) return ApiResponse::FromStatus(gpus.status());
  auto wait = WaitParam(req);
  if (!wait.ok()) return ApiResponse::FromStatus(wait.status());
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return ApiResponse::FromStatus(InvalidArgument("the request body is not valid JSON"));
  }
  auto value = ParseSettingValue(*kind, body);
  if (!value.ok()) return ApiResponse::FromStatus(value.status());
  auto lease = ParseLease(body, req.caller, opts);
  if (!lease.ok()) return ApiResponse::FromStatus(lease.status());
  for (uint32_t g : *gpus) {
    if (Status s = ValidateSetting(snapshot->gpus[g], *value); !s.ok()) {
      return ApiResponse::FromStatus(s);
    }
  }
  json out = {
      {"setting", SettingName(*kind)},
      {"value", SettingValueJson(*value)},
      {"holder", lease->holder},
      {"permanent", lease->permanent},
      {"lease_s", lease->duration_ns ? json(*lease->duration_ns / 1'000'000'000) : json(nullptr)}};
  auto futures = manager.Set(*gpus, *value, *lease);
  if (!*wait) {
    out["queued"] = true;
    out["gpus"] = *gpus;
    return ApiResponse::Json(202, out);
  }
  ApiResponse r = Aggregate(*gpus, snapshot->gpus, futures, std::move(out));
  monitor.Sample();  // read-your-writes for the next GET
  return r;
}

ApiResponse DeleteSetting(const ApiRequest& req, GpuManager& manager, GpuMonitor& monitor) {
  auto snapshot = monitor.Current();
  auto kind = ParseSettingName(req.params.at("setting"));
  if (!kind.ok()) return ApiResponse::FromStatus(kind.status());
  auto gpus = ParseGpuIds(req.params.at("ids"), snapshot->gpus);
  if (!gpus.ok()) return ApiResponse::FromStatus(gpus.status());
  auto wait = WaitParam(req);
  if (!wait.ok()) return ApiResponse::FromStatus(wait.status());
  auto label = req.query.find("holder");
  auto holder = HolderFor(req.caller, label == req.query.end() ? "" : label->second);
  if (!holder.ok()) return ApiResponse::FromStatus(holder.status());
  json out = {{"setting", SettingName(*kind)}, {"holder", *holder}};
  auto futures = manager.Release(*gpus, *kind, *holder);
  if (!*wait) {
    out["queued"] = true;
    out["gpus"] = *gpus;
    return ApiResponse::Json(202, out);
  }
  ApiResponse r = Aggregate(*gpus, snapshot->gpus, futures, std::move(out));
  monitor.Sample();
  return r;
}

ApiResponse GetEnergy(const ApiRequest& req, GpuManager& manager, GpuMonitor& monitor) {
  auto snapshot = monitor.Current();
  auto gpus = ParseGpuIds(req.params.at("ids"), snapshot->gpus);
  if (!gpus.ok()) return ApiResponse::FromStatus(gpus.status());
  std::vector<std::future<StatusOr<EnergyReading>>> futures;
  for (uint32_t g : *gpus) futures.push_back(manager.Energy(g));
  json list = json::array();
  for (size_t i = 0; i < gpus->size(); ++i) {
    StatusOr<EnergyReading> e = futures[i].get();
    if (!e.ok()) return ApiResponse::FromStatus(e.status());
    const uint32_t g = (*gpus)[i];
    list.push_back({{"index", g},
                    {"uuid", snapshot->gpus[g].uuid},
                    {"energy_joules", static_cast<double>(e->energy_mj) / 1000.0},
                    {"power_watts", e->power_mw / 1000.0}});
  }
  return ApiResponse::Json(200, {{"gpus", std::move(list)}});
}

json LeasesJson(const GpuManager& manager) {
  json list = json::array();
  const int64_t now = manager.clock().NowNs();
  for (const LeaseInfo& l : manager.Leases()) {
    list.push_back({{"gpu", l.gpu},
                    {"setting", SettingName(l.kind)},
                    {"holder", l.holder},
                    {"value", SettingValueJson(l.value)},
                    {"baseline", SettingValueJson(l.baseline)},
                    {"effective", l.effective},
                    {"expires_in_s", l.expires_ns ? json(std::max<int64_t>(
                                                        0, (*l.expires_ns - now) / 1'000'000'000))
                                                  : json(nullptr)}});
  }
  return {{"leases", std::move(list)}};
}

}  // namespace

StatusOr<std::vector<uint32_t>> ParseGpuIds(std::string_view ids,
                                            const std::vector<GpuInfo>& gpus) {
  std::vector<std::string> uuids;
  uuids.reserve(gpus.size());
  for (const GpuInfo& g : gpus) uuids.push_back(g.uuid);
  GS_ASSIGN_OR_RETURN(const std::vector<int> indexes, ParseGpuSelector(ids, uuids));
  std::vector<uint32_t> out;
  out.reserve(indexes.size());
  for (int i : indexes) out.push_back(gpus[static_cast<size_t>(i)].index);
  return out;
}

StatusOr<std::string> HolderFor(const Caller& caller, std::string_view label) {
  std::string holder = caller.via_tcp || !caller.uid ? "tcp" : "uid:" + std::to_string(*caller.uid);
  if (label.empty()) return holder;
  const bool valid = label.size() <= 64 && std::all_of(label.begin(), label.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' ||
                              c == '_' || c == ':' || c == '-';
                     });
  if (!valid) {
    return InvalidArgument("holder \"" + std::string(label) +
                           "\" must be 1-64 characters of [A-Za-z0-9._:-]");
  }
  return holder + "/" + std::string(label);
}

void AddGpuRoutes(ApiRouter& router, GpuManager& manager, GpuMonitor& monitor,
                  const GpuRoutesOptions& options) {
  // The process serves: 200 even with a GPU unreachable (a restart would not
  // bring it back), but "degraded" naming the GPUs whose last read failed.
  router.Add("GET", "/healthz", Access::kRead, Dispatch::kInline, [&monitor](const ApiRequest&) {
    auto snapshot = monitor.Current();
    json unreachable = json::array();
    for (size_t i = 0; i < snapshot->reads.size(); ++i) {
      if (snapshot->reads[i].failed) unreachable.push_back(i);
    }
    json body = {{"status", unreachable.empty() ? "ok" : "degraded"}};
    if (!unreachable.empty()) body["unreachable_gpus"] = std::move(unreachable);
    return ApiResponse::Json(200, body);
  });
  router.Add("GET", "/readyz", Access::kRead, Dispatch::kInline, [&monitor](const ApiRequest&) {
    const bool ready = monitor.Current()->generation > 0;
    return ApiResponse::Json(ready ? 200 : 503, {{"ready", ready}});
  });
  router.Add("GET", "/metrics", Access::kRead, Dispatch::kInline,
             [&monitor, extra = options.extra_metrics](const ApiRequest&) {
               ApiResponse r;
               r.content_type = kMetricsContentType;
               r.body = FormatMetrics(*monitor.Current());
               if (extra) r.body += extra();
               return r;
             });
  router.Add("GET", "/v1/gpus", Access::kRead, Dispatch::kInline, [&monitor](const ApiRequest&) {
    ApiResponse r;
    r.body = monitor.Current()->gpus_json;
    return r;
  });
  router.Add(
      "GET", "/v1/gpus/{ids}", Access::kRead, Dispatch::kInline, [&monitor](const ApiRequest& req) {
        auto snapshot = monitor.Current();
        auto gpus = ParseGpuIds(req.params.at("ids"), snapshot->gpus);
        if (!gpus.ok()) return ApiResponse::FromStatus(gpus.status());
        json list = json::array();
        for (uint32_t g : *gpus) {
          list.push_back(g < snapshot->reads.size() ? GpuJson(snapshot->gpus[g], snapshot->reads[g])
                                                    : GpuJson(snapshot->gpus[g]));
        }
        return ApiResponse::Json(200, {{"gpus", std::move(list)}});
      });
  router.Add(
      "GET", "/v1/gpus/{ids}/energy", Access::kRead, Dispatch::kBlocking,
      [&manager, &monitor](const ApiRequest& req) { return GetEnergy(req, manager, monitor); });
  router.Add("PUT", "/v1/gpus/{ids}/{setting}", Access::kMutate, Dispatch::kBlocking,
             [&manager, &monitor, options](const ApiRequest& req) {
               return PutSetting(req, manager, monitor, options);
             });
  router.Add(
      "DELETE", "/v1/gpus/{ids}/{setting}", Access::kMutate, Dispatch::kBlocking,
      [&manager, &monitor](const ApiRequest& req) { return DeleteSetting(req, manager, monitor); });
  router.Add("GET", "/v1/leases", Access::kRead, Dispatch::kInline,
             [&manager](const ApiRequest&) { return ApiResponse::Json(200, LeasesJson(manager)); });
}

}  // namespace gpuslice::daemon
