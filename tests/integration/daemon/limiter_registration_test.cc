// The limiter registers with gpusliced (issue 12, "Registry"): real limited
// processes (libgpuslice.so preloaded) on a private simulated GPU and the real
// daemon. A limited process is listed as a tenant of its group with its own
// limit; after the daemon is SIGKILLed and restarted it is listed again (from
// the checkpoint, or registered anew when the checkpoint is gone); without a
// daemon the process runs as fast as with registration off; with one that
// never answers it waits for the first answer only up to its bound
// (GPUSLICE_REGISTER_WAIT_MS). A daemon that answers slowly is waited for:
// the first allocation is judged by the limit it grants.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/unix_http_client.h"
#include "nlohmann/json.hpp"
#include "shm/group_segment.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

class LimiterRegistrationTest : public testing::SimProcessTest {
 protected:
  std::string Socket() const { return dir_ + "/d.sock"; }

  // Starts gpusliced on this test's simulation, segments (or `shm` under the
  // test's directory) and `state` dir; its log goes to "err<n>".
  pid_t StartDaemon(const std::string& state, const std::string& shm = "",
                    const std::vector<std::string>& env = {}) {
    const pid_t pid = StartProgram(
        "gpusliced", next_++,
        {"--socket", Socket(), "--state-dir", dir_ + "/" + state, "--shm-dir",
         shm.empty() ? shm_dir_ : dir_ + shm, "--log-level", "debug", "--poll-interval-ms", "100"},
        env);
    EXPECT_TRUE(WaitFor(
        [&] {
          auto r = cli::UnixHttpClient(Socket(), 5s).Request("GET", "/readyz");
          return r.ok() && r->status == 200;
        },
        20s));
    return pid;
  }

  // gpuslice-alloc-probe with the limiter preloaded, in `group`, holding one
  // allocation of `chunk` bytes for `hold_s` seconds; its log goes to "err<n>".
  pid_t StartMember(const std::string& group, int hold_s,
                    const std::vector<std::string>& extra_env = {},
                    uint64_t chunk = uint64_t{64} << 20) {
    std::vector<std::string> env = {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so",
                                    "GPUSLICE_SHM_DIR=" + shm_dir_, "GPUSLICE_GROUP=" + group,
                                    "GPUSLICE_LOG_LEVEL=debug"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<std::string> args = {"alloc", "--chunk", std::to_string(chunk), "--max", "1"};
    if (hold_s > 0) {
      args.emplace_back("--hold-s");
      args.push_back(std::to_string(hold_s));
    }
    return StartProgram("gpuslice-alloc-probe", next_++, args, env);
  }

  // The daemon's record of tenant `pid` (null if not listed or no answer).
  json Tenant(pid_t pid) {
    auto r = cli::UnixHttpClient(Socket(), 5s).Request("GET", "/v1/tenants");
    if (!r.ok() || r->status != 200) return nullptr;
    const json body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    const json list = body.is_object() ? body.value("tenants", json::array()) : body;
    if (!list.is_array()) return nullptr;
    for (const json& t : list) {
      if (t.value("host_pid", 0) == pid) return t;
    }
    return nullptr;
  }

  // How many times the member logging to "err<n>" heard a 201 (or 409).
  size_t Registrations(int n, const std::string& group) {
    const std::string log = Read("err" + std::to_string(n));
    const std::string line = "registered with gpusliced as tenant of group " + group;
    size_t count = 0;
    for (size_t at = 0; (at = log.find(line, at)) != std::string::npos; at += line.size()) ++count;
    return count;
  }

  // Seconds one run of the probe takes, spawn to exit (exit code in `code`).
  double TimeRun(const std::vector<std::string>& extra_env, int* code) {
    const auto start = std::chrono::steady_clock::now();
    *code = Join(StartMember("fast", 0, extra_env));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  int next_ = 0;
};

TEST_F(LimiterRegistrationTest, ListedWithItsGroupAndLimit) {
  StartDaemon("state");  // err0
  const pid_t member =
      StartMember("reg", 60,
                  {"GPUSLICE_SOCKET=" + Socket(), "GPUSLICE_MEMORY_LIMIT=1GiB", "POD_NAME=web-0",
                   "POD_NAMESPACE=prod", "CONTAINER_NAME=app"});  // err1
  json t;
  ASSERT_TRUE(WaitFor([&] { return !(t = Tenant(member)).is_null(); }, 10s))
      << "daemon log:\n"
      << Read("err0") << "\nmember log:\n"
      << Read("err1");
  EXPECT_EQ(t["group"], "reg");
  EXPECT_EQ(t["requested_limits"]["all"]["memory_bytes"], 1ull << 30) << t.dump();
  // Its POD_NAME, POD_NAMESPACE and CONTAINER_NAME are hints: shown where
  // the host puts it in a pod, else (a test machine's own process) not shown
  // and each named as a conflict.
  if (t["pod_uid"].get<std::string>().empty()) {
    EXPECT_EQ(t["pod"], "") << t.dump();
    EXPECT_EQ(t["namespace"], "");
    EXPECT_EQ(t["container"], "");
    EXPECT_EQ(t["hint_conflicts"].size(), 3u) << t.dump();
  } else {
    EXPECT_EQ(t["pod"], "web-0");
    EXPECT_EQ(t["namespace"], "prod");
    EXPECT_EQ(t["container"], "app");
  }
  EXPECT_EQ(t["devices"].size(), 1u) << t.dump();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err1").find("registered with gpusliced as tenant of group reg") !=
               std::string::npos;
      },
      5s))
      << Read("err1");
}

