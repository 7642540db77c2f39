// `gpuslice tenants`, `gpuslice group show|set|forget` and `gpuslice status`
// against the real gpusliced on a private simulated GPU: tenants are forked
// children that register themselves over the Unix socket (one in its own pid
// namespace), the CLI is the real binary, and `status` reads a real segment
// whose members the test attaches under the tenants' pids.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "shm/group_segment.h"
#include "tests/integration/support/daemon_cli_test.h"
#include "tests/integration/support/forked_tenant.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

class RegistryCliTest : public testing::DaemonCliTest {
 protected:
  void SetUp() override {
    DaemonCliTest::SetUp();
    tenants_.set_socket(socket_);
  }
  void TearDown() override {
    tenants_.KillAll();
    DaemonCliTest::TearDown();
  }

  using Tenant = testing::ForkedTenant;

  // A process (in a new pid namespace if asked) that registers itself with
  // `body`, then, if `join` is given, joins that group's segment as a limiter
  // would (its pid as its namespace numbers it, name `join`), and stays alive
  // until Stop; returned once it has done so.
  Tenant StartTenant(const std::string& body, bool own_pid_namespace = false,
                     const std::string& join = "") {
    // Kept by the registered process until it exits.
    static std::unique_ptr<GroupSegment> segment;
    testing::ForkedTenantOptions options;
    options.own_pid_namespace = own_pid_namespace;
    if (!join.empty()) {
      options.after_register = [this, join](const testing::TenantReply&) -> std::string {
        auto opened = GroupSegment::Open(shm_dir_, "train", /*create=*/false);
        if (!opened.ok()) return opened.status().ToString();
        if (auto slot = (*opened)->Join(getpid(), 1, join); !slot.ok()) {
          return slot.status().ToString();
        }
        segment = std::move(*opened);
        return "";
      };
    }
    Tenant t = tenants_.Start(body, options);
    EXPECT_EQ(t.status, 201) << "registration failed: " << body << ": " << t.body.dump();
    EXPECT_EQ(t.step_error, "");
    return t;
  }

  // Ends the tenant (both processes in a pid namespace) and reaps it.
  void Stop(Tenant& t) { tenants_.Kill(t); }

  testing::ForkedTenants tenants_;
};

