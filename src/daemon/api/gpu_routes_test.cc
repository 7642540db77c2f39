#include "daemon/api/gpu_routes.h"

#include <gtest/gtest.h>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

class GpuRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    monitor_.Sample();
    AddGpuRoutes(router_, manager_, monitor_, GpuRoutesOptions{});
  }

  ApiResponse Call(const std::string& method, const std::string& path, const std::string& body = "",
                   std::map<std::string, std::string> query = {}) {
    auto m = router_.Find(method, path);
    if (!m.ok()) return ApiResponse::FromStatus(m.status());
    ApiRequest req{method, path, std::move(query), m->params, body, Caller{0, 0, 1, false, false}};
    return (*m->handler)(req);
  }
  static json Body(const ApiResponse& r) { return json::parse(r.body); }

  FakeBackend backend_{2};
  SimulatedClock clock_;
  GpuManager manager_{backend_, clock_};
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000)};
  ApiRouter router_;
};

TEST_F(GpuRoutesTest, ListsGpusFromTheSnapshot) {
  auto r = Call("GET", "/v1/gpus");
  ASSERT_EQ(r.status, 200);
  json b = Body(r);
  ASSERT_EQ(b["gpus"].size(), 2u);
  EXPECT_EQ(b["gpus"][1]["uuid"], "GPU-fake-1");
  EXPECT_EQ(b["gpus"][0]["power"]["limit_watts"], 700.0);
  EXPECT_EQ(b["gpus"][0]["mps"], "off");
  EXPECT_EQ(b["gpus"][0]["compute_mode"], "DEFAULT");
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/GPU-FAKE-1"))["gpus"][0]["index"], 1);
}

TEST_F(GpuRoutesTest, PutWaitsAndAggregatesPerGpuResults) {
  auto r = Call("PUT", "/v1/gpus/all/power-limit", R"({"watts": 300, "lease_s": 60})");
  EXPECT_EQ(r.status, 200);
  json b = Body(r);
  ASSERT_EQ(b["results"].size(), 2u);
  EXPECT_EQ(b["results"][0]["ok"], true);
  EXPECT_EQ(b["results"][1]["ok"], true);
  EXPECT_EQ(b["lease_s"], 60);
  EXPECT_EQ(b["holder"], "uid:0");
  // The snapshot was refreshed: a GET sees the change.
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/1"))["gpus"][0]["power"]["limit_watts"], 300.0);
}

TEST_F(GpuRoutesTest, OneGpuRefusingUndoesTheOthersAndAnswersItsError) {
  backend_.FailSets(1, PermissionDenied("nvmlDeviceSetPowerManagementLimit: No permission"));
  auto r = Call("PUT", "/v1/gpus/all/power-limit", R"({"watts": 300, "lease_s": 60})");
  EXPECT_EQ(r.status, 403);
  json b = Body(r);
  EXPECT_EQ(b["error"]["code"], "PERMISSION_DENIED");
  ASSERT_EQ(b["results"].size(), 2u);
  EXPECT_EQ(b["results"][0]["ok"], false);
  EXPECT_EQ(b["results"][0]["undone"], true);
  EXPECT_EQ(b["results"][0]["error"]["code"], "ABORTED");
  EXPECT_EQ(b["results"][1]["ok"], false);
  EXPECT_FALSE(b["results"][1].contains("undone"));
  EXPECT_EQ(b["results"][1]["error"]["code"], "PERMISSION_DENIED");
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/0"))["gpus"][0]["power"]["limit_watts"], 700.0);
  EXPECT_EQ(Body(Call("GET", "/v1/leases"))["leases"].size(), 0u);
}

TEST_F(GpuRoutesTest, AllFailedTakesTheErrorsStatus) {
  backend_.FailSets(0, PermissionDenied("no"));
  auto r = Call("PUT", "/v1/gpus/0/persistence", R"({"enabled": true})");
  EXPECT_EQ(r.status, 403);
}

