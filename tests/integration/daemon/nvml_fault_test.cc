// NVML faults through the real daemon on the simulator (docs/sim.md "NVML
// faults", docs/errors.md "Faults injected"): gpusliced runs unmodified on
// the simulated NVML while `gpuslice sim nvml-fault` makes its calls fail.
//  - GPU 1 lost (NVML_ERROR_GPU_IS_LOST on every call on it): the API, the
//    metrics and /healthz say so, GPU 0 serves as before, the daemon keeps
//    running, a lease on GPU 1 that ends meanwhile is reverted once the GPU
//    is back.
//  - NVML_ERROR_UNKNOWN in the middle of a two-GPU power-limit PUT: the GPU
//    that took the change is undone, the answer names both outcomes, and the
//    same PUT goes through once the fault has passed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr int64_t kDefaultLimitMw = 700'000;

class NvmlFaultTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
  }

  // Starts gpusliced on a two-GPU simulation and waits until /readyz is 200.
  void StartDaemon() {
    daemon_ = StartProgram(
        "gpusliced", 0,
        {"--socket", socket_, "--poll-interval-ms", "100", "--state-dir", dir_ + "/state"},
        {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_))
        << "gpusliced did not become ready; its log:\n"
        << Read("err0");
  }

  // True while the daemon has not exited (it must never crash here).
  bool DaemonRunning() {
    int status = 0;
    return daemon_ > 0 && waitpid(daemon_, &status, WNOHANG) == 0;
  }

  // `gpuslice sim nvml-fault ARGS` on this test's simulation; its exit code.
  int Fault(const std::vector<std::string>& args) {
    const int n = next_++;
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice", "sim", "nvml-fault", "--state",
                                     state_};
    argv.insert(argv.end(), args.begin(), args.end());
    const int code = Join(Spawn(n, argv, {}));
    EXPECT_EQ(code, 0) << Read("err" + std::to_string(n));
    return code;
  }

  cli::UnixHttpClient Client() const { return cli::UnixHttpClient(socket_, 10s); }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  std::string Metrics() {
    auto r = Client().Request("GET", "/metrics");
    return r.ok() ? r->body : "";
  }

  json Gpu(int index) { return Call("GET", "/v1/gpus").second["gpus"][index]; }
  int64_t SimLimitMw(int index) { return Stats()["devices"][index]["power_limit_mw"]; }

  std::string socket_;
  pid_t daemon_ = -1;
  int next_ = 1;
};

