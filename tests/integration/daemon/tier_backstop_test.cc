// Isolation tiers and the memory backstop end to end: gpusliced on a private
// simulated GPU (two devices) with the simulated nvidia-cuda-mps-control;
// real tenant processes (forked children) register themselves over the Unix
// socket. An `mps` group gets MPS with its client environment and releases it
// after its last member; without MPS it falls back to `shared` and says why.
// A tenant that allocates beyond its group's limit without the limiter is
// reported by the backstop (NVML's count), and killed with --memory-backstop kill.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/forked_tenant.h"
#include "tests/integration/support/mps_cleanup.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kSimConfig = R"({"device_count":2})";  // the daemon's and its tenants'

class TierBackstopTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
  }
  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();  // the daemon (SIGKILL)
    // MPS's control daemons detach (children of init): the SIGKILLed daemon
    // cannot stop them.
    if (!mps_root_.empty()) {
      testing::StopMpsControlDaemonsUnder(mps_root_);
      std::filesystem::remove_all(mps_root_);
    }
  }

  // The daemon's stderr is "err<n>".
  void StartDaemon(const std::vector<std::string>& extra = {}, int n = 0) {
    std::vector<std::string> args = {"--socket",    socket_, "--poll-interval-ms", "100",
                                     "--log-level", "debug", "--state-dir",        dir_ + "/state"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ =
        StartProgram("gpusliced", n, args, {std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err" + std::to_string(n));
  }
  // A short MPS root: <root>/<gpu>/pipe/control must fit a socket address.
  std::vector<std::string> MpsFlags(const std::string& control) {
    char root[] = "/tmp/gs-mps.XXXXXX";
    EXPECT_NE(mkdtemp(root), nullptr);
    mps_root_ = root;
    return {"--mps-root", mps_root_, "--mps-control", control};
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }
  // Opens GET /v1/events on a raw connection; the fd (the caller closes it).
  int OpenEvents() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    const std::string request = "GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n";
    EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    return fd;
  }
  // Reads `fd` until `needle` arrives or `timeout` passes; what was read.
  static std::string ReadUntil(int fd, const std::string& needle,
                               std::chrono::milliseconds timeout) {
    std::string data;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (data.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
    return data;
  }
  // The state letter of /proc/<pid>/stat ('T': stopped); '?' when unreadable.
  static char ProcState(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
  }
  std::string Metrics() {
    auto r = cli::UnixHttpClient(socket_, 10s).Request("GET", "/metrics");
    return r.ok() ? r->body : "";
  }

  using Tenant = testing::ForkedTenant;
  // A process that registers itself with `body`, and then either runs `exec`
  // (a program of the build, on the simulated GPU, WITHOUT the limiter) or
  // waits until StopTenants. `extra_env` (NAME=VALUE) is added to the
  // program's environment, and with `reply_env` the "env" of the
  // registration's reply (as a limiter would start its CUDA work); its stdout
  // goes to "tenant<pid>.out" of the test's directory.
  Tenant StartTenant(const std::string& body, const std::vector<std::string>& exec = {},
                     const std::vector<std::string>& extra_env = {}, bool reply_env = false) {
    testing::ForkedTenantOptions options;
    if (!exec.empty()) {
      std::vector<std::string> argv = {BuildDir() + "/bin/" + exec[0]};
      argv.insert(argv.end(), exec.begin() + 1, exec.end());
      std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                      "GPUSLICE_SIM_STATE=" + state_,
                                      std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig};
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      options.then = testing::ExecAfterReply(argv, env, dir_, reply_env);
    }
    return tenants_.Start(body, options);
  }
  // Ends every waiting tenant and reaps it.
  void StopTenants() { tenants_.ReleaseAll(); }

  std::string socket_;
  pid_t daemon_ = kNoProcess;
  testing::ForkedTenants tenants_;
  std::string mps_root_;
};

TEST_F(TierBackstopTest, AnMpsGroupGetsMpsWithItsEnvironmentAndReleasesItAfterItsLastMember) {
  StartDaemon(MpsFlags(BuildDir() + "/sim/bin/nvidia-cuda-mps-control"));
  Tenant a = StartTenant(
      R"({"group": "train", "tier": "mps", "devices": [0],
          "limits": {"compute_percent": 40, "memory": "2GiB"}})");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  EXPECT_EQ(a.body["tier"], "mps") << a.body.dump();
  EXPECT_EQ(a.body["tier_reason"], "");
  const std::string pipe_dir = a.body["env"].value("CUDA_MPS_PIPE_DIRECTORY", "");
  ASSERT_FALSE(pipe_dir.empty()) << a.body.dump();
  EXPECT_TRUE(std::filesystem::exists(pipe_dir + "/nvidia-cuda-mps-control.pid"));
  EXPECT_EQ(a.body["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "40");
  EXPECT_EQ(a.body["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=2G");
  EXPECT_EQ(Stats()["devices"][0]["compute_mode"], 3);  // EXCLUSIVE_PROCESS

  // A second member shares the group's MPS tenant and runs as an MPS client
  // with the environment it was given: its pinned memory limit holds (it
  // asked for less than the group), and the daemon finds it on the server.
  Tenant b = StartTenant(
      R"({"group": "train", "devices": [0], "limits": {"memory": "512MiB"}})",
      {"gpuslice-alloc-probe", "alloc", "--chunk", std::to_string(64 * kMiB), "--hold-s", "60"}, {},
      /*reply_env=*/true);
  ASSERT_EQ(b.status, 201) << b.body.dump();
  EXPECT_EQ(b.body["tier"], "mps");
  EXPECT_EQ(b.body["env"]["CUDA_MPS_PIPE_DIRECTORY"], pipe_dir);
  EXPECT_EQ(b.body["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=512M");
  const std::string out = "tenant" + std::to_string(b.pid) + ".out";
  ASSERT_TRUE(WaitFor([&] { return Read(out).find("\"granted\"") != std::string::npos; }, 20s))
      << Read(out);
  const json result = json::parse(Read(out).substr(0, Read(out).find('\n')), nullptr, false);
  EXPECT_GT(result.value("granted_bytes", uint64_t{0}), 0u) << Read(out);
  EXPECT_LE(result.value("granted_bytes", uint64_t{0}), 512 * kMiB) << Read(out);
  EXPECT_NE(result.value("error", ""), "") << Read(out);
  // NVML charges the MPS server, which the backstop leaves out.
  EXPECT_EQ(Read("err0").find("event=backstop_unregistered_process"), std::string::npos)
      << Read("err0");
  auto [tcode, terminated] = Call("POST", "/v1/mps/terminate",
                                  R"({"gpu": "0", "client_pid": )" + std::to_string(b.pid) + "}");
  EXPECT_EQ(tcode, 200) << "a client of the group's MPS server: " << terminated.dump();
  if (b.pid > 0) kill(b.pid, SIGKILL);  // it holds for a minute otherwise

  auto [code, groups] = Call("GET", "/v1/groups/train");
  ASSERT_EQ(code, 200);
  EXPECT_EQ(groups["tier"], "mps");
  EXPECT_EQ(groups["tier_granted"], "mps") << groups.dump();
  // MPS holds the group's compute there (docs/backstop.md "Enforcers").
  EXPECT_TRUE(WaitFor(
      [&] {
        return Call("GET", "/v1/groups/train")
                   .second["gpus"][0]["enforcer"]["compute"]["enforcer"] == "mps";
      },
      10s))
      << Call("GET", "/v1/groups/train").second.dump();
  auto [mcode, mps] = Call("GET", "/v1/mps/tenants");
  ASSERT_EQ(mps["tenants"].size(), 1u) << mps.dump();
  EXPECT_EQ(mps["tenants"][0]["name"], "train");

  // The last member leaving releases it: MPS stops, the compute mode returns.
  StopTenants();
  EXPECT_TRUE(
      WaitFor([&] { return Call("GET", "/v1/mps/tenants").second["tenants"].empty(); }, 10s));
  EXPECT_TRUE(WaitFor(
      [&] { return !std::filesystem::exists(pipe_dir + "/nvidia-cuda-mps-control.pid"); }, 10s));
  EXPECT_EQ(Stats()["devices"][0]["compute_mode"], 0);
  EXPECT_TRUE(WaitFor(
      [&] { return Read("err0").find("event=tier_released group=train") != std::string::npos; },
      10s));
}

TEST_F(TierBackstopTest, WithoutMpsAnMpsGroupFallsBackToSharedAndSaysWhy) {
  StartDaemon(MpsFlags(dir_ + "/no-such-mps-control"));
  Tenant a = StartTenant(R"({"group": "train", "tier": "mps"})");
  ASSERT_EQ(a.status, 201) << a.body.dump();
  EXPECT_EQ(a.body["tier"], "shared");
  const std::string reason = a.body["tier_reason"];
  EXPECT_NE(reason.find("MPS unavailable"), std::string::npos) << reason;
  EXPECT_TRUE(a.body["env"].empty());

  auto [tcode, tenants] = Call("GET", "/v1/tenants");
  ASSERT_EQ(tenants["tenants"].size(), 1u);
  EXPECT_EQ(tenants["tenants"][0]["tier"], "mps");  // what the group asks for
  EXPECT_EQ(tenants["tenants"][0]["tier_granted"], "shared");
  EXPECT_EQ(tenants["tenants"][0]["tier_reason"], reason);
  auto [gcode, groups] = Call("GET", "/v1/groups");
  EXPECT_EQ(groups["groups"][0]["tier_granted"], "shared");
  EXPECT_EQ(groups["groups"][0]["tier_reason"], reason);
  EXPECT_NE(Read("err0").find("event=tier_fallback group=train"), std::string::npos)
      << Read("err0");
}

// A tenant registered with a 64 MiB limit that allocates 256 MiB without the
// limiter (no LD_PRELOAD): the driver's count is over, the backstop says so.
TEST_F(TierBackstopTest, ATenantOverItsLimitWithoutTheLimiterIsReported) {
  StartDaemon();
  const int events = OpenEvents();
  Tenant hog = StartTenant(R"({"group": "hog", "devices": [0], "limits": {"memory": "64MiB"}})",
                           {"gpuslice-alloc-probe", "alloc", "--chunk", std::to_string(64 * kMiB),
                            "--max", "4", "--hold-s", "60"});
  ASSERT_EQ(hog.status, 201) << hog.body.dump();
  ASSERT_TRUE(WaitFor(
      [&] {
        return Read("err0").find("event=backstop_over_limit gpu=0 group=hog") != std::string::npos;
      },
      20s))
      << Read("err0");
  EXPECT_NE(Metrics().find("gpuslice_backstop_findings_total{kind=\"over_limit\"} 1"),
            std::string::npos);
  const std::string stream = ReadUntil(events, "event: backstop_over_limit", 10s);
  close(events);
  const size_t at = stream.find("event: backstop_over_limit");
  ASSERT_NE(at, std::string::npos) << stream;
  EXPECT_NE(stream.find(R"("group":"hog")", at), std::string::npos) << stream.substr(at);
  int status = 0;
  EXPECT_EQ(waitpid(hog.pid, &status, WNOHANG), 0) << "report only: it runs on";
}

TEST_F(TierBackstopTest, WithKillTheTenantOverItsLimitIsKilled) {
  StartDaemon({"--memory-backstop", "kill"});
  Tenant hog = StartTenant(R"({"group": "hog", "devices": [0], "limits": {"memory": "64MiB"}})",
                           {"gpuslice-alloc-probe", "alloc", "--chunk", std::to_string(64 * kMiB),
                            "--max", "4", "--hold-s", "60"});
  ASSERT_EQ(hog.status, 201) << hog.body.dump();
  EXPECT_EQ(tenants_.Join(hog), 128 + SIGKILL) << Read("err0");
  // The log line follows the kill.
  const std::string killed =
      "event=backstop_killed gpu=0 group=hog pids=" + std::to_string(hog.pid);
  EXPECT_TRUE(WaitFor([&] { return Read("err0").find(killed) != std::string::npos; }, 10s))
      << Read("err0");
  // Its exit is noticed and the group is back under (no process left).
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err0").find("event=backstop_back_under gpu=0 group=hog") != std::string::npos;
      },
      10s));
}

// The negative case: a tenant that the limiter holds to the same limit (it
// charges what the driver counts, context reservation included) is never
// reported, however close to its limit it allocates.
TEST_F(TierBackstopTest, ATenantTheLimiterHoldsIsNotReported) {
  StartDaemon();
  Tenant held = StartTenant(
      R"({"group": "held", "devices": [0], "limits": {"memory": "512MiB"}})",
      {"gpuslice-alloc-probe", "alloc", "--chunk", std::to_string(16 * kMiB), "--hold-s", "60"},
      {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
       "GPUSLICE_GROUP=held", "GPUSLICE_MEMORY_LIMIT=512MiB"});
  ASSERT_EQ(held.status, 201) << held.body.dump();
  const std::string out = "tenant" + std::to_string(held.pid) + ".out";
  ASSERT_TRUE(WaitFor([&] { return Read(out).find("\"granted\"") != std::string::npos; }, 20s))
      << Read(out);
  const json result = json::parse(Read(out).substr(0, Read(out).find('\n')), nullptr, false);
  EXPECT_GT(result.value("granted", 0), 0) << Read(out);
  EXPECT_NE(result.value("error", ""), "") << "the limiter refused at its limit: " << Read(out);
  // The daemon sees what it holds...
  ASSERT_TRUE(WaitFor(
      [&] {
        auto [code, body] = Call("GET", "/v1/groups/held");
        return code == 200 && body["gpus"][0]["memory_used_bytes"].get<uint64_t>() >= 400 * kMiB;
      },
      10s));
  // ...and a later sample of the backstop (marked by an unregistered process
  // it reports) has checked it: still nothing over the limit.
  const pid_t other =
      StartProgram("gpuslice-alloc-probe", 1,
                   {"alloc", "--chunk", std::to_string(16 * kMiB), "--max", "1", "--hold-s", "60"},
                   {std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig});
  ASSERT_TRUE(WaitFor(
      [&] {
        return Read("err0").find("event=backstop_unregistered_process gpu=0 group=- pids=" +
                                 std::to_string(other)) != std::string::npos;
      },
      20s))
      << Read("err0");
  EXPECT_EQ(Read("err0").find("event=backstop_over_limit"), std::string::npos) << Read("err0");
}

// The compute backstop: a process on the GPU that never went through the
// limiter (no LD_PRELOAD, no registration) is reported, and again when it goes.
TEST_F(TierBackstopTest, AnUnregisteredProcessUsingTheGpuIsReportedByTheComputeBackstop) {
  StartDaemon();
  const int events = OpenEvents();
  const pid_t rogue =
      StartProgram("gpuslice-workload", 1, {"--kernel-us", "1000", "--duration-s", "60", "--quiet"},
                   {std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig});
  ASSERT_GT(rogue, 0);
  const std::string found =
      "event=backstop_compute_unregistered gpu=0 group=- pids=" + std::to_string(rogue) + " ";
  ASSERT_TRUE(WaitFor([&] { return Read("err0").find(found) != std::string::npos; }, 20s))
      << Read("err0");
  EXPECT_NE(Metrics().find("gpuslice_backstop_findings_total{kind=\"compute_unregistered\"} 1\n"),
            std::string::npos)
      << Metrics();
  const std::string stream = ReadUntil(events, "event: backstop_compute_unregistered", 10s);
  close(events);
  const size_t at = stream.find("event: backstop_compute_unregistered");
  ASSERT_NE(at, std::string::npos) << stream;
  EXPECT_NE(stream.find("\"pids\":[" + std::to_string(rogue) + "]", at), std::string::npos)
      << stream.substr(at);
  EXPECT_EQ(Read("err0").find("event=backstop_throttle_started"), std::string::npos)
      << "report only (the default)";

  kill(rogue, SIGKILL);  // rogue > 0, checked above
  Join(rogue);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err0").find("event=backstop_compute_unregistered_gone gpu=0 group=- pids=" +
                                 std::to_string(rogue) + " ") != std::string::npos;
      },
      20s))
      << Read("err0");
}