// Limits that differ by device are sent per GPU, and a schedule from the
// environment never costs the registration (a daemon without the scheduler
// is asked again without it).
TEST_F(LimiterRegistrationTest, PerDeviceLimitsAreSentPerGpuWithAScheduleAsked) {
  const std::string two_gpus = R"(GPUSLICE_SIM_CONFIG={"device_count":2})";
  StartDaemon("state", "", {two_gpus});  // err0
  const pid_t member = StartMember(
      "per-gpu", 60,
      {"GPUSLICE_SOCKET=" + Socket(), two_gpus, R"(GPUSLICE_MEMORY_LIMIT={"1":"256MiB"})",
       "CUDA_DEVICE_SM_LIMIT_0=30", "GPUSLICE_WEIGHT=3", "GPUSLICE_PRIORITY=latency"});  // err1
  json t;
  ASSERT_TRUE(WaitFor([&] { return !(t = Tenant(member)).is_null(); }, 10s))
      << "daemon log:\n"
      << Read("err0") << "\nmember log:\n"
      << Read("err1");
  ASSERT_EQ(t["gpus"].size(), 2u) << t.dump();
  const std::string gpu0 = t["gpus"][0]["uuid"], gpu1 = t["gpus"][1]["uuid"];
  EXPECT_EQ(t["requested_limits"],
            json::parse(R"({")" + gpu0 + R"(": {"memory_bytes": null, "compute_percent": 30}, ")" +
                        gpu1 + R"(": {"memory_bytes": 268435456, "compute_percent": null}})"))
      << t.dump();
  EXPECT_EQ(t["gpus"][0]["limit"]["compute_percent"], 30);
  EXPECT_TRUE(t["gpus"][0]["limit"]["memory_bytes"].is_null());
  EXPECT_EQ(t["gpus"][1]["limit"]["memory_bytes"], 256u << 20);
  EXPECT_EQ(Read("err0").find("event=registration_refused"), std::string::npos) << Read("err0");
  // The first registrant's schedule is the new group's, on its GPUs.
  auto group = cli::UnixHttpClient(Socket(), 5s).Request("GET", "/v1/groups/per-gpu");
  ASSERT_TRUE(group.ok());
  const json g = json::parse(group->body, nullptr, false);
  ASSERT_TRUE(g.is_object()) << group->body;
  EXPECT_EQ(g["schedule"][gpu0], json::parse(R"({"priority": "latency", "weight": 3})"))
      << group->body;
}

