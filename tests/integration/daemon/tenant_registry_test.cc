// The tenant registry end to end: gpusliced on a private simulated GPU, real
// tenant processes (forked children, one in its own pid namespace, one as
// uid 65534) registering themselves over the Unix socket, exits noticed by
// pidfd, refusals, a malformed body and a silent client, and a SIGKILLed
// daemon re-adopting its live tenants from --state-dir.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/forked_tenant.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::WaitFor;
using namespace std::chrono_literals;

class TenantRegistryTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    chmod(dir_.c_str(), 0711);  // uid 65534 must reach the socket inside
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
  }
  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();
  }

  void StartDaemon() {
    daemon_ = StartProgram("gpusliced", daemon_runs_++,
                           {"--socket", socket_, "--socket-mode", "0666", "--poll-interval-ms",
                            "100", "--log-level", "debug", "--state-dir", dir_ + "/state"},
                           {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  // Host pid -> tenant record, from GET /v1/tenants.
  std::map<int, json> Listed() {
    std::map<int, json> out;
    auto [status, body] = Call("GET", "/v1/tenants");
    EXPECT_EQ(status, 200);
    if (status == 200) {
      for (const json& t : body["tenants"]) out[t["host_pid"].get<int>()] = t;
    }
    return out;
  }

  using Tenant = testing::ForkedTenant;

  // A process that registers itself with `body` (as `uid` if given; in a new
  // pid namespace if `own_pid_namespace`) and stays alive until the test ends.
  Tenant StartTenant(const std::string& body, std::optional<uid_t> uid = std::nullopt,
                     bool own_pid_namespace = false) {
    testing::ForkedTenantOptions options;
    options.own_pid_namespace = own_pid_namespace;
    options.uid = uid;
    return tenants_.Start(body, options);
  }
  void Stop(Tenant& t) { tenants_.Kill(t); }

  std::string socket_;
  pid_t daemon_ = -1;
  int daemon_runs_ = 0;
  testing::ForkedTenants tenants_;
};

TEST_F(TenantRegistryTest, TwoProcessesRegisterAndAKilledOneIsGoneWithinASecond) {
  StartDaemon();
  Tenant a = StartTenant(R"({"group": "pod-a", "devices": [0], "limits": {"memory": "1GiB"}})");
  Tenant b = StartTenant(R"({"group": "pod-a", "devices": ["0", 1]})");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  ASSERT_EQ(b.status, 201) << b.body.dump();
  EXPECT_EQ(a.pid, a.child);  // identified by SO_PEERCRED
  EXPECT_EQ(a.body["effective_limits"].begin().value()["memory_bytes"], 1u << 30);
  auto listed = Listed();
  ASSERT_EQ(listed.size(), 2u);
  ASSERT_TRUE(listed.contains(a.pid) && listed.contains(b.pid));
  EXPECT_EQ(listed[a.pid]["group"], "pod-a");
  EXPECT_EQ(listed[a.pid]["container_pid"], a.pid);  // no pid namespace
  EXPECT_EQ(listed[b.pid]["gpus"].size(), 2u);
  EXPECT_EQ(Call("GET", "/v1/groups/pod-a").second["members"].size(), 2u);

  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(a.pid, SIGKILL), 0);
  const bool gone = WaitFor([&] { return !Listed().contains(a.pid); }, 1s);
  const auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_TRUE(gone) << "still listed 1 s after SIGKILL";
  EXPECT_LT(took, 1s);
  EXPECT_TRUE(Listed().contains(b.pid));
  EXPECT_NE(Read("err0").find("event=tenant_exited pid=" + std::to_string(a.pid)),
            std::string::npos);
}

TEST_F(TenantRegistryTest, TheEventStreamAnnouncesRegistrationsExitsAndRefusals) {
  StartDaemon();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string req = "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string events;
  // Reads until `needle` arrived (or 10 s passed).
  auto read_until = [&](const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (events.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      events.append(buf, static_cast<size_t>(n));
    }
    return events.find(needle) != std::string::npos;
  };
  ASSERT_TRUE(read_until(": connected"));
  Tenant t = StartTenant(R"({"group": "ev"})");
  ASSERT_EQ(t.status, 201);
  EXPECT_TRUE(read_until("event: tenant_registered\ndata: {")) << events;
  ASSERT_EQ(Call("PUT", "/v1/groups/ev", R"({"limits": {"all": {"memory": "1GiB"}}})").first, 200);
  EXPECT_TRUE(read_until("event: group_limits_changed\n")) << events;
  EXPECT_EQ(Call("POST", "/v1/tenants", R"({"group": "bad group"})").first, 400);
  EXPECT_TRUE(read_until("event: registration_refused\n")) << events;
  kill(t.pid, SIGKILL);
  EXPECT_TRUE(read_until("event: tenant_exited\ndata: {\"group\":\"ev\",\"host_pid\":" +
                         std::to_string(t.pid)))
      << events;
  close(fd);
}

TEST_F(TenantRegistryTest, ATenantInAPidNamespaceIsListedByItsHostPid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a pid namespace";
  StartDaemon();
  Tenant t = StartTenant(R"({"group": "ns", "pid": 1})", std::nullopt, /*own_pid_namespace=*/true);
  ASSERT_EQ(t.status, 201) << t.body.dump();
  EXPECT_NE(t.pid, t.child);
  EXPECT_EQ(t.body["tenant"]["container_pid"], 1);
  auto listed = Listed();
  ASSERT_TRUE(listed.contains(t.pid));
  EXPECT_EQ(listed[t.pid]["container_pid"], 1);
}

TEST_F(TenantRegistryTest, AnotherUidIsRefusedFromAGroupItDoesNotOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a tenant as uid 65534";
  StartDaemon();
  Tenant owner = StartTenant(R"({"group": "owned"})");
  ASSERT_EQ(owner.status, 201) << owner.body.dump();
  Tenant intruder = StartTenant(R"({"group": "owned"})", 65534);
  EXPECT_EQ(intruder.status, 403) << intruder.body.dump();
  const std::string message = intruder.body["error"]["message"];
  EXPECT_NE(message.find("belongs to uid 0"), std::string::npos) << message;
  EXPECT_NE(message.find("uid 65534"), std::string::npos) << message;
  // Its own group is fine; and it may not change limits.
  Tenant own = StartTenant(R"({"group": "nobody-g"})", 65534);
  EXPECT_EQ(own.status, 201) << own.body.dump();
  EXPECT_EQ(Listed().size(), 2u);
  EXPECT_NE(Read("err0").find("event=registration_refused"), std::string::npos);
}

TEST_F(TenantRegistryTest, MalformedBodiesAndSilentClientsDoNotStopTheDaemon) {
  StartDaemon();
  // A client that connects and never speaks.
  const int silent = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);

  auto [status, body] = Call("POST", "/v1/tenants", R"({"group": "g", "devices": [0, )");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body["error"]["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  auto bad_field =
      Call("POST", "/v1/tenants", R"({"group": "g", "limits": {"compute_percent": 500}})");
  EXPECT_EQ(bad_field.first, 400);
  EXPECT_NE(bad_field.second["error"]["message"].get<std::string>().find("limits.compute_percent"),
            std::string::npos);
  EXPECT_TRUE(Listed().empty());

  const auto t0 = std::chrono::steady_clock::now();
  Tenant t = StartTenant(R"({"group": "g"})");
  EXPECT_EQ(t.status, 201) << t.body.dump();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the silent client held others up";
  EXPECT_EQ(Call("GET", "/healthz").first, 200);
  close(silent);
}

TEST_F(TenantRegistryTest, ARestartedDaemonReadoptsLiveTenantsAndDropsDeadOnes) {
  StartDaemon();
  ASSERT_EQ(Call("PUT", "/v1/groups/keep", R"({"limits": {"all": {"compute_percent": 25}}})").first,
            200);
  Tenant live = StartTenant(R"({"group": "keep"})");
  Tenant dies = StartTenant(R"({"group": "keep"})");
  ASSERT_EQ(live.status, 201);
  ASSERT_EQ(dies.status, 201);
  ASSERT_EQ(kill(daemon_, SIGKILL), 0);
  EXPECT_EQ(Join(daemon_), 128 + SIGKILL);
  Stop(dies);  // exits while no daemon watches

  StartDaemon();
  auto listed = Listed();
  EXPECT_EQ(listed.size(), 1u);
  ASSERT_TRUE(listed.contains(live.pid));
  EXPECT_EQ(listed[live.pid]["group"], "keep");
  EXPECT_EQ(listed[live.pid]["gpus"][0]["limit"]["compute_percent"], 25);
  EXPECT_NE(Read("err1").find("event=tenant_readopted pid=" + std::to_string(live.pid)),
            std::string::npos);
  // Re-adopted means watched again: its exit is noticed.
  kill(live.pid, SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return Listed().empty(); }, 1s));
  EXPECT_EQ(Call("DELETE", "/v1/groups/keep").first, 200);
}

}  // namespace
}  // namespace gpuslice
