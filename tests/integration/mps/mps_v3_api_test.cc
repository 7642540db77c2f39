// MPS v3 through the daemon's HTTP API (docs/mps.md "MPS v3"): gpusliced on a
// simulated r615 node (MPS v3 in the simulated nvidia-cuda-mps-control), groups
// set to the `mps` tier with PUT /v1/groups/{id}, real client processes that
// register over the Unix socket and attach with the environment they are
// given. Each group's namespace caps its clients (even one that asks for
// more), a limit change through the API reaches the namespace live (for the
// clients that attach next), and the API names the enforcer of each case.
// The same groups on an older node (MPS v2) for comparison.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/forked_tenant.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

// An r615 node: the simulated control binary speaks MPS v3. One H100 (132 SMs).
constexpr const char* kSimConfig = R"({"driver_version":"615.10"})";

class MpsV3ApiTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
    char root[] = "/tmp/gs-mps.XXXXXX";  // short: <root>/<gpu>/pipe/... is a socket path
    ASSERT_NE(mkdtemp(root), nullptr);
    mps_root_ = root;
    const std::vector<std::string> args = {
        "--socket",    socket_,         "--poll-interval-ms",
        "100",         "--log-level",   "debug",
        "--state-dir", dir_ + "/state", "--mps-root",
        mps_root_,     "--mps-control", BuildDir() + "/sim/bin/nvidia-cuda-mps-control"};
    StartProgram("gpusliced", 0, args, {"GPUSLICE_SIM_CONFIG=" + sim_config_});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }
  void TearDown() override {
    tenants_.KillAll();
    // The daemon stops its MPS control daemon when the groups' last members
    // are gone; a SIGKILLed daemon would leave it running (a child of init).
    WaitFor([&] { return Call("GET", "/v1/mps").second["gpus"].empty(); }, 20s);
    SimProcessTest::TearDown();
    // Whatever a failed test left under this test's own MPS root.
    std::error_code ec;
    for (const auto& gpu : std::filesystem::directory_iterator(mps_root_, ec)) {
      std::ifstream in(gpu.path() / "pipe" / "nvidia-cuda-mps-control.pid");
      pid_t pid = 0;
      if (in >> pid && pid > 0) kill(pid, SIGTERM);
    }
    std::filesystem::remove_all(mps_root_);
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  // A process that registers in `group` on GPU 0 and then runs
  // gpuslice-mps-probe WITHOUT the limiter (holding its context until the
  // test ends), with the reply's environment
  // after `ask` (so a variable in `ask` wins: what the client asks for). Its
  // stdout is "tenant<pid>.out".
  testing::ForkedTenant Client(const std::string& group, const std::vector<std::string>& ask = {}) {
    testing::ForkedTenantOptions options;
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_,
                                    "GPUSLICE_SIM_CONFIG=" + sim_config_};
    env.insert(env.end(), ask.begin(), ask.end());
    // It holds its context (and its group's MPS tenant) until the test ends.
    options.then = testing::ExecAfterReply(
        {BuildDir() + "/bin/gpuslice-mps-probe", "--hold-file", dir_ + "/never"}, env, dir_);
    return tenants_.Start(R"({"group": ")" + group + R"(", "devices": [0]})", options);
  }
  // The probe's "ready" line: what the client sees.
  json Ready(const testing::ForkedTenant& t) {
    const std::string out = "tenant" + std::to_string(t.pid) + ".out";
    json found;
    WaitFor(
        [&] {
          const std::string text = Read(out);
          if (text.find("\"ready\"") == std::string::npos) return false;
          found = json::parse(text.substr(0, text.find('\n')), nullptr, false);
          return true;
        },
        30s);
    return found;
  }
  // Sets `group`'s compute limit to `percent` through the API and waits (20 s)
  // for gpusliced to apply it to the group's MPS tenant; the daemon's tier
  // events are the failure's message.
  void SetComputeLimitOfMpsGroup(const std::string& group, int percent) {
    ASSERT_EQ(Call("PUT", "/v1/groups/" + group,
                   R"({"limits": {"all": {"compute_percent": )" + std::to_string(percent) + "}}}")
                  .first,
              200);
    const std::string applied = "event=tier_limits_applied group=" + group +
                                " active_thread_percentage=" + std::to_string(percent);
    ASSERT_TRUE(WaitFor([&] { return Read("err0").find(applied) != std::string::npos; }, 20s))
        << [&] {
             std::string lines;  // the daemon's tier events
             std::istringstream in(Read("err0"));
             for (std::string line; std::getline(in, line);) {
               if (line.find("tier") != std::string::npos ||
                   line.find("group_") != std::string::npos) {
                 lines += line + "\n";
               }
             }
             return lines;
           }();
  }
  // `gpuslice gpu list` against this daemon.
  std::string GpuList() {
    const std::string cmd = BuildDir() + "/bin/gpuslice gpu list --socket '" + socket_ + "' 2>&1";
    return testing::CommandOutput(cmd);
  }
  json ComputeEnforcer(const std::string& group) {
    return Call("GET", "/v1/groups/" + group).second["gpus"][0]["enforcer"]["compute"];
  }

  std::string sim_config_ = kSimConfig;  // the node; set before SetUp
  std::string socket_;
  std::string mps_root_;
  testing::ForkedTenants tenants_;
};

