// `gpuslice run` registers the command with gpusliced before it execs it
// (same pid), so that the environment the daemon gives — an `mps` group's
// MPS client environment — is the command's from its start; the limiter's
// own registration of the same pid later is the same tenant. Real processes
// on a private simulated GPU with the simulated nvidia-cuda-mps-control.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/mps_cleanup.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kSimConfig = R"({"device_count":2})";

class RunRegistrationTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
  }
  void TearDown() override {
    SimProcessTest::TearDown();  // the daemon (SIGKILL) and the commands
    // The MPS control daemons detach: the SIGKILLed daemon cannot stop them.
    if (!mps_root_.empty()) {
      testing::StopMpsControlDaemonsUnder(mps_root_);
      std::filesystem::remove_all(mps_root_);
    }
  }

  // gpusliced with MPS from the simulator (a short MPS root: the control
  // socket's path must fit a socket address); its log is "err0".
  void StartDaemon() {
    char root[] = "/tmp/gs-mps.XXXXXX";
    ASSERT_NE(mkdtemp(root), nullptr);
    mps_root_ = root;
    StartProgram("gpusliced", 0,
                 {"--socket", socket_, "--poll-interval-ms", "100", "--log-level", "debug",
                  "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_, "--mps-root", mps_root_,
                  "--mps-control", BuildDir() + "/sim/bin/nvidia-cuda-mps-control"},
                 {std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  // `gpuslice run <run_args> -- gpuslice-alloc-probe alloc ...` (up to 16
  // chunks of 64 MiB, held a minute) on this test's simulation and daemon; stdout and
  // stderr are "out<n>" and "err<n>". The pid is the command's (run execs it).
  pid_t StartRun(int n, const std::vector<std::string>& run_args,
                 const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice", "run"};
    argv.insert(argv.end(), run_args.begin(), run_args.end());
    argv.emplace_back("--");
    for (const std::string& a :
         {BuildDir() + "/bin/gpuslice-alloc-probe", std::string("alloc"), std::string("--chunk"),
          std::to_string(64 * kMiB), std::string("--max"), std::string("16"),
          std::string("--hold-s"), std::string("60")}) {
      argv.push_back(a);
    }
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_,
                                    std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig,
                                    "GPUSLICE_SOCKET=" + socket_,
                                    "GPUSLICE_SHM_DIR=" + shm_dir_,
                                    "GPUSLICE_LOG_LEVEL=debug",
                                    "PATH=/usr/bin:/bin"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return Spawn(n, argv, env);
  }

  // The probe's first line of output (its JSON result), once there.
  json ProbeResult(int n) {
    const std::string out = Read("out" + std::to_string(n));
    return json::parse(out.substr(0, out.find('\n')), nullptr, false);
  }

  std::string socket_, mps_root_;
};

TEST_F(RunRegistrationTest, TheCommandOfAnMpsGroupIsAnMpsClientFromItsStart) {
  StartDaemon();
  ASSERT_EQ(
      Call("PUT", "/v1/groups/train",
           R"({"tier": "mps", "limits": {"all": {"memory": "512MiB", "compute_percent": 40}}})")
          .first,
      200);
  const pid_t command = StartRun(1, {"--group", "train"});
  ASSERT_TRUE(WaitFor([&] { return Read("out1").find("\"granted\"") != std::string::npos; }, 20s))
      << Read("err1") << "\ndaemon:\n"
      << Read("err0");
  // Its pinned memory limit (the group's 512 MiB) held.
  const json result = ProbeResult(1);
  EXPECT_GT(result.value("granted_bytes", uint64_t{0}), 0u) << Read("out1");
  EXPECT_LE(result.value("granted_bytes", uint64_t{0}), 512 * kMiB) << Read("out1");

  // One tenant, the command's pid, registered by run and again by its
  // limiter (the same tenant), running on the group's MPS.
  auto [code, tenants] = Call("GET", "/v1/tenants");
  ASSERT_EQ(code, 200);
  ASSERT_EQ(tenants["tenants"].size(), 1u) << tenants.dump();
  const json& t = tenants["tenants"][0];
  EXPECT_EQ(t["host_pid"], command);
  EXPECT_EQ(t["group"], "train");
  EXPECT_EQ(t["tier_granted"], "mps") << t.dump();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err1").find("registered with gpusliced as tenant of group train") !=
               std::string::npos;
      },
      10s))
      << Read("err1");
  EXPECT_EQ(Read("err0").find("event=registration_refused"), std::string::npos) << Read("err0");
  // The MPS server knows it as its client: it was started with the group's
  // client environment, which only `run` could give it before the driver read it.
  auto [tcode, terminated] = Call("POST", "/v1/mps/terminate",
                                  R"({"gpu": "0", "client_pid": )" + std::to_string(command) + "}");
  EXPECT_EQ(tcode, 200) << terminated.dump() << "\n" << Read("err0");
}

