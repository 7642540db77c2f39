// gpusliced as an operator runs it: the daemon binary on a private simulated
// GPU (two devices), its API over the Unix socket, the permission check with
// a non-root caller, malformed requests, leases reverted on DELETE, on expiry
// and on SIGTERM, server-sent events, slow clients, and the gpuslice CLI.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "common/clock.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

class DaemonTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    chmod(dir_.c_str(), 0711);  // a non-root client must reach the socket inside
    socket_ = dir_ + "/gpusliced.sock";
  }

  // Starts gpusliced on this test's simulation and waits until /readyz is 200.
  // Its output goes to "err<n>" (a restart can keep the first run's log).
  pid_t StartDaemon(const std::vector<std::string>& extra = {}, int n = 0) {
    std::vector<std::string> args = {
        "--socket",           socket_, "--socket-mode", "0666",
        "--poll-interval-ms", "100",   "--log-level",   "debug",
        "--sse-keepalive-ms", "200",   "--state-dir",   dir_ + "/state"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = StartProgram("gpusliced", n, args, {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    const bool ready = WaitFor(
        [&] {
          auto r = Client().Request("GET", "/readyz");
          return r.ok() && r->status == 200;
        },
        20s);
    EXPECT_TRUE(ready) << "gpusliced did not become ready; its log:\n"
                       << Read("err" + std::to_string(n));
    return daemon_;
  }

  cli::UnixHttpClient Client() const { return cli::UnixHttpClient(socket_, 10s); }

  // The response, with its body parsed (null when not JSON).
  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  json SimDevice(int index) { return Stats()["devices"][index]; }

  struct Result {
    int code;
    std::string out, err;
  };
  Result RunCli(const std::vector<std::string>& args) {
    const int n = next_++;
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice"};
    argv.insert(argv.end(), args.begin(), args.end());
    const int code = Join(Spawn(n, argv, {"GPUSLICE_SOCKET=" + socket_}));
    return {code, Read("out" + std::to_string(n)), Read("err" + std::to_string(n))};
  }

  // A raw connection to the daemon (for streams and misbehaving clients).
  int Connect() {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    return fd;
  }

  // Reads from `fd` until `done(data)` holds, the peer closes, or `timeout`.
  static std::string ReadUntil(int fd, const std::function<bool(const std::string&)>& done,
                               std::chrono::milliseconds timeout, bool* closed = nullptr) {
    std::string data;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(data)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) {
        if (closed != nullptr) *closed = true;
        break;
      }
      data.append(buf, static_cast<size_t>(n));
    }
    return data;
  }

  std::string socket_;
  pid_t daemon_ = -1;
  int next_ = 1;
};

TEST_F(DaemonTest, ServesGpusHealthAndMetricsFromTheSimulatedGpu) {
  StartDaemon();
  auto [status, body] = Call("GET", "/v1/gpus");
  ASSERT_EQ(status, 200);
  ASSERT_EQ(body["gpus"].size(), 2u);
  EXPECT_EQ(body["gpus"][1]["uuid"], SimDevice(1)["uuid"]);
  EXPECT_EQ(body["gpus"][0]["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(body["gpus"][0]["power"]["limit_watts"], 700.0);
  EXPECT_EQ(body["gpus"][0]["mps"], "off");
  const std::string uuid = body["gpus"][1]["uuid"];
  EXPECT_EQ(Call("GET", "/v1/gpus/" + uuid).second["gpus"][0]["index"], 1);
  EXPECT_EQ(Call("GET", "/healthz").first, 200);
  auto metrics = Client().Request("GET", "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(metrics->body.find("# TYPE gpuslice_gpu_energy_joules_total counter"),
            std::string::npos);
  EXPECT_NE(
      metrics->body.find("gpuslice_gpu_power_limit_watts{gpu=\"1\",uuid=\"" + uuid + "\"} 700"),
      std::string::npos);
  auto energy = Call("GET", "/v1/gpus/0,1/energy");
  EXPECT_EQ(energy.first, 200);
  EXPECT_GT(energy.second["gpus"][1]["energy_joules"].get<double>(), 0.0);
}

TEST_F(DaemonTest, LeaseIsRevertedOnDelete) {
  StartDaemon();
  auto [status, body] = Call("PUT", "/v1/gpus/0,1/power-limit", R"({"watts": 300})");
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["results"].size(), 2u);
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 300000);
  EXPECT_EQ(SimDevice(1)["power_limit_mw"], 300000);
  EXPECT_EQ(Call("GET", "/v1/gpus/1").second["gpus"][0]["power"]["limit_watts"], 300.0);
  ASSERT_EQ(Call("DELETE", "/v1/gpus/1/power-limit").first, 200);
  EXPECT_EQ(SimDevice(1)["power_limit_mw"], 700000);
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 300000);
}