TEST_F(GpuRoutesTest, ALeaseThatCannotBeSavedAnswers503AndChangesNothing) {
  SimulatedClock wall(1'790'000'000'000'000'000);
  bool disk_ok = false;
  manager_.SetPersistence(LeasePersistence{
      [&disk_ok](const json&) { return disk_ok ? Status::Ok() : Unavailable("disk full"); },
      &wall});
  auto r = Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 60})");
  EXPECT_EQ(r.status, 503);
  json b = Body(r);
  EXPECT_EQ(b["error"]["code"], "UNAVAILABLE");
  EXPECT_NE(b["error"]["message"].get<std::string>().find("could not be saved"), std::string::npos)
      << b.dump();
  EXPECT_TRUE(backend_.Calls().empty());
  EXPECT_TRUE(Body(Call("GET", "/v1/leases"))["leases"].empty());
  // A release that cannot be saved keeps the lease.
  disk_ok = true;
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 60})").status, 200);
  disk_ok = false;
  EXPECT_EQ(Call("DELETE", "/v1/gpus/0/power-limit").status, 503);
  EXPECT_EQ(Body(Call("GET", "/v1/leases"))["leases"].size(), 1u);
  EXPECT_EQ(backend_.Read(0)->power_limit_mw, 300'000u);
}

TEST_F(GpuRoutesTest, NoWaitAnswers202) {
  auto r = Call("PUT", "/v1/gpus/0,1/compute-mode", R"({"mode": "EXCLUSIVE_PROCESS"})",
                {{"wait", "false"}});
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(Body(r)["queued"], true);
  // The commands run on their own; energy reads queue behind them.
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  ASSERT_TRUE(manager_.Energy(1).get().ok());
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kExclusiveProcess);
}

TEST_F(GpuRoutesTest, MalformedRequestsAre4xxAndChangeNothing) {
  struct Case {
    std::string method, path, body;
    int status;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"PUT", "/v1/gpus/0/power-limit", "{watts: 3", 400, "not valid JSON"},
           {"PUT", "/v1/gpus/0/power-limit", R"({"watts": 1000})", 400, "200-700 W"},
           {"PUT", "/v1/gpus/5/power-limit", R"({"watts": 300})", 404, "no GPU 5"},
           {"PUT", "/v1/gpus/GPU-nope/power-limit", R"({"watts": 300})", 404, "GPU-nope"},
           {"PUT", "/v1/gpus/0/fan-speed", R"({"rpm": 3})", 400, "unknown setting"},
           {"PUT", "/v1/gpus/0,,1/power-limit", R"({"watts": 300})", 400, "empty GPU id"},
           {"PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": -1})", 400, "lease_s"},
           {"PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 5, "permanent": true})",
            400, "exclude"},
           {"PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "holder": "a b"})", 400, "holder"},
           {"DELETE", "/v1/gpus/0/power-limit", "", 404, "holds no power-limit lease"},
           {"POST", "/v1/gpus/0/power-limit", "", 409, "method not allowed"},
       }) {
    auto r = Call(c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body << ": " << r.body;
    EXPECT_NE(r.body.find(c.message), std::string::npos) << r.body;
  }
  EXPECT_TRUE(backend_.Calls().empty());
  EXPECT_TRUE(manager_.Leases().empty());
}

TEST_F(GpuRoutesTest, DeleteReleasesAndReverts) {
  ASSERT_EQ(Call("PUT", "/v1/gpus/1/gpu-clocks", R"({"min_mhz": 900, "max_mhz": 1200})").status,
            200);
  EXPECT_EQ(Body(Call("GET", "/v1/leases"))["leases"].size(), 1u);
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/1"))["gpus"][0]["clocks"]["locked_gpu"]["max_mhz"], 1200);
  ASSERT_EQ(Call("DELETE", "/v1/gpus/1/gpu-clocks").status, 200);
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/1"))["gpus"][0]["clocks"]["locked_gpu"], nullptr);
  EXPECT_EQ(Body(Call("GET", "/v1/leases"))["leases"].size(), 0u);
}

