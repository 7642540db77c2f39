#include "daemon/dashboard/dashboard_feed.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

constexpr int64_t kSecond = 1'000'000'000;

// A node with one GPU and one group "train" on it whose share is `share`.
json Sample(double share) {
  return {
      {"gpus", json::array({{{"index", 0},
                             {"uuid", "GPU-a"},
                             {"utilization", {{"gpu_percent", 60}}},
                             {"memory", {{"used_bytes", 100}, {"total_bytes", 1000}}},
                             {"power", {{"draw_watts", 300.5}, {"limit_watts", 700.0}}},
                             {"clocks", {{"sm_mhz", 1980}, {"memory_mhz", 2619}}}}})},
      {"groups",
       json::array({{{"id", "train"},
                     {"paused", true},
                     {"gpus", json::array({{{"uuid", "GPU-a"},
                                            {"share", share},
                                            {"grant_percent", 40.0},
                                            {"memory_used_bytes", 64},
                                            {"limit", {{"memory_bytes", nullptr}}},
                                            {"schedule", {{"limit", 40}, {"request", 10}}}}})}}})},
      {"tenants",
       json::array(
           {{{"group", "train"},
             {"gpus", json::array({{{"uuid", "GPU-a"}, {"limit", {{"memory_bytes", 512}}}}})}},
            {{"group", "train"},
             {"gpus", json::array({{{"uuid", "GPU-a"}, {"limit", {{"memory_bytes", 256}}}}})}},
            {{"group", "other"},
             {"gpus", json::array({{{"uuid", "GPU-a"}, {"limit", {{"memory_bytes", 8}}}}})}}})}};
}

class DashboardFeedTest : public ::testing::Test {
 protected:
  DashboardFeedTest() {
    subscription_ = hub_.Subscribe(
        [this](const std::shared_ptr<const std::string>& e) { events_.push_back(*e); });
  }
  ~DashboardFeedTest() override { hub_.Unsubscribe(subscription_); }

  // The data of the "sample" events published so far.
  std::vector<json> Samples() const {
    std::vector<json> out;
    for (const std::string& e : events_) {
      EXPECT_NE(e.find("event: sample\n"), std::string::npos) << e;
      const size_t data = e.find("data: ");
      out.push_back(json::parse(e.substr(data + 6)));
    }
    return out;
  }

  EventHub hub_;
  uint64_t subscription_ = 0;
  std::vector<std::string> events_;
  SimulatedClock clock_{10 * kSecond};
  SimulatedClock wall_{1'700'000'000 * kSecond};
  double share_ = 0.25;
};

TEST_F(DashboardFeedTest, SamplesOncePerPeriodAndPublishesEachWithItsPoint) {
  DashboardFeed feed(
      {.period_ns = kSecond, .history_points = 10}, [this] { return Sample(share_); }, hub_, clock_,
      wall_);
  EXPECT_EQ(feed.Tick(), kSecond);  // the first call samples at once
  clock_.Advance(kSecond / 4);
  EXPECT_EQ(feed.Tick(), 3 * kSecond / 4);  // not due: nothing taken
  ASSERT_EQ(Samples().size(), 1u);
  clock_.Advance(3 * kSecond / 4);
  wall_.Advance(kSecond);
  share_ = 0.375;
  EXPECT_EQ(feed.Tick(), kSecond);
  const std::vector<json> samples = Samples();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1]["t"], 1'700'000'001'000);
  EXPECT_EQ(samples[1]["groups"][0]["id"], "train");  // the views as the source gave them
  EXPECT_EQ(samples[1]["tenants"].size(), 3u);
  EXPECT_EQ(samples[1]["point"]["groups"]["train"]["GPU-a"]["share"], 37.5);
  EXPECT_EQ(samples[0]["point"]["groups"]["train"]["GPU-a"]["share"], 25.0);
}

TEST_F(DashboardFeedTest, HistoryKeepsTheLastPointsOldestFirst) {
  DashboardFeed feed(
      {.period_ns = kSecond, .history_points = 3}, [this] { return Sample(share_); }, hub_, clock_,
      wall_);
  for (int i = 0; i < 5; ++i) {
    share_ = i / 10.0;
    feed.Tick();
    clock_.Advance(kSecond);
    wall_.Advance(kSecond);
  }
  const json h = feed.History();
  EXPECT_EQ(h["period_ms"], 1000);
  ASSERT_EQ(h["points"].size(), 3u);
  EXPECT_EQ(h["points"][0]["t"], 1'700'000'002'000);
  EXPECT_EQ(h["points"][2]["t"], 1'700'000'004'000);
  EXPECT_DOUBLE_EQ(h["points"][2]["groups"]["train"]["GPU-a"]["share"].get<double>(), 40.0);
}