TEST_F(DaemonTest, LeaseExpires) {
  StartDaemon();
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/compute-mode", R"({"mode": "PROHIBITED", "lease_s": 1})").first,
            200);
  EXPECT_EQ(SimDevice(0)["compute_mode"], 2);
  EXPECT_TRUE(WaitFor([&] { return SimDevice(0)["compute_mode"] == 0; }, 15s));
}

TEST_F(DaemonTest, SigtermRevertsEveryLeaseAndRemovesTheSocket) {
  StartDaemon();
  ASSERT_EQ(Call("PUT", "/v1/gpus/all/compute-mode", R"({"mode": "EXCLUSIVE_PROCESS"})").first,
            200);
  ASSERT_EQ(Call("PUT", "/v1/gpus/1/power-limit", R"({"watts": 250, "lease_s": 600})").first, 200);
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 450, "permanent": true})").first,
            200);
  EXPECT_EQ(SimDevice(1)["compute_mode"], 3);
  kill(daemon_, SIGTERM);
  EXPECT_EQ(Join(daemon_), 0) << Read("err0");
  EXPECT_EQ(SimDevice(0)["compute_mode"], 0);
  EXPECT_EQ(SimDevice(1)["compute_mode"], 0);
  EXPECT_EQ(SimDevice(1)["power_limit_mw"], 700000);
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 450000);  // permanent: kept
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);
  EXPECT_NE(Read("err0").find("event=revert_on_stop"), std::string::npos);
  // Nothing is left to restore.
  std::ifstream file(dir_ + "/state/leases.json");
  const json record = json::parse(file, nullptr, false);
  ASSERT_FALSE(record.is_discarded());
  EXPECT_EQ(record["data"], json::parse(R"({"stacks": []})"));
}

// The lease of `setting` on GPU `gpu` in a GET /v1/leases body, or null.
json FindLease(const json& leases, int gpu, const std::string& setting) {
  for (const json& l : leases["leases"]) {
    if (l["gpu"] == gpu && l["setting"] == setting) return l;
  }
  return nullptr;
}

TEST_F(DaemonTest, LeasesSurviveSigkillAndStillExpireOnTime) {
  StartDaemon();
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 5})").first, 200);
  ASSERT_EQ(Call("PUT", "/v1/gpus/1/power-limit", R"({"watts": 250, "lease_s": 600})").first, 200);
  ASSERT_GT(daemon_, 0);  // never kill(-1, ...)
  kill(daemon_, SIGKILL);
  Join(daemon_);
  // Nobody reverted anything.
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 300000);

  StartDaemon({}, 1);
  auto [status, leases] = Call("GET", "/v1/leases");
  ASSERT_EQ(status, 200);
  const json short_lease = FindLease(leases, 0, "power-limit");
  const json long_lease = FindLease(leases, 1, "power-limit");
  ASSERT_FALSE(short_lease.is_null()) << leases.dump() << Read("err1");
  ASSERT_FALSE(long_lease.is_null()) << leases.dump();
  EXPECT_EQ(short_lease["value"]["watts"], 300.0);
  EXPECT_EQ(short_lease["baseline"]["watts"], 700.0);
  EXPECT_LE(short_lease["expires_in_s"].get<int>(), 5);
  EXPECT_GT(long_lease["expires_in_s"].get<int>(), 500);
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 300000);
  EXPECT_EQ(SimDevice(1)["power_limit_mw"], 250000);
  EXPECT_NE(Read("err1").find("event=lease_restored action=kept"), std::string::npos);

  // The restored lease still ends, on its original expiry.
  EXPECT_TRUE(WaitFor([&] { return SimDevice(0)["power_limit_mw"] == 700000; }, 15s));
  EXPECT_TRUE(FindLease(Call("GET", "/v1/leases").second, 0, "power-limit").is_null());
  EXPECT_EQ(SimDevice(1)["power_limit_mw"], 250000);
}