TEST_F(GpuRoutesTest, EnergyAndHealth) {
  backend_.Mutate(0, [](GpuInfo& g) { g.energy_mj = 5000; });
  json b = Body(Call("GET", "/v1/gpus/0/energy"));
  EXPECT_EQ(b["gpus"][0]["energy_joules"], 5.0);
  EXPECT_EQ(b["gpus"][0]["power_watts"], 70.0);
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  auto m = Call("GET", "/metrics");
  EXPECT_EQ(m.content_type.rfind("text/plain", 0), 0u);
  EXPECT_NE(m.body.find("gpuslice_gpu_power_watts{gpu=\"1\""), std::string::npos);
}

TEST_F(GpuRoutesTest, AnUnreachableGpuIsSaidSoByTheListHealthAndMetricsUntilItIsReadAgain) {
  backend_.FailReads(1, true);  // NVML_ERROR_GPU_IS_LOST on GPU 1
  monitor_.Sample();
  monitor_.Sample();
  json gpus = Body(Call("GET", "/v1/gpus"))["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["reachable"], true);
  EXPECT_EQ(gpus[0]["read_error"], nullptr);
  EXPECT_EQ(gpus[0]["read_failures"], 0);
  EXPECT_EQ(gpus[1]["reachable"], false);
  EXPECT_NE(gpus[1]["read_error"].get<std::string>(), "");
  EXPECT_EQ(gpus[1]["read_failures"], 2);
  EXPECT_EQ(gpus[1]["uuid"], "GPU-fake-1");  // its last values are kept
  EXPECT_EQ(Body(Call("GET", "/v1/gpus/1"))["gpus"][0]["reachable"], false);
  auto health = Call("GET", "/healthz");
  EXPECT_EQ(health.status, 200);  // the daemon serves: restarting it would not help
  EXPECT_EQ(Body(health), json({{"status", "degraded"}, {"unreachable_gpus", {1}}}));
  std::string metrics = Call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("gpuslice_gpu_up{gpu=\"0\",uuid=\"GPU-fake-0\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_gpu_up{gpu=\"1\",uuid=\"GPU-fake-1\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_gpu_read_failures_total{gpu=\"1\",uuid=\"GPU-fake-1\"} 2\n"),
            std::string::npos);

  backend_.FailReads(1, false);
  monitor_.Sample();
  gpus = Body(Call("GET", "/v1/gpus"))["gpus"];
  EXPECT_EQ(gpus[1]["reachable"], true);
  EXPECT_EQ(gpus[1]["read_error"], nullptr);
  EXPECT_EQ(gpus[1]["read_failures"], 2);  // a counter
  EXPECT_EQ(Body(Call("GET", "/healthz")), json({{"status", "ok"}}));
  metrics = Call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("gpuslice_gpu_up{gpu=\"1\",uuid=\"GPU-fake-1\"} 1\n"), std::string::npos);
}

TEST(ParseGpuIdsTest, AcceptsIndexesUuidsAndAll) {
  FakeBackend b(3);
  std::vector<GpuInfo> gpus;
  for (uint32_t i = 0; i < 3; ++i) gpus.push_back(*b.Read(i));
  EXPECT_EQ(*ParseGpuIds("all", gpus), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(*ParseGpuIds("2,0,2", gpus), (std::vector<uint32_t>{2, 0}));
  EXPECT_EQ(*ParseGpuIds("gpu-fake-1,0", gpus), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(ParseGpuIds("3", gpus).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseGpuIds("99999999999", gpus).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseGpuIds("", gpus).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseGpuIds("0,", gpus).status().code(), StatusCode::kInvalidArgument);
}

TEST(HolderForTest, NamesTheCaller) {
  EXPECT_EQ(*HolderFor(Caller{1000, 1000, 5, false, false}, ""), "uid:1000");
  EXPECT_EQ(*HolderFor(Caller{0, 0, 5, false, false}, "job-1"), "uid:0/job-1");
  EXPECT_EQ(*HolderFor(Caller{std::nullopt, std::nullopt, std::nullopt, true, true}, ""), "tcp");
  EXPECT_FALSE(HolderFor(Caller{}, "a/b").ok());
}

}  // namespace
}  // namespace gpuslice::daemon