// HYPERVISOR_IP/HYPERVISOR_PORT: the limiter registers over the daemon's TCP
// listener with its token and its pid; a wrong token is refused.
TEST_F(LimiterRegistrationTest, RegistersOverTcpWithItsToken) {
  // A port the kernel just handed out (bound, then freed for the daemon).
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  close(probe);
  {
    std::ofstream tokens(dir_ + "/tokens");
    tokens << "# test\nright-token\n";
  }
  const pid_t daemon = StartProgram(
      "gpusliced", next_++,
      {"--socket", Socket(), "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_, "--log-level",
       "debug", "--listen-tcp", "127.0.0.1:" + port, "--token-file", dir_ + "/tokens"});  // err0
  ASSERT_TRUE(testing::WaitForDaemonReady(Socket())) << Read("err0");
  ASSERT_GT(daemon, 0);
  const std::vector<std::string> tcp = {"HYPERVISOR_IP=127.0.0.1", "HYPERVISOR_PORT=" + port,
                                        "GPUSLICE_SOCKET=" + dir_ + "/not-this-one.sock"};
  std::vector<std::string> right = tcp, wrong = tcp;
  right.emplace_back("GPUSLICE_DAEMON_TOKEN=right-token");
  wrong.emplace_back("GPUSLICE_DAEMON_TOKEN=wrong-token");
  const int right_log = next_;
  const pid_t member = StartMember("over-tcp", 60, right);  // err1
  const int wrong_log = next_;
  const pid_t refused = StartMember("over-tcp", 60, wrong);  // err2
  json t;
  ASSERT_TRUE(WaitFor([&] { return !(t = Tenant(member)).is_null(); }, 10s))
      << "daemon log:\n"
      << Read("err0") << "\nmember log:\n"
      << Read("err" + std::to_string(right_log));
  EXPECT_EQ(t["group"], "over-tcp");
  EXPECT_EQ(t["container_pid"], member);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err" + std::to_string(wrong_log)).find("refused the registration") !=
               std::string::npos;
      },
      10s))
      << Read("err" + std::to_string(wrong_log));
  EXPECT_TRUE(Tenant(refused).is_null());

  // The token is no proof of a pid: this process, with the right token,
  // claiming the member's pid (a registration for another process) is
  // refused, and the member's record stays as it was.
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = R"({"group": "stolen", "pid": )" + std::to_string(member) + "}";
  const std::string request =
      "POST /v1/tenants HTTP/1.1\r\nHost: gpusliced\r\nAuthorization: Bearer right-token\r\n"
      "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(client, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(client, buf, sizeof buf)) > 0;)
    reply.append(buf, static_cast<size_t>(n));
  close(client);
  EXPECT_EQ(reply.rfind("HTTP/1.1 403", 0), 0u) << reply;
  EXPECT_NE(reply.find("does not hold this connection"), std::string::npos) << reply;
  EXPECT_EQ(Tenant(member)["group"], "over-tcp");
  EXPECT_NE(Read("err0").find("reason=pid_not_proven pid=" + std::to_string(member)),
            std::string::npos);
}

TEST_F(LimiterRegistrationTest, ListedAgainAfterADaemonRestart) {
  pid_t daemon = StartDaemon("state");                                             // err0
  const pid_t member = StartMember("again", 60, {"GPUSLICE_SOCKET=" + Socket()});  // err1
  // Listed, and the limiter heard the answer (the registry lists a tenant
  // before its reply is sent: a kill in between would lose the reply).
  ASSERT_TRUE(
      WaitFor([&] { return !Tenant(member).is_null() && Registrations(1, "again") == 1; }, 10s))
      << Read("err1");

  // SIGKILLed and restarted on its state: the tenant is listed again.
  ASSERT_GT(daemon, 0);
  kill(daemon, SIGKILL);
  Join(daemon);
  auto killed = std::chrono::steady_clock::now();
  daemon = StartDaemon("state");  // err2
  ASSERT_TRUE(WaitFor([&] { return !Tenant(member).is_null(); }, 10s)) << Read("err1");
  RecordProperty("listed_again_ms",
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - killed)
                                    .count()));

  // SIGKILLed and restarted with its state lost: only the limiter's new
  // registration can list the tenant again.
  ASSERT_GT(daemon, 0);
  kill(daemon, SIGKILL);
  Join(daemon);
  killed = std::chrono::steady_clock::now();
  StartDaemon("fresh-state");  // err3
  json t;
  ASSERT_TRUE(WaitFor([&] { return !(t = Tenant(member)).is_null(); }, 10s))
      << "daemon log:\n"
      << Read("err3") << "\nmember log:\n"
      << Read("err1");
  EXPECT_EQ(t["group"], "again");
  RecordProperty("registered_anew_ms",
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - killed)
                                    .count()));
  // The fresh daemon heard it from the limiter itself (its log line comes
  // after the listing: wait for it).
  const std::string line = "event=tenant_registered pid=" + std::to_string(member) + " ";
  EXPECT_TRUE(WaitFor([&] { return Read("err3").find(line) != std::string::npos; }, 5s))
      << Read("err3");
  EXPECT_TRUE(WaitFor([&] { return Registrations(1, "again") >= 2; }, 5s)) << Read("err1");
}