TEST_F(NvmlFaultTest, ALostGpuIsReportedTheOtherServesAndItRecoversWhenTheFaultClears) {
  StartDaemon();
  const std::string uuid1 = Gpu(1)["uuid"];
  // A lease on GPU 1, released while the GPU is lost.
  ASSERT_EQ(Call("PUT", "/v1/gpus/1/power-limit", R"({"watts": 250, "lease_s": 600})").first, 200);
  ASSERT_EQ(SimLimitMw(1), 250'000);

  Fault({"--gpu", "1", "--error", "GPU_IS_LOST"});
  ASSERT_TRUE(WaitFor([&] { return Gpu(1)["read_failures"].get<int>() >= 3; }, 20s));

  const json lost = Gpu(1);
  EXPECT_EQ(lost["reachable"], false);
  EXPECT_NE(lost["read_error"].get<std::string>().find("GPU is lost"), std::string::npos)
      << lost["read_error"];
  EXPECT_EQ(lost["uuid"], uuid1);  // its last good values are kept
  EXPECT_EQ(Call("GET", "/healthz").second,
            json({{"status", "degraded"}, {"unreachable_gpus", {1}}}));
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("gpuslice_gpu_up{gpu=\"1\",uuid=\"" + uuid1 + "\"} 0\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_gpu_up{gpu=\"0\","), std::string::npos);
  EXPECT_EQ(metrics.find("gpuslice_gpu_up{gpu=\"0\",uuid=\"" + Gpu(0)["uuid"].get<std::string>() +
                         "\"} 0"),
            std::string::npos);

  // GPU 0 is unaffected: read afresh and set as before.
  EXPECT_EQ(Gpu(0)["reachable"], true);
  auto [set0, body0] = Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 600})");
  EXPECT_EQ(set0, 200) << body0;
  EXPECT_EQ(SimLimitMw(0), 300'000);
  EXPECT_TRUE(WaitFor([&] { return Gpu(0)["power"]["limit_watts"] == 300.0; }, 10s));

  // GPU 1 refuses settings with the GPU's error, and changes nothing.
  auto [set1, body1] = Call("PUT", "/v1/gpus/1/persistence", R"({"enabled": true})");
  EXPECT_EQ(set1, 503) << body1;
  EXPECT_EQ(body1["error"]["code"], "UNAVAILABLE") << body1;
  // Releasing the lease on GPU 1 ends it, but its revert cannot reach the
  // GPU: the holder hears the error, and the revert is owed, not forgotten.
  auto [release, release_body] = Call("DELETE", "/v1/gpus/1/power-limit");
  EXPECT_EQ(release, 503) << release_body;
  EXPECT_NE(Metrics().find("gpuslice_lease_reverts_pending 1\n"), std::string::npos) << Metrics();
  EXPECT_EQ(SimLimitMw(1), 250'000);

  EXPECT_TRUE(DaemonRunning());
  // Logged once per outage, not once per sample.
  const std::string log = Read("err0");
  size_t logged = 0;
  for (size_t at = log.find("event=gpu_unreachable gpu=1"); at != std::string::npos;
       at = log.find("event=gpu_unreachable gpu=1", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << log;

  // The GPU comes back: read again, and the owed revert is done.
  Fault({"--clear"});
  EXPECT_TRUE(WaitFor([&] { return Gpu(1)["reachable"] == true; }, 10s));
  EXPECT_EQ(Gpu(1)["read_error"], nullptr);
  EXPECT_EQ(Call("GET", "/healthz").second, json({{"status", "ok"}}));
  EXPECT_NE(Metrics().find("gpuslice_gpu_up{gpu=\"1\",uuid=\"" + uuid1 + "\"} 1\n"),
            std::string::npos);
  // Retried with backoff (1 s, 2 s, 4 s ... while lost): within about a minute.
  EXPECT_TRUE(WaitFor([&] { return SimLimitMw(1) == kDefaultLimitMw; }, 70s));
  EXPECT_TRUE(WaitFor(
      [&] { return Metrics().find("gpuslice_lease_reverts_pending 0\n") != std::string::npos; },
      10s));
  EXPECT_EQ(Call("PUT", "/v1/gpus/1/persistence", R"({"enabled": true})").first, 200);
  EXPECT_EQ(SimLimitMw(0), 300'000);  // GPU 0's lease untouched throughout
  EXPECT_TRUE(DaemonRunning());
}

TEST_F(NvmlFaultTest, AnUnknownErrorInTheMiddleOfATwoGpuSettingUndoesTheGpuThatTookIt) {
  StartDaemon();
  // The second power-limit setting, on whichever GPU it comes, fails once:
  // the first GPU has taken the change when the second refuses it.
  Fault({"--function", "nvmlDeviceSetPowerManagementLimit", "--error", "UNKNOWN", "--after", "1",
         "--times", "1"});
  auto [status, body] =
      Call("PUT", "/v1/gpus/0,1/power-limit", R"({"watts": 300, "lease_s": 600})");
  EXPECT_EQ(status, 500) << body;
  EXPECT_EQ(body["error"]["code"], "INTERNAL") << body;
  ASSERT_EQ(body["results"].size(), 2u) << body;
  int refused = 0;
  int undone = 0;
  for (const json& r : body["results"]) {
    EXPECT_EQ(r["ok"], false) << r;
    if (!r.contains("error")) continue;
    if (r["error"]["code"] == "INTERNAL") {
      ++refused;
      EXPECT_NE(r["error"]["message"].get<std::string>().find("Unknown Error"), std::string::npos)
          << r;
      EXPECT_FALSE(r.contains("undone")) << r;
    } else {
      ++undone;
      EXPECT_EQ(r["error"]["code"], "ABORTED") << r;
      EXPECT_EQ(r["undone"], true) << r;
    }
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(undone, 1);
  // All or nothing: neither GPU keeps the change, no lease is held.
  EXPECT_EQ(SimLimitMw(0), kDefaultLimitMw);
  EXPECT_EQ(SimLimitMw(1), kDefaultLimitMw);
  EXPECT_EQ(Call("GET", "/v1/leases").second["leases"].size(), 0u);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Gpu(0)["power"]["limit_watts"] == 700.0 && Gpu(1)["power"]["limit_watts"] == 700.0;
      },
      10s));

  // The fault has passed (times=1): the same setting goes through.
  auto [again, again_body] =
      Call("PUT", "/v1/gpus/0,1/power-limit", R"({"watts": 300, "lease_s": 600})");
  EXPECT_EQ(again, 200) << again_body;
  EXPECT_EQ(SimLimitMw(0), 300'000);
  EXPECT_EQ(SimLimitMw(1), 300'000);
  EXPECT_EQ(Call("GET", "/v1/leases").second["leases"].size(), 2u);
  EXPECT_TRUE(DaemonRunning());
}

}  // namespace
}  // namespace gpuslice
