// The scheduling part of the tenant routes (docs/api.md
// "Scheduling parameters"): PUT /v1/groups/{id} "schedule", the 409 of an overcommit,
// the 400 of a request above the limit, pause/resume, a registration's
// schedule, the group views and the metrics.
#include <gtest/gtest.h>

#include "daemon/api/tenant_routes_fixture.h"
#include "daemon/tenants/tenant_metrics.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;
using namespace std::string_literals;

class TenantScheduleRoutesTest : public TenantRoutesFixture {
 protected:
  void SetUp() override {
    registry_.SetNodeGpus([this] {
      std::vector<std::string> uuids;
      for (const GpuInfo& g : monitor_.Current()->gpus) uuids.push_back(g.uuid);
      return uuids;
    });
    TenantRoutesOptions options;
    options.is_admin = [](const Caller& c) { return c.uid && *c.uid == 0; };
    options.share_of = [](const std::string& group,
                          const std::string& uuid) -> std::optional<TenantRoutesOptions::Share> {
      if (group == "g" && uuid == "GPU-fake-0") {
        return TenantRoutesOptions::Share{.grant_bp = 4550, .share_bp = -1};
      }
      return std::nullopt;
    };
    Install(options);
  }
};

TEST_F(TenantScheduleRoutesTest, PutSetsTheScheduleAndGetShowsTheEffectiveValuesPerGpu) {
  ASSERT_EQ(Call("PUT", "/v1/groups/g", R"({"limits": {"all": {"compute_percent": 80}}})").status,
            200);
  auto put = Call("PUT", "/v1/groups/g", R"({"schedule": {
      "all": {"request": 30, "priority": "latency", "weight": 2}, "1": {"request": 10}}})");
  ASSERT_EQ(put.status, 200) << put.body;
  json g = Body(put);
  EXPECT_EQ(g["schedule"]["all"], json::parse(R"({"request":30,"priority":"latency","weight":2})"));
  EXPECT_EQ(g["schedule"]["GPU-fake-1"], json::parse(R"({"request":10})"));  // index -> UUID
  EXPECT_EQ(g["limits"]["all"]["compute_percent"], 80);  // no "limits": the limits stay
  EXPECT_EQ(g["paused"], false);
  EXPECT_EQ(EventTypes(),
            (std::vector<std::string>{"group_limits_changed", "group_schedule_changed"}));

  json view = Body(Call("GET", "/v1/groups/g", ""));
  EXPECT_EQ(view["gpus"][0]["schedule"],
            json::parse(R"({"request":30,"limit":80,"priority":"latency","weight":2,
                            "paused":false})"));
  EXPECT_EQ(view["gpus"][0]["grant_percent"], 45.5);
  EXPECT_EQ(view["gpus"][1]["schedule"]["request"], 10);
  EXPECT_EQ(view["gpus"][1]["grant_percent"], nullptr);
  json list = Body(Call("GET", "/v1/groups", ""))["groups"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["gpus"][1]["schedule"]["priority"], "latency");

  // "limits" alone leaves the schedule.
  ASSERT_EQ(Call("PUT", "/v1/groups/g", R"({"limits": {}})").status, 200);
  EXPECT_EQ(Body(Call("GET", "/v1/groups/g", ""))["schedule"]["all"]["request"], 30);

  usage_.Refresh(ReadProcesses(backend_, *monitor_.Current(), std::nullopt));
  const std::string metrics = FormatTenantMetrics(registry_, *usage_.Current(), nullptr);
  const std::string labels = R"({group="g",pod="",namespace="",gpu="0",uuid="GPU-fake-0"})";
  EXPECT_NE(metrics.find("gpuslice_group_compute_request_ratio" + labels + " 0.3\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_group_schedule_weight" + labels + " 2\n"), std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_group_latency_priority" + labels + " 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_group_schedule_limit_ratio" + labels + " 1\n"),
            std::string::npos);  // the limits were cleared above
  EXPECT_NE(metrics.find(R"(gpuslice_group_paused{group="g",pod="",namespace=""} 0)"),
            std::string::npos);
}

TEST_F(TenantScheduleRoutesTest, AnOvercommitIs409NamingTheGpuAndTheTotal) {
  ASSERT_EQ(Call("PUT", "/v1/groups/a", R"({"schedule": {"all": {"request": 60}}})").status, 200);
  auto over = Call("PUT", "/v1/groups/b", R"({"schedule": {"0": {"request": 50}}})");
  ASSERT_EQ(over.status, 409) << over.body;
  EXPECT_EQ(Body(over)["code"], "request_overcommit");
  json e = Body(over)["error"];
  EXPECT_EQ(e["code"], "request_overcommit");
  const std::string message = e["message"];
  EXPECT_NE(message.find("GPU GPU-fake-0"), std::string::npos) << message;
  EXPECT_NE(message.find("now 60% requested"), std::string::npos) << message;
  EXPECT_NE(message.find("40% is left"), std::string::npos) << message;
  EXPECT_EQ(Call("GET", "/v1/groups/b", "").status, 404);  // not created
  // On the other GPU it fits.
  EXPECT_EQ(Call("PUT", "/v1/groups/b", R"({"schedule": {"1": {"request": 40}}})").status, 200);
}