TEST_F(DaemonTest, ALeaseThatExpiredWhileTheDaemonWasDownIsRevertedAtStart) {
  StartDaemon();
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 1})").first, 200);
  ASSERT_GT(daemon_, 0);  // never kill(-1, ...)
  kill(daemon_, SIGKILL);
  Join(daemon_);
  // Wait, daemon down, until the saved expiry has passed on the wall clock.
  std::ifstream file(dir_ + "/state/leases.json");
  const json record = json::parse(file, nullptr, false);
  ASSERT_FALSE(record.is_discarded());
  const int64_t expires = record["data"]["stacks"][0]["leases"][0]["expires_at_ns"];
  ASSERT_TRUE(WaitFor([&] { return RealtimeNs() > expires; }, 10s));
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 300000);

  StartDaemon({}, 1);  // ready means restored: the revert came before the API
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 700000);
  EXPECT_TRUE(Call("GET", "/v1/leases").second["leases"].empty());
  EXPECT_NE(Read("err1").find("event=lease_restored action=reverted reason=expired"),
            std::string::npos)
      << Read("err1");
}

TEST_F(DaemonTest, ATruncatedStateFileIsSetAsideAndTheDaemonServes) {
  std::filesystem::create_directories(dir_ + "/state");
  { std::ofstream(dir_ + "/state/leases.json") << R"({"format": "gpuslice-state", "vers)"; }
  StartDaemon();
  EXPECT_NE(Read("err0").find("event=lease_restore_refused"), std::string::npos) << Read("err0");
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/state/leases.json.bad"));
  EXPECT_TRUE(Call("GET", "/v1/leases").second["leases"].empty());
  ASSERT_EQ(Call("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300, "lease_s": 60})").first, 200);
  std::ifstream file(dir_ + "/state/leases.json");
  const json record = json::parse(file, nullptr, false);
  ASSERT_FALSE(record.is_discarded());
  EXPECT_EQ(record["data"]["stacks"].size(), 1u);
}

TEST_F(DaemonTest, MalformedRequestsGet4xxAndChangeNothing) {
  StartDaemon();
  const json before = Call("GET", "/v1/gpus").second;
  struct Case {
    std::string method, target, body;
    int status;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"PUT", "/v1/gpus/0/power-limit", "{\"watts\": ", 400, "not valid JSON"},
           {"PUT", "/v1/gpus/7/power-limit", R"({"watts": 300})", 404, "no GPU 7"},
           {"PUT", "/v1/gpus/0/power-limit", R"({"watts": 5000})", 400, "valid: 200-700 W"},
           {"PUT", "/v1/gpus/0/gpu-clocks", R"({"min_mhz": 100, "max_mhz": 9000})", 400, "1980"},
           {"PUT", "/v1/gpus/0/voltage", R"({"volts": 1})", 400, "unknown setting"},
           {"PUT", "/v1/gpus/0/compute-mode", R"({"mode": "FAST"})", 400, "unknown compute mode"},
           {"GET", "/v1/nothing", "", 404, "no such endpoint"},
           {"POST", "/v1/gpus", "", 405, "method not allowed"},
       }) {
    auto [status, body] = Call(c.method, c.target, c.body);
    EXPECT_EQ(status, c.status) << c.method << " " << c.target << " " << c.body;
    EXPECT_NE(body.dump().find(c.message), std::string::npos) << body.dump();
  }
  json after = Call("GET", "/v1/gpus").second;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(after["gpus"][i]["power"], before["gpus"][i]["power"]);
    EXPECT_EQ(after["gpus"][i]["clocks"]["locked_gpu"], nullptr);
    EXPECT_EQ(SimDevice(i)["power_limit_mw"], 700000);
    EXPECT_EQ(SimDevice(i)["compute_mode"], 0);
  }
  EXPECT_EQ(Call("GET", "/v1/leases").second["leases"].size(), 0u);
}