// A registered tenant that runs without the limiter, far above its group's
// compute limit: with --compute-backstop throttle it is stopped part of each
// period, and continued for good when the daemon stops; a daemon that dies
// with it stopped continues it at its next start.
TEST_F(TierBackstopTest, WithThrottleAGroupOverItsComputeLimitIsThrottledAndNeverLeftStopped) {
  StartDaemon({"--compute-backstop", "throttle", "--compute-backstop-over-ms", "1000"});
  Tenant hog = StartTenant(
      R"({"group": "hog", "devices": [0], "limits": {"compute_percent": 20}})",
      {"gpuslice-workload", "--kernel-us", "1000", "--sync", "--duration-s", "120", "--quiet"});
  ASSERT_EQ(hog.status, 201) << hog.body.dump();
  ASSERT_GT(hog.pid, 0);
  const std::string started =
      "event=backstop_throttle_started gpu=0 group=hog pids=" + std::to_string(hog.pid) + " ";
  ASSERT_TRUE(WaitFor([&] { return Read("err0").find(started) != std::string::npos; }, 30s))
      << Read("err0");
  EXPECT_NE(Read("err0").find("event=backstop_over_compute_limit gpu=0 group=hog"),
            std::string::npos);
  EXPECT_TRUE(WaitFor([&] { return ProcState(hog.pid) == 'T'; }, 10s)) << "never seen stopped";
  EXPECT_TRUE(WaitFor([&] { return ProcState(hog.pid) != 'T'; }, 10s)) << "never continued";
  EXPECT_NE(Metrics().find("gpuslice_backstop_findings_total{kind=\"throttle_started\"} 1\n"),
            std::string::npos);
  // What it gets, by the simulator's own count of its GPU time (not NVML's):
  // a window of 6 s after 3 s for the run fraction to settle. Alone and
  // unthrottled it would keep the GPU busy (about 100 %).
  const auto busy_ns = [&] {
    return Process(Stats(), hog.pid)["devices"][0].value("busy_ns", int64_t{0});
  };
  const auto settled = std::chrono::steady_clock::now() + 3s;
  WaitFor([&] { return std::chrono::steady_clock::now() >= settled; }, 4s);
  const int64_t busy0 = busy_ns();
  const auto t0 = std::chrono::steady_clock::now();
  WaitFor([&] { return std::chrono::steady_clock::now() >= t0 + 6s; }, 7s);
  const double share = 100.0 * static_cast<double>(busy_ns() - busy0) /
                       static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::steady_clock::now() - t0)
                                               .count());
  std::cerr << "throttled share: " << share << " % (limit 20 %)\n";
  EXPECT_GT(share, 10) << Read("err0");
  EXPECT_LT(share, 30) << Read("err0");

  // A clean stop continues it, and says so.
  kill(daemon_, SIGTERM);  // daemon_ > 0: StartDaemon succeeded
  EXPECT_EQ(Join(daemon_), 0) << Read("err0");
  EXPECT_NE(Read("err0").find("event=backstop_throttle_stopped gpu=0 group=hog pids=" +
                              std::to_string(hog.pid)),
            std::string::npos)
      << Read("err0");
  EXPECT_NE(Read("err0").find("detail=\"the daemon stops\""), std::string::npos);
  EXPECT_NE(ProcState(hog.pid), 'T') << "left stopped by a daemon that stopped";

  // Again, and now the daemon is SIGKILLed with the tenant stopped (stopped
  // here if the duty cycle had just continued it, as at the worst instant).
  StartDaemon({"--compute-backstop", "throttle", "--compute-backstop-over-ms", "1000"}, 1);
  ASSERT_TRUE(WaitFor([&] { return Read("err1").find(started) != std::string::npos; }, 30s))
      << Read("err1");
  kill(daemon_, SIGKILL);  // daemon_ > 0
  Join(daemon_);
  if (ProcState(hog.pid) != 'T') kill(hog.pid, SIGSTOP);  // hog.pid > 0, checked above
  ASSERT_TRUE(WaitFor([&] { return ProcState(hog.pid) == 'T'; }, 5s));
  // The next start (reporting only, now) continues it before anything else.
  StartDaemon({}, 2);
  EXPECT_NE(Read("err2").find("event=backstop_throttle_recovered gpu=- group=- pids=" +
                              std::to_string(hog.pid) + " "),
            std::string::npos)
      << Read("err2");
  EXPECT_NE(ProcState(hog.pid), 'T');
  int status = 0;
  EXPECT_EQ(waitpid(hog.pid, &status, WNOHANG), 0) << "it runs on";
}

}  // namespace
}  // namespace gpuslice