TEST_F(LimiterRegistrationTest, TheDaemonsGrantLowersTheSegment) {
  // The daemon watches another segment directory (as with per-pod mounts it
  // does not see): only the limiter can apply the group's limit here.
  StartDaemon("state", "/other-shm");  // err0
  auto put = cli::UnixHttpClient(Socket(), 5s)
                 .Request("PUT", "/v1/groups/granted",
                          R"({"limits": {"all": {"memory": "512MiB", "compute_percent": 30}}})");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_EQ(put->status, 200) << put->body;
  const pid_t member = StartMember("granted", 60, {"GPUSLICE_SOCKET=" + Socket()});  // err1
  ASSERT_TRUE(WaitFor([&] { return Registrations(1, "granted") == 1; }, 10s)) << Read("err1");
  auto limits = [&] {
    auto seg = GroupSegment::Open(shm_dir_, "granted", /*create=*/false);
    if (!seg.ok() || (*seg)->device_count() < 1) return std::pair<uint64_t, uint32_t>{0, 0};
    return std::pair<uint64_t, uint32_t>{(*seg)->MemoryLimit(0), (*seg)->ComputeLimit(0)};
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        return limits() == std::pair<uint64_t, uint32_t>{512u << 20, 30};
      },
      5s))
      << limits().first << " " << limits().second << "\n"
      << Read("err1");
  EXPECT_FALSE(Tenant(member).is_null());
}

TEST_F(LimiterRegistrationTest, AForkedChildRegistersItself) {
  StartDaemon("state");  // err0
  // cuInit, fork; the child allocates (its first call as a new process) and
  // holds for 30 s.
  const pid_t parent = StartProgram(
      "gpuslice-alloc-probe", next_++,
      {"fork", "--chunk", std::to_string(1 << 30), "--hold-s", "30"},
      {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
       "GPUSLICE_GROUP=forked", "GPUSLICE_MEMORY_LIMIT=2GiB", "GPUSLICE_LOG_LEVEL=debug",
       "GPUSLICE_SOCKET=" + Socket()});  // err1
  std::vector<int> pids;
  auto members = [&] {
    pids.clear();
    auto r = cli::UnixHttpClient(Socket(), 5s).Request("GET", "/v1/tenants?group=forked");
    if (!r.ok() || r->status != 200) return false;
    const json body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object() || !body["tenants"].is_array()) return false;
    for (const json& t : body["tenants"]) pids.push_back(t.value("host_pid", 0));
    return pids.size() == 2;
  };
  ASSERT_TRUE(WaitFor(members, 10s)) << "listed: " << pids.size() << "\n" << Read("err1");
  EXPECT_NE(std::find(pids.begin(), pids.end(), parent), pids.end());
  const int child = pids[0] == parent ? pids[1] : pids[0];
  EXPECT_NE(child, parent);
  EXPECT_GT(child, 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err1").find("gpuslice[" + std::to_string(child) +
                                 "] INFO limiter: registered with gpusliced") != std::string::npos;
      },
      5s))
      << Read("err1");
  // The child is not ours (TearDown stops only the parent): stop it here.
  if (child > 0 && child != parent) kill(child, SIGKILL);
}