// The same daemon on an older node (the simulator's default driver, before
// r615): its control binary speaks MPS v2 only.
class MpsOlderNodeApiTest : public MpsV3ApiTest {
 protected:
  MpsOlderNodeApiTest() { sim_config_ = "{}"; }
};

TEST_F(MpsV3ApiTest, GroupsOnTheMpsTierAreCappedByTheirNamespacesAndFollowALiveLimitChange) {
  const auto [gcode, gpus] = Call("GET", "/v1/gpus");
  ASSERT_EQ(gcode, 200) << gpus.dump();
  // What the node offers, as GET /v1/gpus and `gpuslice gpu list` say: an
  // r615 driver whose control binary speaks MPS v3.
  const json features = gpus["gpus"][0]["features"];
  EXPECT_EQ(features["driver_version"], "615.10") << features.dump();
  EXPECT_EQ(features["memory_limits"], true) << features.dump();
  EXPECT_EQ(features["mps"]["available"], true) << features.dump();
  EXPECT_EQ(features["mps"]["protocol"], 3) << features.dump();
  const std::string list = GpuList();
  EXPECT_NE(list.find("615.10"), std::string::npos) << list;
  EXPECT_NE(list.find(" v3"), std::string::npos) << list;
  const uint32_t sms = 132;  // the simulator's default H100
  // Two groups on the mps tier, one on shared; all three by the API alone.
  EXPECT_EQ(
      Call("PUT", "/v1/groups/a", R"({"tier": "mps", "limits": {"all": {"compute_percent": 30}}})")
          .first,
      200);
  EXPECT_EQ(Call("PUT", "/v1/groups/b",
                 R"({"tier": "mps", "limits": {"all": {"compute_percent": 60, "memory": "1GiB"}}})")
                .first,
            200);
  EXPECT_EQ(Call("PUT", "/v1/groups/c",
                 R"({"tier": "shared", "limits": {"all": {"compute_percent": 20}}})")
                .first,
            200);

  // a's client asks for 90 %; its namespace holds it to 30 %.
  testing::ForkedTenant a1 = Client("a", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"});
  testing::ForkedTenant b1 = Client("b");
  ASSERT_EQ(a1.status, 201) << a1.body.dump();
  ASSERT_EQ(b1.status, 201) << b1.body.dump();
  EXPECT_EQ(a1.body["tier"], "mps") << a1.body.dump();
  EXPECT_EQ(b1.body["tier"], "mps") << b1.body.dump();
  const std::string pipe = a1.body["env"].value("CUDA_MPS_PIPE_DIRECTORY", "");
  EXPECT_TRUE(pipe.ends_with("/pipe/gpuslice/a")) << "a's namespace socket: " << pipe;
  EXPECT_EQ(Call("GET", "/v1/mps").second.value("protocol", 0), 3);
  const json ra = Ready(a1);
  const json rb = Ready(b1);
  EXPECT_EQ(ra.value("mps", 0), 1) << ra.dump();
  EXPECT_EQ(ra.value("sms", 0u), sms * 30 / 100) << "a's namespace caps its 90 %: " << ra.dump();
  EXPECT_EQ(rb.value("sms", 0u), sms * 60 / 100) << rb.dump();

  // A limit change through the API reaches a's namespace: a client that
  // attaches next, asking for 90 % again, gets 20 %.
  ASSERT_NO_FATAL_FAILURE(SetComputeLimitOfMpsGroup("a", 20));
  testing::ForkedTenant a2 = Client("a", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"});
  ASSERT_EQ(a2.status, 201) << a2.body.dump();
  const json ra2 = Ready(a2);
  EXPECT_EQ(ra2.value("sms", 0u), sms * 20 / 100)
      << "the namespace after the change: " << ra2.dump();

  // The API names each case's enforcer. c's (shared) member is refused: MPS
  // runs the GPU in EXCLUSIVE_PROCESS mode, where only MPS clients get a
  // context (docs/mps.md "Tiers"); the refusal names the MPS groups.
  testing::ForkedTenant c1 = Client("c");
  EXPECT_EQ(c1.status, 409) << c1.body.dump();
  EXPECT_NE(c1.body.dump().find("groups a,b"), std::string::npos) << c1.body.dump();
  EXPECT_TRUE(WaitFor([&] { return ComputeEnforcer("a")["enforcer"] == "mps"; }, 10s))
      << Call("GET", "/v1/groups/a").second.dump();
  EXPECT_EQ(ComputeEnforcer("b")["enforcer"], "mps");
  EXPECT_NE(ComputeEnforcer("a").value("reason", "").find("MPS v3"), std::string::npos)
      << ComputeEnforcer("a").dump();
  // b's memory limit: the driver's where the node has cgroup v2 and the group
  // a cgroup of its own, else the limiter's (the machine decides).
  const std::string memory =
      Call("GET", "/v1/groups/b").second["gpus"][0]["enforcer"]["memory"].value("enforcer", "");
  EXPECT_TRUE(memory == "driver" || memory == "limiter") << memory;
  for (const char* g : {"a", "b", "c"}) {
    const json group = Call("GET", std::string("/v1/groups/") + g).second;
    std::cerr << "group " << g << ": tier " << group.value("tier_granted", json()).dump()
              << ", enforcer " << group["gpus"][0]["enforcer"].dump() << "\n";
  }
  std::cerr << "clients: a " << ra.dump() << ", b " << rb.dump() << ", a after the change "
            << ra2.dump() << "\n";
}

// SM partitions: an `mps` group's compute request (PUT /v1/groups schedule)
// becomes a static SM partition of that share of the GPU, rounded down to
// whole chunks (the simulator's 8 SMs per chunk): 25 % of 132 SMs is 33, so 4
// chunks, 32 SMs. Its client, which asks for nothing itself, runs on exactly
// those 32 SMs (a thread percentage could give it 31 or 33, never 32), and
// GET /v1/mps shows the partition. A request change resizes it live.
TEST_F(MpsV3ApiTest, AnMpsGroupsRequestIsAStaticSmPartitionItsClientsRunOn) {
  ASSERT_EQ(Call("PUT", "/v1/groups/p",
                 R"({"tier": "mps", "limits": {"all": {"compute_percent": 50}},
                     "schedule": {"all": {"request": 25}}})")
                .first,
            200);
  testing::ForkedTenant p1 = Client("p");
  ASSERT_EQ(p1.status, 201) << p1.body.dump();
  EXPECT_EQ(p1.body["tier"], "mps") << p1.body.dump();
  EXPECT_EQ(p1.body["env"].value("CUDA_MPS_SM_PARTITION", ""), "p") << p1.body.dump();
  const json r1 = Ready(p1);
  EXPECT_EQ(r1.value("mps", 0), 1) << r1.dump();
  EXPECT_EQ(r1.value("sms", 0u), 32u) << "exactly its partition's SMs: " << r1.dump();
  const json status = Call("GET", "/v1/mps").second;
  EXPECT_EQ(status["gpus"][0]["sm_partitions"], json({{"p", 32}})) << status.dump();
  // The API names the partition as the group's compute enforcer.
  auto partition_named = [&](const std::string& sms) {
    return WaitFor(
        [&] {
          const json c = ComputeEnforcer("p");
          return c.value("reason_code", "") == "mps_v3_sm_partition" &&
                 c.value("reason", "").find("partition of " + sms + " SMs") != std::string::npos;
        },
        10s);
  };
  EXPECT_TRUE(partition_named("32")) << ComputeEnforcer("p").dump();

  // A new request: the partition is made again at 50 % (66 SMs: 8 chunks, 64)
  // for the clients that attach from then on.
  ASSERT_EQ(Call("PUT", "/v1/groups/p", R"({"schedule": {"all": {"request": 50}}})").first, 200);
  ASSERT_TRUE(WaitFor(
      [&] { return Call("GET", "/v1/mps").second["gpus"][0]["sm_partitions"].value("p", 0) == 64; },
      20s))
      << Call("GET", "/v1/mps").second.dump();
  testing::ForkedTenant p2 = Client("p");
  ASSERT_EQ(p2.status, 201) << p2.body.dump();
  const json r2 = Ready(p2);
  EXPECT_EQ(r2.value("sms", 0u), 64u) << r2.dump();
  EXPECT_TRUE(partition_named("64")) << ComputeEnforcer("p").dump();
  std::cerr << "partition clients: request 25 % " << r1.dump() << ", request 50 % " << r2.dump()
            << "; GET /v1/mps sm_partitions "
            << Call("GET", "/v1/mps").second["gpus"][0]["sm_partitions"].dump() << "\n";
}

// The same groups and limits as on r615 above, on an older node: compute in
// the mps tier is MPS's v2 active thread percentage, handed to each client in
// its environment (no namespaces): a client that keeps it gets its group's
// share, a limit change reaches the clients that start next, and the API says
// which enforcer holds it. Unlike a v3 namespace, the percentage is the
// client's own: one that asks for more gets more (why v3 is preferred).
TEST_F(MpsOlderNodeApiTest, MpsGroupsAreCappedByTheirClientsThreadPercentage) {
  const json features = Call("GET", "/v1/gpus").second["gpus"][0]["features"];
  EXPECT_EQ(features["driver_version"], "580.65.06") << features.dump();
  EXPECT_EQ(features["memory_limits"], false) << features.dump();
  EXPECT_EQ(features["mps"]["protocol"], 2) << features.dump();
  EXPECT_NE(GpuList().find(" v2"), std::string::npos) << GpuList();
  const uint32_t sms = 132;
  ASSERT_EQ(
      Call("PUT", "/v1/groups/a", R"({"tier": "mps", "limits": {"all": {"compute_percent": 30}}})")
          .first,
      200);
  ASSERT_EQ(Call("PUT", "/v1/groups/b",
                 R"({"tier": "mps", "limits": {"all": {"compute_percent": 60, "memory": "1GiB"}}})")
                .first,
            200);
  testing::ForkedTenant a1 = Client("a");
  testing::ForkedTenant b1 = Client("b");
  ASSERT_EQ(a1.status, 201) << a1.body.dump();
  ASSERT_EQ(b1.status, 201) << b1.body.dump();
  EXPECT_EQ(a1.body["tier"], "mps") << a1.body.dump();
  EXPECT_EQ(a1.body["env"].value("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""), "30") << a1.body.dump();
  EXPECT_EQ(b1.body["env"].value("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", ""), "0=1G") << b1.body.dump();
  EXPECT_EQ(Call("GET", "/v1/mps").second.value("protocol", 0), 2);
  const json ra = Ready(a1);
  const json rb = Ready(b1);
  EXPECT_EQ(ra.value("mps", 0), 1) << ra.dump();
  EXPECT_EQ(ra.value("sms", 0u), sms * 30 / 100) << ra.dump();
  EXPECT_EQ(rb.value("sms", 0u), sms * 60 / 100) << rb.dump();

  ASSERT_NO_FATAL_FAILURE(SetComputeLimitOfMpsGroup("a", 20));
  testing::ForkedTenant a2 = Client("a");
  ASSERT_EQ(a2.status, 201) << a2.body.dump();
  const json ra2 = Ready(a2);
  EXPECT_EQ(ra2.value("sms", 0u), sms * 20 / 100) << ra2.dump();
  testing::ForkedTenant a3 = Client("a", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"});
  ASSERT_EQ(a3.status, 201) << a3.body.dump();
  const json ra3 = Ready(a3);
  EXPECT_EQ(ra3.value("sms", 0u), sms * 90 / 100) << "v2: the client's own word " << ra3.dump();

  EXPECT_TRUE(WaitFor([&] { return ComputeEnforcer("a")["enforcer"] == "mps"; }, 10s))
      << Call("GET", "/v1/groups/a").second.dump();
  EXPECT_NE(ComputeEnforcer("a").value("reason", "").find("client's active thread percentage"),
            std::string::npos)
      << ComputeEnforcer("a").dump();
  const json memory = Call("GET", "/v1/groups/b").second["gpus"][0]["enforcer"]["memory"];
  EXPECT_EQ(memory.value("enforcer", ""), "limiter") << memory.dump();
  EXPECT_NE(memory.value("reason", "").find("580.65.06"), std::string::npos) << memory.dump();
  for (const char* g : {"a", "b"}) {
    const json group = Call("GET", std::string("/v1/groups/") + g).second;
    std::cerr << "older node, group " << g << ": enforcer " << group["gpus"][0]["enforcer"].dump()
              << "\n";
  }
  std::cerr << "older node clients: a " << ra.dump() << ", b " << rb.dump()
            << ", a after the change " << ra2.dump() << ", a asking 90 % " << ra3.dump() << "\n";
}

}  // namespace
}  // namespace gpuslice
