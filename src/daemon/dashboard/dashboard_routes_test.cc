#include "daemon/dashboard/dashboard_routes.h"

#include <gtest/gtest.h>

#include <string>

#include "daemon/dashboard/assets.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

std::string Header(const ApiResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

class DashboardRoutesTest : public ::testing::Test {
 protected:
  DashboardRoutesTest() {
    AddDashboardRoutes(router_, feed_, [](const Caller& c) {
      return c.token_ok ? Status::Ok() : PermissionDenied("needs a token");
    });
  }

  ApiResponse Get(const std::string& path, Caller caller = {}) {
    auto match = router_.Find("GET", path);
    if (!match.ok()) return ApiResponse::FromStatus(match.status());
    ApiRequest req{"GET", path, {}, match->params, "", caller};
    return (*match->handler)(req);
  }

  EventHub hub_;
  SimulatedClock clock_;
  DashboardFeed feed_{{}, [] { return json::object(); }, hub_, clock_, clock_};
  ApiRouter router_;
};

TEST_F(DashboardRoutesTest, ServesThePageWithItsPolicyAndVersionedAssetsForGood) {
  const ApiResponse page = Get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(Header(page, "Cache-Control"), "no-cache");
  EXPECT_EQ(Header(page, "Content-Security-Policy"), kDashboardCsp);
  EXPECT_EQ(Header(page, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(Header(page, "X-Frame-Options"), "DENY");
  EXPECT_EQ(page.body.find("@ASSETS@"), std::string::npos);
  const std::string prefix = "/dashboard/" + std::string(DashboardAssetsVersion()) + "/";
  EXPECT_NE(page.body.find(prefix + "app.js"), std::string::npos);
  EXPECT_NE(page.body.find(prefix + "uPlot.iife.min.js"), std::string::npos);

  const ApiResponse js = Get(prefix + "app.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(Header(js, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_NE(js.body.find("/v1/events"), std::string::npos);
  EXPECT_EQ(Get(prefix + "style.css").content_type, "text/css; charset=utf-8");
  EXPECT_EQ(Get(prefix + "uPlot.LICENSE.txt").content_type, "text/plain; charset=utf-8");
  if (ChartLibraryEmbedded()) {
    EXPECT_NE(Get(prefix + "uPlot.iife.min.js").body.find("uPlot"), std::string::npos);
    EXPECT_NE(Get(prefix + "uPlot.LICENSE.txt").body.find("MIT"), std::string::npos);
  }
}

TEST_F(DashboardRoutesTest, AnotherVersionOrAnUnknownFileIsNotFoundAndNotKept) {
  const std::string version(DashboardAssetsVersion());
  for (const std::string& path :
       {std::string("/dashboard/0123456789abcdef/app.js"), "/dashboard/" + version + "/nope.js",
        "/dashboard/" + version + "/index.html"}) {
    const ApiResponse r = Get(path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(Header(r, "Cache-Control"), "no-store") << path;
  }
}

TEST_F(DashboardRoutesTest, WhoamiSaysWhetherTheCallerMayChangeSettings) {
  Caller reader{1000, 1000, 7, false, false};
  json who = json::parse(Get("/v1/whoami", reader).body);
  EXPECT_EQ(who["transport"], "unix");
  EXPECT_EQ(who["uid"], 1000);
  EXPECT_EQ(who["admin"], false);
  EXPECT_EQ(who["reason"], "needs a token");
  EXPECT_FALSE(who.contains("token"));
  Caller tcp{std::nullopt, std::nullopt, std::nullopt, true, true};
  who = json::parse(Get("/v1/whoami", tcp).body);
  EXPECT_EQ(who["transport"], "tcp");
  EXPECT_TRUE(who["uid"].is_null());
  EXPECT_EQ(who["admin"], true);
  EXPECT_EQ(who["token"], true);
}

TEST_F(DashboardRoutesTest, HistoryIsTheFeeds) {
  feed_.Tick();
  const json h = json::parse(Get("/v1/dashboard/history").body);
  EXPECT_EQ(h["period_ms"], 1000);
  EXPECT_EQ(h["points"].size(), 1u);
}

}  // namespace
}  // namespace gpuslice::daemon
