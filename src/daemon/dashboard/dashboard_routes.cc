#include "daemon/dashboard/dashboard_routes.h"

#include <string>
#include <utility>

#include "daemon/dashboard/assets.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

const DashboardAsset* FindAsset(std::string_view name) {
  for (const DashboardAsset& a : DashboardAssets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

ApiResponse Serve(const DashboardAsset& asset, std::string cache_control) {
  ApiResponse r;
  r.content_type = std::string(asset.content_type);
  r.body = std::string(asset.body);
  r.headers = {{"Cache-Control", std::move(cache_control)}, {"X-Content-Type-Options", "nosniff"}};
  return r;
}

ApiResponse NotFoundAsset(const std::string& what) {
  ApiResponse r = ApiResponse::FromStatus(NotFound("no dashboard file " + what));
  r.headers = {{"Cache-Control", "no-store"}, {"X-Content-Type-Options", "nosniff"}};
  return r;
}

}  // namespace

void AddDashboardRoutes(ApiRouter& router, const DashboardFeed& feed,
                        std::function<Status(const Caller&)> may_change) {
  router.Add("GET", "/", Access::kRead, Dispatch::kInline, [](const ApiRequest&) {
    const DashboardAsset* index = FindAsset("index.html");
    if (index == nullptr) return NotFoundAsset("index.html");
    ApiResponse r = Serve(*index, "no-cache");
    r.headers.emplace_back("Content-Security-Policy", kDashboardCsp);
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    r.headers.emplace_back("X-Frame-Options", "DENY");
    return r;
  });
  router.Add("GET", "/dashboard/{version}/{name}", Access::kRead, Dispatch::kInline,
             [](const ApiRequest& req) {
               const std::string& name = req.params.at("name");
               const DashboardAsset* asset = FindAsset(name);
               // An old page's URL: a 404 it does not keep, rather than today's file.
               if (req.params.at("version") != DashboardAssetsVersion() || asset == nullptr ||
                   name == "index.html") {
                 return NotFoundAsset(req.path);
               }
               return Serve(*asset, "public, max-age=31536000, immutable");
             });
  router.Add("GET", "/v1/dashboard/history", Access::kRead, Dispatch::kInline,
             [&feed](const ApiRequest&) { return ApiResponse::Json(200, feed.History()); });
  router.Add("GET", "/v1/whoami", Access::kRead, Dispatch::kInline,
             [may_change = std::move(may_change)](const ApiRequest& req) {
               const Caller& c = req.caller;
               const Status s = may_change ? may_change(c) : PermissionDenied("no authoriser");
               json out = {{"transport", c.via_tcp ? "tcp" : "unix"},
                           {"uid", c.uid ? json(*c.uid) : json(nullptr)},
                           {"admin", s.ok()},
                           {"reason", s.ok() ? "" : s.message()}};
               if (c.via_tcp) out["token"] = c.token_ok;
               return ApiResponse::Json(200, out);
             });
}

}  // namespace gpuslice::daemon