TEST_F(LimiterRegistrationTest, WithoutADaemonTheProcessRunsNormally) {
  // A socket file that a hung daemon holds: it listens and never accepts.
  const int hung = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string hung_path = dir_ + "/hung.sock";
  ASSERT_LT(hung_path.size(), sizeof addr.sun_path);
  memcpy(addr.sun_path, hung_path.c_str(), hung_path.size());
  ASSERT_EQ(bind(hung, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  ASSERT_EQ(listen(hung, 16), 0);

  int code = -1;
  const double off = TimeRun({"GPUSLICE_REGISTER=0", "GPUSLICE_SOCKET=" + hung_path}, &code);
  EXPECT_EQ(code, 0) << Read("err0");
  const double absent = TimeRun({"GPUSLICE_SOCKET=" + dir_ + "/absent.sock"}, &code);
  EXPECT_EQ(code, 0) << Read("err1");
  // A hung daemon costs the host the first answer's bound, once.
  const double stalled =
      TimeRun({"GPUSLICE_SOCKET=" + hung_path, "GPUSLICE_REGISTER_WAIT_MS=300"}, &code);
  EXPECT_EQ(code, 0) << Read("err2");
  EXPECT_NE(Read("err2").find("no answer from gpusliced (unix:" + hung_path + ") in 300 ms"),
            std::string::npos)
      << Read("err2");
  RecordProperty("run_s_registration_off", std::to_string(off));
  RecordProperty("run_s_no_daemon", std::to_string(absent));
  RecordProperty("run_s_hung_daemon", std::to_string(stalled));
  // Without a socket file the host never waits; a hung daemon holds it for
  // the bound and no longer (a blocking exchange would never end). One second
  // of slack for a loaded machine.
  EXPECT_LT(absent, off + 1.0);
  EXPECT_LT(stalled, off + 0.3 + 1.0);
  EXPECT_EQ(Read("err0").find("gpusliced"), std::string::npos) << Read("err0");

  // With time to try, the limiter did try the hung daemon, gave up on its
  // deadline, and the process went on.
  const pid_t member = StartMember("patient", 1, {"GPUSLICE_SOCKET=" + hung_path});  // err3
  EXPECT_EQ(Join(member), 0) << Read("err3");
  EXPECT_NE(Read("err3").find("gpusliced not reachable (no answer in time"), std::string::npos)
      << Read("err3");
  close(hung);
}

// A stand-in for a slow gpusliced on a Unix socket: it answers the first
// registration after `delay` with a 201 granting `memory_bytes` on every
// device the registration names, and records what it was sent.
class SlowDaemon {
 public:
  SlowDaemon(const std::string& path, std::chrono::milliseconds delay, uint64_t memory_bytes)
      : delay_(delay), memory_bytes_(memory_bytes) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path.c_str(), std::min(path.size(), sizeof addr.sun_path - 1));
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
             listen(fd_, 16) == 0;
    if (bound_) thread_ = std::thread([this] { Serve(); });
  }
  ~SlowDaemon() {
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);  // ends a pending accept()
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  bool bound() const { return bound_; }
  // The body of the registration it answered (empty: none yet).
  std::string request_body() const { return body_; }  // read after the thread ended

 private:
  void Serve() {
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    std::string in;
    char buf[4096];
    size_t want = std::string::npos;
    for (;;) {
      const ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      const size_t head = in.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      if (want == std::string::npos) {
        const size_t at = in.find("Content-Length: ");
        want = head + 4 + (at == std::string::npos ? 0 : std::stoul(in.substr(at + 16)));
      }
      if (in.size() >= want) break;
    }
    const size_t head = in.find("\r\n\r\n");
    body_ = head == std::string::npos ? "" : in.substr(head + 4);
    nlohmann::json limits = nlohmann::json::object();
    const nlohmann::json request =
        nlohmann::json::parse(body_, nullptr, /*allow_exceptions=*/false);
    if (request.is_object() && request["devices"].is_array()) {
      for (const nlohmann::json& uuid : request["devices"]) {
        limits[uuid.get<std::string>()] = {{"memory_bytes", memory_bytes_},
                                           {"compute_percent", nullptr}};
      }
    }
    // The daemon is slow: this is its behaviour under test, not a wait for it.
    std::this_thread::sleep_for(delay_);
    const std::string reply = nlohmann::json{{"effective_limits", limits}}.dump();
    const std::string http =
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(reply.size()) + "\r\nConnection: close\r\n\r\n" + reply;
    (void)!send(c, http.data(), http.size(), MSG_NOSIGNAL);  // the limiter may be gone
    close(c);
  }

  const std::chrono::milliseconds delay_;
  const uint64_t memory_bytes_;
  int fd_ = -1;
  bool bound_ = false;
  std::string body_;
  std::thread thread_;
};