TEST_F(RegistryCliTest, TenantsListsARegisteredProcessAndJsonIsTheDaemons) {
  StartDaemon();
  Tenant a = StartTenant(
      R"({"group": "train", "devices": [0], "hints": {"pod_name": "web-0",
          "pod_namespace": "prod", "container_name": "app"}})");
  ASSERT_GT(a.pid, 0);
  Result table = RunCli({"tenants"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("HOST PID"), std::string::npos) << table.out;
  const size_t line = table.out.find("\n" + std::to_string(a.pid) + " ");
  ASSERT_NE(line, std::string::npos) << table.out;
  const std::string row = table.out.substr(line + 1, table.out.find('\n', line + 1) - line);
  EXPECT_NE(row.find("train"), std::string::npos) << row;
  EXPECT_NE(row.find("shared"), std::string::npos) << row;
  EXPECT_NE(row.find("0:"), std::string::npos) << row;  // memory on its GPU

  Result js = RunCli({"tenants", "--json"});
  ASSERT_EQ(js.code, 0) << js.err;
  json j = json::parse(js.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << js.out;
  ASSERT_EQ(j["tenants"].size(), 1u);
  EXPECT_EQ(j["tenants"][0]["host_pid"], a.pid);
  // The pod and container it claims are shown where the host puts it in a
  // pod; a test machine's own process shows none.
  if (j["tenants"][0]["pod_uid"].get<std::string>().empty()) {
    EXPECT_EQ(row.find("web-0"), std::string::npos) << row;
    EXPECT_EQ(row.find(" app "), std::string::npos) << row;
  } else {
    EXPECT_NE(row.find("prod/web-0"), std::string::npos) << row;
    EXPECT_NE(row.find("app"), std::string::npos) << row;
  }

  Result other = RunCli({"tenants", "--group", "nobody-here"});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_EQ(other.out, "no tenants\n");
}

TEST_F(RegistryCliTest, WithoutADaemonCommandsFailNamingTheSocket) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"tenants"}, {"group", "show"}, {"group", "set", "g", "--memory", "1GiB"}}) {
    Result r = RunCli(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_NE(r.err.find(socket_), std::string::npos) << r.err;
  }
  // status still works, from the segments, and says the daemon did not answer.
  Result status = RunCli({"status", "--json"});
  ASSERT_EQ(status.code, 0) << status.err;
  json j = json::parse(status.out, nullptr, false);
  EXPECT_EQ(j["daemon"]["answered"], false) << status.out;
  EXPECT_NE(j["daemon"]["error"].get<std::string>().find(socket_), std::string::npos);
  Result plain = RunCli({"status", "--no-daemon", "--json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_TRUE(json::parse(plain.out)["daemon"].is_null()) << plain.out;
}

TEST_F(RegistryCliTest, GroupSetThenShowKeepsTheOtherLimitAndRefusesBadInput) {
  StartDaemon();
  Result set = RunCli({"group", "set", "train", "--memory", "2GiB", "--compute", "0=40"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("group train: tier shared"), std::string::npos) << set.out;
  // Only --memory now: the compute limit on GPU 0 stays.
  Result again = RunCli({"group", "set", "train", "--memory", "1=512MiB"});
  ASSERT_EQ(again.code, 0) << again.err;

  Result show = RunCli({"group", "show", "train"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("2.00 GiB / 40%"), std::string::npos) << show.out;          // GPU 0
  EXPECT_NE(show.out.find("512.00 MiB / unlimited"), std::string::npos) << show.out;  // GPU 1
  json group = Get("/v1/groups/train");
  EXPECT_EQ(group["gpus"][0]["limit"]["memory_bytes"], uint64_t{2} << 30);
  EXPECT_EQ(group["gpus"][0]["limit"]["compute_percent"], 40);
  EXPECT_EQ(group["gpus"][1]["limit"]["memory_bytes"], uint64_t{512} << 20);

  Result all = RunCli({"group", "show", "--json"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(json::parse(all.out)["groups"][0]["id"], "train");

  Result bad_gpu = RunCli({"group", "set", "train", "--memory", "7=1GiB"});
  EXPECT_EQ(bad_gpu.code, 2);
  EXPECT_NE(bad_gpu.err.find("no GPU 7"), std::string::npos) << bad_gpu.err;
  Result bad_flag = RunCli({"group", "set", "train", "--compute", "250"});
  EXPECT_EQ(bad_flag.code, 2) << bad_flag.err;
  Result none = RunCli({"group", "show", "missing"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("no group"), std::string::npos) << none.err;
  EXPECT_EQ(Get("/v1/groups/train")["gpus"][1]["limit"]["memory_bytes"], uint64_t{512} << 20);
}

TEST_F(RegistryCliTest, GroupSetAsAnotherUserIsRefusedWithTheDaemonsReason) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as uid 65534";
  StartDaemon();
  ASSERT_EQ(RunCli({"group", "set", "train", "--memory", "1GiB"}).code, 0);
  Result raise = RunCli({"group", "set", "train", "--memory", "unlimited"}, /*nobody=*/true);
  EXPECT_EQ(raise.code, 1) << raise.out << raise.err;
  EXPECT_NE(raise.err.find("uid 65534 may not change settings"), std::string::npos) << raise.err;
  EXPECT_EQ(Get("/v1/groups/train")["gpus"][0]["limit"]["memory_bytes"], uint64_t{1} << 30);
  Result forget = RunCli({"group", "forget", "train"}, /*nobody=*/true);
  EXPECT_EQ(forget.code, 1);
  EXPECT_TRUE(Get("/v1/groups/train").contains("id"));
}

TEST_F(RegistryCliTest, ForgetRefusesAGroupWithMembersUntilTheyExit) {
  StartDaemon();
  Tenant a = StartTenant(R"({"group": "train"})");
  ASSERT_GT(a.pid, 0);
  Result busy = RunCli({"group", "forget", "train"});
  EXPECT_EQ(busy.code, 1);
  EXPECT_NE(busy.err.find("group train still has members: host pid(s) " + std::to_string(a.pid)),
            std::string::npos)
      << busy.err;
  Stop(a);
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/tenants")["tenants"].empty(); }, 5s));
  Result ok = RunCli({"group", "forget", "train"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "group train forgotten\n");
  Result gone = RunCli({"group", "show", "train"});
  EXPECT_EQ(gone.code, 1);
}

TEST_F(RegistryCliTest, StatusMergesTheRegistrysTenantsWithTheSegment) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a pid namespace";
  StartDaemon();
  // The segment of "train" with a device; its members join it themselves,
  // one under its host pid, one under its container pid (1).
  mkdir(shm_dir_.c_str(), 0755);
  auto segment = GroupSegment::Open(shm_dir_, "train", /*create=*/true);
  ASSERT_TRUE(segment.ok()) << segment.status().ToString();
  ASSERT_TRUE((*segment)->AttachDevice(Get("/v1/gpus")["gpus"][0]["uuid"].get<std::string>()).ok());
  Tenant host =
      StartTenant(R"({"group": "train", "hints": {"pod_name": "p"}})", false, "host-member");
  Tenant inside = StartTenant(R"({"group": "train", "tier": "shared"})",
                              /*own_pid_namespace=*/true, "ns-member");
  Tenant alone = StartTenant(R"({"group": "solo"})");
  ASSERT_GT(host.pid, 0);
  ASSERT_GT(inside.pid, 0);
  ASSERT_GT(alone.pid, 0);
  ASSERT_NE(inside.pid, inside.child);  // registered from its own pid namespace

  Result r = RunCli({"status", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["daemon"]["answered"], true) << r.out;
  json train;
  for (const json& g : j["groups"]) {
    if (g["group"] == "train") train = g;
  }
  ASSERT_TRUE(train.is_object()) << r.out;
  EXPECT_EQ(train["tier"], "shared");
  EXPECT_EQ(train["devices"][0]["memory_used_bytes"], 0u);  // the segment's number
  ASSERT_EQ(train["members"].size(), 2u);
  for (const json& m : train["members"]) {
    const int expected = m["name"] == "host-member" ? host.pid : inside.pid;
    EXPECT_EQ(m["tenant"]["host_pid"], expected) << m.dump();
  }
  ASSERT_EQ(train["tenants"].size(), 2u);
  for (const json& t : train["tenants"]) EXPECT_EQ(t["attached"], true) << t.dump();
  ASSERT_EQ(j["registry_only_groups"].size(), 1u) << r.out;
  EXPECT_EQ(j["registry_only_groups"][0]["group"], "solo");
  EXPECT_EQ(j["registry_only_groups"][0]["tenants"][0]["host_pid"], alone.pid);

  Result text = RunCli({"status"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("tenant: host pid " + std::to_string(inside.pid) + " (pid 1 inside)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("solo"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 registered, no segment"), std::string::npos) << text.out;
  Result one = RunCli({"status", "--group", "solo"});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("host pid " + std::to_string(alone.pid)), std::string::npos) << one.out;

  Result plain = RunCli({"status", "--no-daemon", "--json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  json p = json::parse(plain.out);
  EXPECT_TRUE(p["daemon"].is_null());
  EXPECT_FALSE(p.contains("registry_only_groups"));
  EXPECT_EQ(p["groups"].size(), 1u);  // "train" only: "solo" has no segment
}

TEST_F(RegistryCliTest, StatusDoesNotWaitForADaemonThatDoesNotAnswer) {
  StartDaemon();
  Tenant a = StartTenant(R"({"group": "train"})");
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(daemon_, 0);
  ASSERT_EQ(kill(daemon_, SIGSTOP), 0);  // accepts connections (backlog), never answers
  const auto start = std::chrono::steady_clock::now();
  Result r = RunCli({"status", "--json"});
  const auto took = std::chrono::steady_clock::now() - start;
  kill(daemon_, SIGCONT);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["daemon"]["answered"], false);
  EXPECT_TRUE(j["registry_only_groups"].empty());
  EXPECT_LT(took, 2s);  // one 300 ms request timeout, not the client's default 30 s
  Result text = RunCli({"status"});
  EXPECT_NE(text.out.find("train"), std::string::npos) << text.out;  // answering again
}

}  // namespace
}  // namespace gpuslice