TEST_F(DashboardFeedTest, HistoryKeepsTheLastEventsButSamplesAndGpuReadings) {
  DashboardFeed feed(
      {.history_events = 2}, [this] { return Sample(share_); }, hub_, clock_, wall_);
  feed.Tick();
  hub_.Publish("gpu", R"({"index":0})");
  hub_.Publish("tenant_registered", R"({"pid":1})");
  wall_.Advance(kSecond);
  hub_.Publish("group_limits_changed", R"({"id":"train"})");
  hub_.Publish("group_paused", R"({"id":"train"})");
  const json events = feed.History()["events"];
  ASSERT_EQ(events.size(), 2u) << events.dump();
  EXPECT_EQ(events[0], json({{"t", 1'700'000'001'000},
                             {"type", "group_limits_changed"},
                             {"data", {{"id", "train"}}}}));
  EXPECT_EQ(events[1]["type"], "group_paused");
}

TEST(PointOfTest, PicksThePlottedNumbers) {
  const json p = PointOf(Sample(0.5), 42);
  EXPECT_EQ(p["t"], 42);
  const json& gpu = p["gpus"]["GPU-a"];
  EXPECT_EQ(gpu["utilization"], 60);
  EXPECT_EQ(gpu["memory_used"], 100);
  EXPECT_EQ(gpu["memory_total"], 1000);
  EXPECT_EQ(gpu["power_watts"], 300.5);
  EXPECT_EQ(gpu["sm_mhz"], 1980);
  const json& g = p["groups"]["train"]["GPU-a"];
  EXPECT_EQ(g["share"], 50.0);  // the view's fraction, as a percentage
  EXPECT_EQ(g["limit"], 40);
  EXPECT_EQ(g["request"], 10);
  EXPECT_EQ(g["grant"], 40.0);
  EXPECT_EQ(g["memory_used"], 64);
  EXPECT_EQ(g["memory_limit"], 256);  // none of the group's own: its members' lowest
  EXPECT_EQ(g["paused"], true);
}

TEST(PointOfTest, TheGroupsOwnMemoryLimitWinsAndMissingNumbersAreNull) {
  json sample = Sample(0.5);
  sample["groups"][0]["gpus"][0]["limit"]["memory_bytes"] = 1024;
  sample["groups"][0]["gpus"][0].erase("schedule");
  sample["groups"][0]["gpus"][0]["share"] = nullptr;
  const json g = PointOf(sample, 0)["groups"]["train"]["GPU-a"];
  EXPECT_EQ(g["memory_limit"], 1024);
  EXPECT_TRUE(g["limit"].is_null());
  EXPECT_TRUE(g["request"].is_null());
  EXPECT_TRUE(g["share"].is_null());
  // Not a sample at all: an empty point, no throw.
  EXPECT_EQ(PointOf(json("nonsense"), 7),
            json({{"t", 7}, {"gpus", json::object()}, {"groups", json::object()}}));
}

TEST(SampleFromRouterTest, ComposesTheApisViewsAndEmptiesOneThatFails) {
  ApiRouter router;
  router.Add("GET", "/v1/gpus", Access::kRead, [](const ApiRequest&) {
    return ApiResponse::Json(200, {{"gpus", json::array({{{"uuid", "GPU-a"}}})}});
  });
  router.Add("GET", "/v1/groups", Access::kRead,
             [](const ApiRequest&) { return ApiResponse::FromStatus(Unavailable("not now")); });
  router.Add("GET", "/v1/tenants", Access::kRead, [](const ApiRequest& req) {
    return ApiResponse::Json(200, {{"tenants", json::array({req.path})}});
  });
  const json sample = SampleFromRouter(router)();
  EXPECT_EQ(sample["gpus"], json::array({{{"uuid", "GPU-a"}}}));
  EXPECT_EQ(sample["groups"], json::array());
  EXPECT_EQ(sample["tenants"], json::array({"/v1/tenants"}));
}

}  // namespace
}  // namespace gpuslice::daemon