// Issue 17: a container's first allocation is judged by the limit the daemon
// grants, though the daemon answers well after the usual 250 ms exchange
// deadline; the environment alone would let it through.
TEST_F(LimiterRegistrationTest, TheFirstAllocationWaitsForASlowDaemonsLimit) {
  const std::string path = dir_ + "/slow.sock";
  std::string body;
  {
    SlowDaemon daemon(path, 700ms, 128u << 20);
    ASSERT_TRUE(daemon.bound()) << strerror(errno);
    const pid_t member = StartMember(
        "slow", 0,
        {"GPUSLICE_MEMORY_LIMIT=1GiB", "GPUSLICE_CONTEXT_BYTES=0", "GPUSLICE_SOCKET=" + path},
        uint64_t{256} << 20);  // out0, err0
    EXPECT_EQ(Join(member), 0) << Read("err0");
  }
  const json out = json::parse(Read("out0"), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(out.is_object()) << Read("out0") << Read("err0");
  EXPECT_EQ(out["granted"], 0) << Read("out0") << "\n" << Read("err0");
  EXPECT_NE(Read("err0").find("registered with gpusliced as tenant of group slow"),
            std::string::npos)
      << Read("err0");
  EXPECT_EQ(Read("err0").find("no answer from gpusliced"), std::string::npos) << Read("err0");
}

// The same slow daemon with the wait turned off (GPUSLICE_REGISTER_WAIT_MS=0):
// the first allocation goes by the environment, as before issue 17.
TEST_F(LimiterRegistrationTest, WithTheWaitOffTheEnvironmentJudgesTheFirstAllocation) {
  const std::string path = dir_ + "/slow.sock";
  {
    SlowDaemon daemon(path, 700ms, 128u << 20);
    ASSERT_TRUE(daemon.bound()) << strerror(errno);
    const pid_t member = StartMember("nowait", 0,
                                     {"GPUSLICE_MEMORY_LIMIT=1GiB", "GPUSLICE_CONTEXT_BYTES=0",
                                      "GPUSLICE_SOCKET=" + path, "GPUSLICE_REGISTER_WAIT_MS=0"},
                                     uint64_t{256} << 20);  // out0, err0
    EXPECT_EQ(Join(member), 0) << Read("err0");
  }
  const json out = json::parse(Read("out0"), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(out.is_object()) << Read("out0") << Read("err0");
  EXPECT_EQ(out["granted"], 1) << Read("out0") << "\n" << Read("err0");
}

// A bound that is not a number of milliseconds is a configuration error: the
// limiter fails closed with the variable's name, as for its other settings.
TEST_F(LimiterRegistrationTest, AMalformedWaitIsAConfigurationError) {
  for (const std::string bad : {"2s", "-1", "60001", ""}) {
    const int n = next_;
    const int code = Join(StartMember("badwait", 0, {"GPUSLICE_REGISTER_WAIT_MS=" + bad}));
    EXPECT_NE(code, 0) << bad << "\n" << Read("err" + std::to_string(n));
    EXPECT_NE(Read("err" + std::to_string(n))
                  .find("gpuslice: configuration error: GPUSLICE_REGISTER_WAIT_MS"),
              std::string::npos)
        << bad << "\n"
        << Read("err" + std::to_string(n));
  }
}

}  // namespace
}  // namespace gpuslice