// `run` registers the command asking for the schedule of its environment
// and so makes the group with it; the limiter's registration of the same pid
// asks again, and so does a second member started the same way: neither is
// told the schedule was not applied. A member asking for another is.
TEST_F(RunRegistrationTest, TheScheduleRunAppliedIsNotSaidToBeRefused) {
  StartDaemon();
  auto registered = [&](int n) {
    return WaitFor(
        [&] {
          return Read("err" + std::to_string(n))
                     .find("registered with gpusliced as tenant of group fresh") !=
                 std::string::npos;
        },
        20s);
  };
  const std::vector<std::string> request20 = {"GPUSLICE_COMPUTE_REQUEST=20"};
  StartRun(1, {"--group", "fresh"}, request20);
  ASSERT_TRUE(registered(1)) << Read("err1") << "\ndaemon:\n" << Read("err0");
  auto [code, group] = Call("GET", "/v1/groups/fresh");
  ASSERT_EQ(code, 200);
  EXPECT_EQ(group["gpus"][0]["schedule"]["request"], 20) << group.dump();
  EXPECT_EQ(Read("err1").find("did not apply"), std::string::npos) << Read("err1");

  StartRun(2, {"--group", "fresh"}, request20);
  ASSERT_TRUE(registered(2)) << Read("err2");
  EXPECT_EQ(Read("err2").find("did not apply"), std::string::npos) << Read("err2");

  StartRun(3, {"--group", "fresh"}, {"GPUSLICE_COMPUTE_REQUEST=30"});
  ASSERT_TRUE(registered(3)) << Read("err3");
  EXPECT_NE(Read("err3").find("gpuslice run: gpusliced did not apply the schedule: group "
                              "\"fresh\" exists"),
            std::string::npos)
      << Read("err3");
}

TEST_F(RunRegistrationTest, ARefusedRegistrationIsSaidAndTheCommandRunsAnyway) {
  StartDaemon();
  // A group of another uid: run as uid 65534 would be refused; simpler, a
  // group id the daemon refuses (the limiter would refuse it too, so use the
  // daemon's own stricter rule: at most 64 characters).
  const std::string long_group(80, 'g');
  const pid_t command = StartRun(1, {"--group", long_group});
  ASSERT_TRUE(WaitFor([&] { return Read("out1").find("\"granted\"") != std::string::npos; }, 20s))
      << Read("err1");
  EXPECT_NE(Read("err1").find("gpuslice run: gpusliced (unix:" + socket_ +
                              ") refused the registration in group " + long_group + " (HTTP 400"),
            std::string::npos)
      << Read("err1");
  int status = 0;
  EXPECT_EQ(waitpid(command, &status, WNOHANG), 0) << "the command runs";
}

TEST_F(RunRegistrationTest, WithoutADaemonTheCommandStartsAsBefore) {
  const pid_t command = StartRun(1, {"--group", "alone"});
  ASSERT_TRUE(WaitFor([&] { return Read("out1").find("\"granted\"") != std::string::npos; }, 20s))
      << Read("err1");
  EXPECT_EQ(Read("err1").find("gpuslice run:"), std::string::npos) << Read("err1");
  int status = 0;
  EXPECT_EQ(waitpid(command, &status, WNOHANG), 0);
}

}  // namespace
}  // namespace gpuslice