// HEAD is GET without the body: the same status and headers, Content-Length
// the size of GET's body, and no body bytes (a GET sent after it on the same
// connection is answered right after HEAD's headers).
TEST_F(DaemonTest, HeadIsAnsweredLikeGetWithoutABody) {
  StartDaemon();
  auto get = Client().Request("GET", "/healthz");
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  ASSERT_EQ(get->status, 200);
  ASSERT_FALSE(get->body.empty());
  const int fd = Connect();
  const std::string both =
      "HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(write(fd, both.data(), both.size()), static_cast<ssize_t>(both.size()));
  bool closed = false;
  const std::string raw = ReadUntil(
      fd, [](const std::string&) { return false; }, 5s, &closed);
  close(fd);
  EXPECT_TRUE(closed) << raw;
  const size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw;
  const std::string head = raw.substr(0, head_end + 4);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200 ")) << head;
  EXPECT_NE(head.find("Content-Length: " + std::to_string(get->body.size()) + "\r\n"),
            std::string::npos)
      << head;
  // Right after HEAD's headers: the GET's answer, whole, with the body.
  auto second = ParseHttpReply(raw.substr(head_end + 4), /*at_eof=*/true);
  ASSERT_TRUE(second.ok()) << second.status().ToString() << "\n" << raw;
  ASSERT_TRUE(second->has_value()) << raw;
  EXPECT_EQ((*second)->status, 200);
  EXPECT_EQ((*second)->body, get->body);

  // An error is a HEAD too: status and length, no body; HEAD on a path
  // without GET is 405 naming HEAD.
  for (const auto& [target, status] :
       std::vector<std::pair<std::string, int>>{{"/v1/nothing", 404}, {"/v1/tenants", 200}}) {
    auto g = Client().Request("GET", target);
    ASSERT_TRUE(g.ok());
    const int c = Connect();
    const std::string req = "HEAD " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(write(c, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    const std::string answer = ReadUntil(
        c, [](const std::string&) { return false; }, 5s);
    close(c);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 " + std::to_string(status) + " ")) << answer;
    EXPECT_TRUE(answer.ends_with("\r\n\r\n")) << answer;
    EXPECT_NE(answer.find("Content-Length: " + std::to_string(g->body.size()) + "\r\n"),
              std::string::npos)
        << answer;
  }
  auto head_only = Client().Request("HEAD", "/v1/tenants");
  ASSERT_TRUE(head_only.ok()) << head_only.status().ToString();
  EXPECT_EQ(head_only->status, 200);
  EXPECT_TRUE(head_only->body.empty());
  auto not_allowed = Client().Request("HEAD", "/v1/groups/g/pause");
  ASSERT_TRUE(not_allowed.ok()) << not_allowed.status().ToString();
  EXPECT_EQ(not_allowed->status, 405);
  EXPECT_EQ(not_allowed->headers["content-length"] != "0", true);
}

TEST_F(DaemonTest, NonRootCallerCannotChangeSettings) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as uid 65534";
  StartDaemon();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    int statuses[2] = {-1, -1};
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      cli::UnixHttpClient client(socket_, 10s);
      auto put = client.Request("PUT", "/v1/gpus/0/power-limit", R"({"watts": 300})");
      auto get = client.Request("GET", "/v1/gpus");
      statuses[0] = put.ok() ? put->status : -2;
      statuses[1] = get.ok() ? get->status : -2;
    }
    ssize_t ignored = write(fds[1], statuses, sizeof statuses);
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  int statuses[2] = {0, 0};
  ASSERT_EQ(read(fds[0], statuses, sizeof statuses), static_cast<ssize_t>(sizeof statuses));
  close(fds[0]);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(statuses[0], 403);  // the mutation is refused
  EXPECT_EQ(statuses[1], 200);  // reading is open
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 700000);
  EXPECT_NE(Read("err0").find("event=request_denied"), std::string::npos);
}