TEST_F(TenantScheduleRoutesTest, BadSchedulesAre400) {
  ASSERT_EQ(Call("PUT", "/v1/groups/g", R"({"limits": {"all": {"compute_percent": 40}}})").status,
            200);
  auto above = Call("PUT", "/v1/groups/g", R"({"schedule": {"all": {"request": 50}}})");
  EXPECT_EQ(above.status, 400);
  EXPECT_NE(Body(above)["error"]["message"].get<std::string>().find("above its compute limit"),
            std::string::npos)
      << above.body;
  for (const char* body : {
           R"({"schedule": {"all": {"request": 101}}})",
           R"({"schedule": {"all": {"request": -1}}})",
           R"({"schedule": {"all": {"weight": 0}}})",
           R"({"schedule": {"all": {"weight": 1001}}})",
           R"({"schedule": {"all": {"priority": "urgent"}}})",
           R"({"schedule": {"all": {"limit": 50}}})",
           R"({"schedule": {"7": {"request": 5}}})",
           R"({"schedule": [1]})",
       }) {
    auto r = Call("PUT", "/v1/groups/g", body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
  }
  EXPECT_TRUE(registry_.GroupOf("g")->schedule.empty());
}

TEST_F(TenantScheduleRoutesTest, PauseAndResumeAreAdminRoutesAndShowInTheViews) {
  EXPECT_EQ(router_.Find("POST", "/v1/groups/g/pause")->access, Access::kMutate);
  EXPECT_EQ(router_.Find("POST", "/v1/groups/g/resume")->access, Access::kMutate);
  EXPECT_EQ(Call("POST", "/v1/groups/g/pause", "").status, 404);
  ASSERT_EQ(Call("PUT", "/v1/groups/g", "{}").status, 200);
  events_.clear();
  auto paused = Call("POST", "/v1/groups/g/pause", "");
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_EQ(Body(paused), json::parse(R"({"group":"g","paused":true})"));
  json view = Body(Call("GET", "/v1/groups/g", ""));
  EXPECT_EQ(view["paused"], true);
  EXPECT_EQ(view["gpus"][1]["schedule"]["paused"], true);
  EXPECT_NE(FormatTenantMetrics(registry_, *usage_.Current(), nullptr)
                .find(R"(gpuslice_group_paused{group="g",pod="",namespace=""} 1)"),
            std::string::npos);
  auto resumed = Call("POST", "/v1/groups/g/resume", "");
  ASSERT_EQ(resumed.status, 200);
  EXPECT_EQ(Body(resumed)["paused"], false);
  EXPECT_EQ(Body(Call("GET", "/v1/groups/g", ""))["paused"], false);
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"group_paused", "group_resumed"}));
}

TEST_F(TenantScheduleRoutesTest, ARegistrationsScheduleIsAppliedOrRefusedInTheReply) {
  auto first = Call("POST", "/v1/tenants",
                    R"({"group": "train", "devices": [0], "schedule": {"request": 20,
                        "priority": "latency", "weight": 3}})",
                    Unix(100, 1000));
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_FALSE(Body(first).contains("schedule_refused"));
  EXPECT_EQ(Body(first)["group"]["schedule"]["GPU-fake-0"],
            json::parse(R"({"request":20,"priority":"latency","weight":3})"));
  json view = Body(Call("GET", "/v1/groups/train", ""));
  EXPECT_EQ(view["gpus"][0]["schedule"]["request"], 20);
  EXPECT_EQ(view["gpus"][1]["schedule"]["request"], 0);  // not its GPU
  auto second = Call("POST", "/v1/tenants", R"({"group": "train", "schedule": {"request": 50}})",
                     Unix(101, 1000));
  ASSERT_EQ(second.status, 201) << second.body;
  EXPECT_NE(Body(second)["schedule_refused"].get<std::string>().find("exists"), std::string::npos)
      << second.body;
  EXPECT_EQ(
      Call("POST", "/v1/tenants", R"({"group": "x", "schedule": {"weight": 0}})", Unix(100, 1000))
          .status,
      400);
}

}  // namespace
}  // namespace gpuslice::daemon
