// The `mig` tier end to end (docs/mig.md): gpusliced on a simulated H100 80GB
// that the operator put in MIG mode; real tenant processes register over the
// Unix socket and run on the instance the daemon made for their group.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/core/mig_state.h"
#include "sim/core/sim_gpu.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/forked_tenant.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr uint64_t kGiB = 1ull << 30;

class MigTierTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
  }
  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();
  }

  // What `nvidia-smi -i 0 -mig 1` does on the idle simulated GPU, and, for
  // each of `profiles`, an instance the operator made (`-cgi ... -C`).
  void EnableMig(const std::vector<std::string>& profiles = {}) {
    auto gpu = sim::SimGpu::Open({state_, "", /*observer=*/true});
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    (*gpu)->WithState([&](sim::SimState& s) {
      sim::DeviceState& d = s.devices[0];
      ASSERT_TRUE(sim::SetMigMode(s, 0, sim::kMigEnabled).ok());
      for (const std::string& name : profiles) {
        const sim::MigProfile* p = sim::GeometryOf(d)->FindByName(name);
        ASSERT_NE(p, nullptr) << name;
        auto gi = sim::CreateGpuInstance(d, p->index);
        ASSERT_TRUE(gi.ok()) << gi.status().ToString();
      }
    });
  }

  // The daemon's stderr is "err<n>".
  void StartDaemon(int n = 0) {
    daemon_ = StartProgram("gpusliced", n,
                           {"--socket", socket_, "--poll-interval-ms", "100", "--log-level",
                            "debug", "--state-dir", dir_ + "/state"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err" + std::to_string(n));
  }
  void KillDaemon() {
    kill(daemon_, SIGKILL);
    Join(daemon_);
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }
  void SetGroup(const std::string& id, const std::string& memory) {
    auto [code, reply] =
        Call("PUT", "/v1/groups/" + id,
             R"({"tier": "mig", "limits": {"all": {"memory": ")" + memory + R"("}}})");
    ASSERT_EQ(code, 200) << reply.dump();
  }
  // GPU 0's instances as GET /v1/mig shows them.
  json Instances() { return Call("GET", "/v1/mig").second["gpus"][0]["instances"]; }

  using Tenant = testing::ForkedTenant;
  // A member of `group` that registers and then runs `exec` (a program of the
  // build, with the reply's environment) or waits until released.
  Tenant StartTenant(const std::string& group, const std::vector<std::string>& exec = {}) {
    testing::ForkedTenantOptions options;
    if (!exec.empty()) {
      std::vector<std::string> argv = {BuildDir() + "/bin/" + exec[0]};
      argv.insert(argv.end(), exec.begin() + 1, exec.end());
      options.then = testing::ExecAfterReply(
          argv, {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib", "GPUSLICE_SIM_STATE=" + state_},
          dir_, /*reply_env=*/true);
    }
    return tenants_.Start(R"({"group": ")" + group + R"(", "devices": [0]})", options);
  }
  json TenantOutput(const Tenant& t) {
    const std::string out = Read("tenant" + std::to_string(t.pid) + ".out");
    return json::parse(out.substr(0, out.find('\n')), nullptr, false);
  }

  std::string socket_;
  pid_t daemon_ = kNoProcess;
  testing::ForkedTenants tenants_;
};

// The issue's bar: a `mig` group of 20 GiB gets an instance of at least
// that, its program sees that instance, and the instance goes with the
// group's last member.
TEST_F(MigTierTest, AMigGroupGetsAnInstanceOfItsMemoryFreedAtItsEnd) {
  EnableMig();
  StartDaemon();
  SetGroup("train", "20GiB");
  Tenant a = StartTenant("train", {"gpuslice-alloc-probe", "info"});
  ASSERT_EQ(a.status, 201) << a.body.dump();
  EXPECT_EQ(a.body["tier"], "mig");
  EXPECT_EQ(a.body["mig"]["profile"], "1g.20gb") << a.body.dump();
  const std::string uuid = a.body["mig"]["uuid"];
  EXPECT_TRUE(uuid.starts_with("MIG-")) << uuid;
  EXPECT_EQ(a.body["env"]["CUDA_VISIBLE_DEVICES"], uuid);
  EXPECT_EQ(Join(a.child), 0);
  const json info = TenantOutput(a);
  ASSERT_TRUE(info.is_object()) << Read("tenant" + std::to_string(a.pid) + ".out");
  EXPECT_GE(info["total"].get<uint64_t>(), 20 * kGiB) << "the program sees its instance";
  EXPECT_LT(info["total"].get<uint64_t>(), 80 * kGiB);

  // Gone with the group's last member; the group says it holds none.
  EXPECT_TRUE(WaitFor([&] { return Instances().empty(); }, 10s)) << Instances().dump();
  auto [code, group] = Call("GET", "/v1/groups/train");
  EXPECT_EQ(group["mig"], nullptr) << group.dump();
}

TEST_F(MigTierTest, MembersShareTheGroupsInstanceAndMigEnforcesBothDimensions) {
  EnableMig();
  StartDaemon();
  SetGroup("train", "20GiB");
  Tenant a = StartTenant("train");
  Tenant b = StartTenant("train");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  ASSERT_EQ(b.status, 201) << b.body.dump();
  EXPECT_EQ(a.body["mig"]["uuid"], b.body["mig"]["uuid"]);
  ASSERT_EQ(Instances().size(), 1u);
  EXPECT_EQ(Instances()[0]["owner"], "group/train");
  EXPECT_EQ(Instances()[0]["memory_used_bytes"], 0) << "no process has a context on it yet";
  EXPECT_TRUE(WaitFor(
      [&] {
        const json e = Call("GET", "/v1/groups/train").second["gpus"][0]["enforcer"];
        return e.is_object() && e["memory"]["enforcer"] == "mig" &&
               e["compute"]["enforcer"] == "mig";
      },
      10s))
      << Call("GET", "/v1/groups/train").second.dump();
  tenants_.ReleaseAll();
  EXPECT_TRUE(WaitFor([&] { return Instances().empty(); }, 10s)) << Instances().dump();
}

// The issue's bar: a daemon SIGKILLed while it holds an instance adopts it
// at restart, and frees it when the group ends.
TEST_F(MigTierTest, ADaemonKilledWhileHoldingAnInstanceAdoptsItAtRestart) {
  EnableMig();
  StartDaemon();
  SetGroup("train", "20GiB");
  Tenant a = StartTenant("train");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  const std::string uuid = a.body["mig"]["uuid"];
  KillDaemon();

  StartDaemon(1);
  ASSERT_EQ(Instances().size(), 1u) << Instances().dump();
  EXPECT_EQ(Instances()[0]["uuid"], uuid);
  EXPECT_EQ(Instances()[0]["owner"], "group/train");
  EXPECT_EQ(Call("GET", "/v1/groups/train").second["mig"]["uuid"], uuid);
  EXPECT_NE(Read("err1").find("event=mig_reconciled owner=group/train"), std::string::npos);
  EXPECT_NE(Read("err1").find("outcome=adopted"), std::string::npos) << Read("err1");

  tenants_.ReleaseAll();
  EXPECT_TRUE(WaitFor([&] { return Instances().empty(); }, 10s)) << Instances().dump();
}

TEST_F(MigTierTest, AnInstanceWhoseGroupEndedWhileTheDaemonWasDownIsDestroyedAtRestart) {
  EnableMig({"1g.10gb"});  // the operator's, left alone
  StartDaemon();
  SetGroup("train", "20GiB");
  Tenant a = StartTenant("train");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  KillDaemon();
  tenants_.ReleaseAll();  // the group ends while no daemon watches

  StartDaemon(1);
  const json left = Instances();
  ASSERT_EQ(left.size(), 1u) << left.dump();
  EXPECT_EQ(left[0]["profile"], "1g.10gb");
  EXPECT_EQ(left[0]["owner"], nullptr);
}

TEST_F(MigTierTest, ARequestNoFreePlacementHoldsIsRefusedWithTheReasonAndNothingHalfMade) {
  EnableMig({"1g.10gb"});  // slice 0 taken: no 7g.80gb fits
  StartDaemon();
  SetGroup("huge", "60GiB");
  Tenant a = StartTenant("huge");
  EXPECT_EQ(a.status, 409) << a.body.dump();
  const std::string message = a.body["error"].value("message", a.body.dump());
  EXPECT_NE(message.find("no MIG instance of 60 GiB fits"), std::string::npos) << message;
  EXPECT_NE(message.find("7g.80gb"), std::string::npos) << message;
  EXPECT_EQ(Instances().size(), 1u) << Instances().dump();
  EXPECT_TRUE(Call("GET", "/v1/tenants").second["tenants"].empty());
}

TEST_F(MigTierTest, WithoutMigModeAMigGroupIsRefused) {
  StartDaemon();
  SetGroup("train", "20GiB");
  Tenant a = StartTenant("train");
  EXPECT_EQ(a.status, 409) << a.body.dump();
  EXPECT_NE(a.body.dump().find("not in MIG mode"), std::string::npos) << a.body.dump();
  EXPECT_EQ(Call("GET", "/v1/mig").second["gpus"][0]["mode"], "disabled");
}

// The issue's bar: two `mig` groups' work does not change each other's
// kernel times. Each saturating program keeps its own instance busy all the
// time with the other running (on one shared GPU each would get half).
TEST_F(MigTierTest, TwoMigGroupsWorkDoesNotSlowTheOther) {
  EnableMig();
  StartDaemon();
  SetGroup("a", "10GiB");
  SetGroup("b", "10GiB");
  const std::vector<std::string> work = {"gpuslice-workload", "--kernel-us", "1000",
                                         "--duration-s",      "8",           "--quiet"};
  Tenant a = StartTenant("a", work);
  Tenant b = StartTenant("b", work);
  ASSERT_EQ(a.status, 201) << a.body.dump();
  ASSERT_EQ(b.status, 201) << b.body.dump();
  EXPECT_NE(a.body["mig"]["uuid"], b.body["mig"]["uuid"]);
  WaitRunning({a.pid, b.pid});
  EXPECT_GT(ShareOfDevice({a.pid}, 1500ms), 80) << "group a's program on its instance";
  EXPECT_GT(ShareOfDevice({b.pid}, 1500ms), 80) << "group b's program on its instance";
}

}  // namespace
}  // namespace gpuslice