TEST_F(DaemonTest, EventStreamDeliversAChange) {
  StartDaemon();
  int fd = Connect();
  const std::string req = "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string head = ReadUntil(
      fd, [](const std::string& d) { return d.find(": connected\n\n") != std::string::npos; }, 10s);
  ASSERT_NE(head.find("text/event-stream"), std::string::npos) << head;
  ASSERT_EQ(Call("PUT", "/v1/gpus/1/persistence", R"({"enabled": true})").first, 200);
  std::string events = ReadUntil(
      fd, [](const std::string& d) { return d.find("\"persistence\":true") != std::string::npos; },
      10s);
  EXPECT_NE(events.find("event: gpu\n"), std::string::npos) << events;
  EXPECT_NE(events.find("\"persistence\":true"), std::string::npos) << events;
  // Keep-alive comments arrive while nothing changes.
  std::string more = ReadUntil(
      fd, [](const std::string& d) { return d.find(": keep-alive") != std::string::npos; }, 10s);
  EXPECT_NE(more.find(": keep-alive"), std::string::npos);
  close(fd);
}

TEST_F(DaemonTest, StalledClientsAreCutOffAndOthersServed) {
  StartDaemon({"--header-timeout-ms", "300", "--max-body-bytes", "1024"});
  // A header that never ends.
  int slow = Connect();
  const std::string partial = "GET /v1/gpus HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(write(slow, partial.data(), partial.size()), static_cast<ssize_t>(partial.size()));
  EXPECT_EQ(Call("GET", "/healthz").first, 200);
  bool closed = false;
  ReadUntil(
      slow, [](const std::string&) { return false; }, 10s, &closed);
  EXPECT_TRUE(closed) << "the daemon kept a stalled request open";
  close(slow);
  // An oversized body is refused.
  auto big = Client().Request("PUT", "/v1/gpus/0/power-limit", std::string(4096, ' '));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 700000);
}

TEST_F(DaemonTest, ConnectionCapAnswers503) {
  StartDaemon({"--max-connections", "2"});
  int a = Connect();
  int b = Connect();
  // Both are held open (idle); a third is turned away.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = Client().Request("GET", "/healthz");
        return r.ok() && r->status == 503;
      },
      10s));
  close(a);
  close(b);
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = Client().Request("GET", "/healthz");
        return r.ok() && r->status == 200;
      },
      10s));
}

TEST_F(DaemonTest, CliRoundTrip) {
  StartDaemon();
  Result set = RunCli({"gpu", "set-power-limit", "0", "250", "--lease", "600"});
  EXPECT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("GPU 0: power limit 250 W"), std::string::npos) << set.out;
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 250000);

  Result list = RunCli({"gpu", "list", "--json"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(json::parse(list.out)["gpus"][0]["power"]["limit_watts"], 250.0);
  Result table = RunCli({"gpu", "list"});
  EXPECT_NE(table.out.find("70W/250W"), std::string::npos) << table.out;

  Result lock = RunCli({"gpu", "lock-clocks", "all", "1000", "1500"});
  EXPECT_EQ(lock.code, 0) << lock.err;
  EXPECT_EQ(Call("GET", "/v1/gpus/1").second["gpus"][0]["clocks"]["locked_gpu"]["max_mhz"], 1500);
  Result leases = RunCli({"gpu", "leases"});
  EXPECT_NE(leases.out.find("gpu-clocks"), std::string::npos) << leases.out;

  Result bad = RunCli({"gpu", "set-power-limit", "0", "5000"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("200-700 W"), std::string::npos) << bad.err;
  Result usage = RunCli({"gpu", "compute-mode", "0", "FAST"});
  EXPECT_EQ(usage.code, 2);

  Result release = RunCli({"gpu", "release", "0", "power-limit"});
  EXPECT_EQ(release.code, 0) << release.err;
  EXPECT_EQ(SimDevice(0)["power_limit_mw"], 700000);
  Result again = RunCli({"gpu", "release", "0", "power-limit"});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("holds no power-limit lease"), std::string::npos) << again.err;

  Result energy = RunCli({"gpu", "energy", "all"});
  EXPECT_EQ(energy.code, 0) << energy.err;
  EXPECT_NE(energy.out.find("ENERGY (J)"), std::string::npos);

  kill(daemon_, SIGTERM);
  Join(daemon_);
  Result down = RunCli({"gpu", "list"});
  EXPECT_EQ(down.code, 1);
  EXPECT_NE(down.err.find("cannot reach gpusliced"), std::string::npos) << down.err;
}

// MPS through the real daemon on the simulated GPU: the first acquire starts
// nvidia-cuda-mps-control (EXCLUSIVE_PROCESS), a second tenant shares it, a
// killed control daemon is restarted, a daemon restart keeps the tenants, and
// the last release stops it and restores the compute mode.
TEST_F(DaemonTest, MpsLifecycleThroughTheApi) {
  const std::vector<std::string> mps_flags = {"--mps-root", dir_ + "/mps", "--mps-control",
                                              BuildDir() + "/sim/bin/nvidia-cuda-mps-control"};
  StartDaemon(mps_flags);
  auto mps_gpu = [&]() -> json {
    auto [code, status] = Call("GET", "/v1/mps");
    EXPECT_EQ(code, 200);
    return status["gpus"].empty() ? json(nullptr) : status["gpus"][0];
  };

  auto [code_a, a] = Call("POST", "/v1/mps/acquire", R"({"tenant": "a", "gpus": "0"})");
  ASSERT_EQ(code_a, 200) << a.dump();
  ASSERT_EQ(a["tier"], "mps") << a.dump();
  const std::string pipe = a["env"]["CUDA_MPS_PIPE_DIRECTORY"];
  EXPECT_TRUE(std::filesystem::exists(pipe + "/nvidia-cuda-mps-control.pid"));
  EXPECT_EQ(SimDevice(0)["compute_mode"], 3);  // EXCLUSIVE_PROCESS

  auto [code_b, b] = Call("POST", "/v1/mps/acquire", R"({"tenant": "b", "gpus": "0"})");
  ASSERT_EQ(code_b, 200) << b.dump();
  EXPECT_EQ(b["env"]["CUDA_MPS_PIPE_DIRECTORY"], pipe);  // shared
  json gpu = mps_gpu();
  EXPECT_EQ(gpu["tenants"].size(), 2u) << gpu.dump();
  const pid_t control = gpu["control_pid"];
  ASSERT_GT(control, 0);

  // Bad requests change nothing.
  EXPECT_EQ(Call("POST", "/v1/mps/acquire", R"({"tenant": "c", "gpus": "7"})").first, 404);
  EXPECT_EQ(Call("POST", "/v1/mps/acquire", "{not json").first, 400);
  EXPECT_EQ(mps_gpu()["tenants"].size(), 2u);

  // A killed control daemon is restarted by the health check.
  kill(control, SIGKILL);
  EXPECT_TRUE(WaitFor(
      [&] {
        json g = mps_gpu();
        return !g.is_null() && g["running"] == true && g["control_pid"] != control &&
               g["control_pid"] != 0;
      },
      20s))
      << mps_gpu().dump();

  // A daemon restart keeps the tenants and re-adopts their MPS daemon.
  const pid_t adopted = mps_gpu()["control_pid"];
  kill(daemon_, SIGTERM);
  ASSERT_EQ(Join(daemon_), 0);
  StartDaemon(mps_flags);
  gpu = mps_gpu();
  EXPECT_EQ(gpu["control_pid"], adopted) << gpu.dump();
  EXPECT_EQ(gpu["tenants"].size(), 2u) << gpu.dump();

  // The last release stops MPS and restores the compute mode.
  EXPECT_EQ(Call("POST", "/v1/mps/release", R"({"tenant": "a"})").first, 200);
  EXPECT_TRUE(std::filesystem::exists(pipe + "/nvidia-cuda-mps-control.pid"));
  EXPECT_EQ(Call("POST", "/v1/mps/release", R"({"tenant": "b"})").first, 200);
  EXPECT_TRUE(WaitFor(
      [&] { return !std::filesystem::exists(pipe + "/nvidia-cuda-mps-control.pid"); }, 10s));
  EXPECT_EQ(SimDevice(0)["compute_mode"], 0);
}

}  // namespace
}  // namespace gpuslice
