// The enforcer of each group's limits end to end (DESIGN.md section 5a;
// docs/backstop.md "Enforcers"): gpusliced on a private simulated GPU of an
// r615 node and of an older node, the same group and limit on both, and a
// tenant process in the group's own cgroup v2 directory (made here).
//  - r615: the daemon holds the group's memory by the driver's hard limit on
//    that cgroup, so a process WITHOUT the limiter is refused beyond it by the
//    (simulated) driver itself and sees the limit as its memory total; the
//    limit goes when the group's last member goes.
//  - older driver: the limiter holds it; a process without the limiter is
//    not held (which is why the limiter is there).
//  - both: a process with the limiter stays within the limit.
// The choice and its reason are checked in the API, the metrics, `gpuslice
// status` and `gpuslice gpu list`.
//
// Needs root and a writable cgroup v2 hierarchy; skipped saying why otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
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

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kLimit = 512 * kMiB;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Where the cgroup v2 hierarchy is mounted ("" if nowhere).
std::string CgroupV2Root() {
  std::istringstream mounts(ReadText("/proc/mounts"));
  std::string device, dir, type, rest;
  while (mounts >> device >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return dir;
  }
  return "";
}

struct Node {
  const char* name;
  const char* driver_version;
  bool r615;
};
// Names the node in test listings (GoogleTest prints an unknown type's bytes,
// pointers included, which change from run to run).
void PrintTo(const Node& node, std::ostream* os) { *os << node.name; }

class EnforcerTest : public testing::SimProcessTest, public ::testing::WithParamInterface<Node> {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root (cgroups, the driver's memory limits)";
    root_ = CgroupV2Root();
    if (root_.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted";
    base_ = root_ + "/gpuslice-enforcer-" + std::to_string(getpid());
    if (mkdir(base_.c_str(), 0755) != 0) {
      GTEST_SKIP() << "the cgroup v2 hierarchy at " << root_
                   << " is not writable here (mkdir: " << strerror(errno) << ")";
    }
    cgroup_ = base_ + "/train";
    ASSERT_EQ(mkdir(cgroup_.c_str(), 0755), 0) << strerror(errno);
    config_ =
        std::string(R"({"device_count":2,"driver_version":")") + GetParam().driver_version + "\"}";
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
  }
  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();
    // A cgroup is busy until its last process is reaped (done above).
    if (!cgroup_.empty()) rmdir(cgroup_.c_str());
    if (!base_.empty()) rmdir(base_.c_str());
  }

  std::vector<std::string> SimEnv() const {
    return {"GPUSLICE_SIM_CONFIG=" + config_, "GPUSLICE_SIM_CGROUP_ROOT=" + root_};
  }
  void StartDaemon() {
    daemon_ = StartProgram("gpusliced", 0,
                           {"--socket", socket_, "--poll-interval-ms", "100", "--log-level",
                            "debug", "--state-dir", dir_ + "/state", "--cgroup-root", root_,
                            "--mps-control", dir_ + "/no-mps-control", "--shm-dir", shm_dir_},
                           SimEnv());
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }
  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }
  std::string Metrics() {
    auto r = cli::UnixHttpClient(socket_, 10s).Request("GET", "/metrics");
    return r.ok() ? r->body : "";
  }
  std::string Cli(const std::vector<std::string>& args) {
    std::string cmd = BuildDir() + "/bin/gpuslice";
    for (const std::string& a : args) cmd += " '" + a + "'";
    cmd += " 2>&1";
    return testing::CommandOutput(cmd);
  }

  // A tenant of group "train" in the group's cgroup that registers itself
  // and then runs gpuslice-alloc-probe (64 MiB chunks, at most 1 GiB) with
  // `extra_env`; its first output line, once printed.
  json RunProbe(const std::vector<std::string>& extra_env) {
    return RunProbeIn("train", cgroup_, 16, extra_env);
  }
  // The same for a tenant of `group` in `cgroup`, at most `chunks` chunks.
  json RunProbeIn(const std::string& group, const std::string& cgroup, int chunks,
                  const std::vector<std::string>& extra_env) {
    testing::ForkedTenantOptions options;
    options.cgroup = cgroup;
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice-alloc-probe",
                                     "alloc",
                                     "--chunk",
                                     std::to_string(64 * kMiB),
                                     "--max",
                                     std::to_string(chunks),
                                     "--hold-s",
                                     "60"};
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_};
    for (const std::string& e : SimEnv()) env.push_back(e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    const std::string out = dir_ + "/probe" + std::to_string(++probes_) + ".out";
    options.then = [argv, env, out](const testing::TenantReply&) mutable {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      const int err = open((out + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0 || err < 0 || dup2(fd, 1) < 0 || dup2(err, 2) < 0) _exit(7);
      std::vector<char*> argv_c, env_c;
      for (auto& a : argv) argv_c.push_back(a.data());
      argv_c.push_back(nullptr);
      for (auto& e : env) env_c.push_back(e.data());
      env_c.push_back(nullptr);
      execve(argv_c[0], argv_c.data(), env_c.data());
    };
    testing::ForkedTenant t =
        tenants_.Start(R"({"group": ")" + group + R"(", "devices": [0]})", options);
    EXPECT_EQ(t.status, 201) << t.body.dump() << t.step_error;
    last_ = t;
    const std::string name = "probe" + std::to_string(probes_) + ".out";
    EXPECT_TRUE(WaitFor([&] { return Read(name).find("\"granted\"") != std::string::npos; }, 20s))
        << Read(name) << Read(name + ".err") << Read("err0");
    const std::string text = Read(name);
    return json::parse(text.substr(0, text.find('\n')), nullptr, false);
  }
  // The last probe's process ends (its memory in the cgroup is freed).
  void EndLastProbe() {
    const pid_t pid = last_.pid;
    if (pid > 0 && pid != testing::ForkedTenant::kNoProcess) kill(pid, SIGKILL);
    tenants_.Join(last_);
  }
  // What `nvidia-smi memory-limits` says of `cgroup` on GPU 0.
  std::string Smi(const std::string& cgroup) {
    std::string cmd;
    for (const std::string& e : SimEnv()) cmd += "'" + e + "' ";
    cmd = "env LD_LIBRARY_PATH='" + BuildDir() + "/sim/lib' GPUSLICE_SIM_STATE='" + state_ + "' " +
          cmd + "'" + BuildDir() + "/sim/bin/nvidia-smi' memory-limits -i 0 -c '" + cgroup +
          "' 2>&1";
    return testing::CommandOutput(cmd);
  }
  // The most memory process `pid` ever held on GPU 0, as the simulated driver
  // counted it (context and allocations).
  uint64_t PeakBytes(pid_t pid) {
    const json p = Process(Stats(), pid);
    if (!p.contains("devices")) return ~uint64_t{0};
    for (const json& d : p["devices"]) {
      if (d.value("index", -1) == 0) return d.value("peak_memory_bytes", ~uint64_t{0});
    }
    return 0;
  }

  std::string root_, base_, cgroup_, config_, socket_;
  pid_t daemon_ = kNoProcess;
  testing::ForkedTenants tenants_;
  testing::ForkedTenant last_;
  int probes_ = 0;
};

TEST_P(EnforcerTest, TheGroupsMemoryIsHeldByTheStrongestEnforcerTheNodeHas) {
  const bool r615 = GetParam().r615;
  StartDaemon();
  // What the node offers, as the API and the CLI show it.
  auto [gcode, gpus] = Call("GET", "/v1/gpus");
  ASSERT_EQ(gcode, 200);
  const json features = gpus["gpus"][0]["features"];
  EXPECT_EQ(features["driver_version"], GetParam().driver_version) << features.dump();
  EXPECT_EQ(features["memory_limits"], r615);
  EXPECT_EQ(features["cgroup_v2"], true);
  EXPECT_EQ(features["mig"], false);
  EXPECT_EQ(features["mps"]["available"], false) << "no control binary: " << features.dump();
  const std::string list = Cli({"gpu", "list", "--socket", socket_});
  EXPECT_NE(list.find(GetParam().driver_version), std::string::npos) << list;
  EXPECT_NE(list.find(r615 ? "driver" : "limiter"), std::string::npos) << list;

  auto [pcode, put] = Call("PUT", "/v1/groups/train",
                           R"({"limits": {"all": {"memory": "512MiB", "compute_percent": 50}},
                               "schedule": {"all": {"memory_request": "128MiB"}}})");
  ASSERT_EQ(pcode, 200) << put.dump();

  // Without the limiter.
  const json bare = RunProbe({});
  auto [code, group] = Call("GET", "/v1/groups/train");
  ASSERT_EQ(code, 200);
  const json enforcer = group["gpus"][0]["enforcer"];
  std::cerr << GetParam().name << ": GPU 0 " << enforcer.dump() << "\n"
            << "  without the limiter: " << bare.dump() << "\n";
  EXPECT_EQ(group["gpus"][0]["enforcer"]["compute"]["enforcer"], "limiter");
  if (r615) {
    EXPECT_EQ(enforcer["memory"]["enforcer"], "driver") << enforcer.dump();
    EXPECT_EQ(enforcer["memory"]["cgroup"], cgroup_);
    EXPECT_EQ(enforcer["memory"]["hard_bytes"], kLimit);
    EXPECT_EQ(enforcer["memory"]["soft_bytes"], 128 * kMiB);
    // The driver refused it beyond the hard limit, and it saw the limit.
    EXPECT_GT(bare.value("granted_bytes", uint64_t{0}), 0u) << bare.dump();
    EXPECT_LE(bare.value("granted_bytes", uint64_t{0}), kLimit) << bare.dump();
    EXPECT_NE(bare.value("error", ""), "") << bare.dump();
    EXPECT_EQ(bare.value("total", uint64_t{0}), kLimit) << bare.dump();
  } else {
    EXPECT_EQ(enforcer["memory"]["enforcer"], "limiter") << enforcer.dump();
    EXPECT_NE(enforcer["memory"]["reason"].get<std::string>().find("580.65.06"), std::string::npos);
    // Nothing but the limiter would have held it.
    EXPECT_EQ(bare.value("granted_bytes", uint64_t{0}), uint64_t{16} * 64 * kMiB) << bare.dump();
  }
  const std::string metric =
      std::string(
          R"(gpuslice_group_enforcer{group="train",gpu="0",dimension="memory",enforcer=")") +
      (r615 ? R"(driver",reason="driver_hard_limit"} 1)"
            : R"(limiter",reason="driver_without_memory_limits"} 1)");
  EXPECT_NE(Metrics().find(metric), std::string::npos) << Metrics();
  const std::string status = Cli({"status", "--socket", socket_, "--shm-dir", shm_dir_});
  EXPECT_NE(status.find(std::string("enforcer GPU 0: memory ") + (r615 ? "driver" : "limiter")),
            std::string::npos)
      << status;
  const pid_t first = last_.pid;  // its memory in the cgroup is freed when it exits
  if (first > 0 && first != testing::ForkedTenant::kNoProcess) kill(first, SIGKILL);
  tenants_.Join(last_);

  // The group's last member gone: its driver limit goes.
  if (r615) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return Read("err0").find("event=driver_limit_cleared group=train") != std::string::npos;
        },
        10s))
        << Read("err0");
    const std::string smi = Smi(cgroup_);
    EXPECT_NE(smi.find("Hard Limit                        : None"), std::string::npos) << smi;
  }
  // With the limiter: held to the limit on both nodes.
  const json held =
      RunProbe({"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
                "GPUSLICE_GROUP=train", "GPUSLICE_MEMORY_LIMIT=512MiB"});
  std::cerr << "  with the limiter: " << held.dump() << "\n";
  EXPECT_GT(held.value("granted_bytes", uint64_t{0}), 0u) << held.dump();
  EXPECT_LE(held.value("granted_bytes", uint64_t{0}), kLimit) << held.dump();
  EXPECT_LE(held.value("total", uint64_t{0}), kLimit) << held.dump();
}

// A clean stop clears the driver limits the daemon set (docs/backstop.md
// "Enforcers"), while the group still has a member.
TEST_P(EnforcerTest, ACleanStopClearsTheDriverLimitsOfGroupsStillThere) {
  if (!GetParam().r615) GTEST_SKIP() << "no driver limits on an older driver";
  StartDaemon();
  auto [pcode, put] =
      Call("PUT", "/v1/groups/train", R"({"limits": {"all": {"memory": "512MiB"}}})");
  ASSERT_EQ(pcode, 200) << put.dump();
  const json bare = RunProbe({});
  ASSERT_LE(bare.value("granted_bytes", uint64_t{0}), kLimit) << bare.dump();
  // What the driver holds, as nvidia-smi shows it.
  auto smi = [&] { return Smi(cgroup_); };
  const std::string before = smi();
  EXPECT_NE(before.find("512 MiB"), std::string::npos) << before;
  ASSERT_GT(daemon_, 0);
  ASSERT_EQ(kill(daemon_, SIGTERM), 0);
  EXPECT_EQ(Join(daemon_), 0) << Read("err0");
  EXPECT_NE(Read("err0").find("event=driver_limit_cleared group=train"), std::string::npos)
      << Read("err0");
  const std::string after = smi();
  EXPECT_EQ(after.find("512 MiB"), std::string::npos) << after;
  EXPECT_NE(after.find("Hard Limit                        : None"), std::string::npos) << after;
}

// Two groups with the same limits on both nodes (issue 16's tests): each
// tenant sees its own slice and never holds more than its limit, with the
// limiter and, on r615, without it (the driver refuses); a live limit change
// reaches whichever enforcer holds the limit. The simulator's per-process
// peak is the ground truth for "never more than the limit".
TEST_P(EnforcerTest, TwoGroupsSeeTheirSlicesAndALimitChangeReachesTheirEnforcer) {
  const bool r615 = GetParam().r615;
  const std::string infer = base_ + "/infer";
  ASSERT_EQ(mkdir(infer.c_str(), 0755), 0) << strerror(errno);
  struct Cleanup {
    std::string dir;
    testing::ForkedTenants* tenants;
    ~Cleanup() {
      tenants->KillAll();
      rmdir(dir.c_str());
    }
  } cleanup{infer, &tenants_};
  StartDaemon();
  const uint64_t train_limit = 768 * kMiB, infer_limit = 512 * kMiB;
  ASSERT_EQ(Call("PUT", "/v1/groups/train", R"({"limits": {"all": {"memory": "768MiB"}}})").first,
            200);
  ASSERT_EQ(Call("PUT", "/v1/groups/infer", R"({"limits": {"all": {"memory": "512MiB"}}})").first,
            200);
  const std::vector<std::string> limiter = {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so",
                                            "GPUSLICE_SHM_DIR=" + shm_dir_,
                                            "GPUSLICE_SOCKET=" + socket_};
  // No limit of its own: it registers and gets its group's from the daemon.
  auto with_limiter = [&](const std::string& group) {
    std::vector<std::string> env = limiter;
    env.push_back("GPUSLICE_GROUP=" + group);
    return env;
  };
  // Each probe asks for up to 1.5 GiB (24 x 64 MiB): more than either limit.
  for (const bool preload : {false, true}) {
    const json t = RunProbeIn("train", cgroup_, 24,
                              preload ? with_limiter("train") : std::vector<std::string>{});
    const pid_t tp = last_.pid;
    const testing::ForkedTenant train_tenant = last_;
    const json i = RunProbeIn("infer", infer, 24,
                              preload ? with_limiter("infer") : std::vector<std::string>{});
    const pid_t ip = last_.pid;
    const json groups[] = {Call("GET", "/v1/groups/train").second,
                           Call("GET", "/v1/groups/infer").second};
    std::cerr << GetParam().name << (preload ? " with" : " without") << " the limiter: train "
              << t.dump() << " peak " << (PeakBytes(tp) >> 20) << " MiB, infer " << i.dump()
              << " peak " << (PeakBytes(ip) >> 20) << " MiB; enforcers train "
              << groups[0]["gpus"][0]["enforcer"]["memory"].dump() << ", infer "
              << groups[1]["gpus"][0]["enforcer"]["memory"].dump() << "\n";
    for (const json& g : groups) {
      EXPECT_EQ(g["gpus"][0]["enforcer"]["memory"]["enforcer"], r615 ? "driver" : "limiter")
          << g.dump();
    }
    if (preload || r615) {
      // Held: each sees its own slice as its memory total and stays in it.
      EXPECT_EQ(t.value("total", uint64_t{0}), train_limit) << t.dump();
      EXPECT_EQ(i.value("total", uint64_t{0}), infer_limit) << i.dump();
      EXPECT_NE(t.value("error", ""), "") << "refused at the limit: " << t.dump();
      EXPECT_NE(i.value("error", ""), "") << "refused at the limit: " << i.dump();
      EXPECT_LE(PeakBytes(tp), train_limit);
      EXPECT_LE(PeakBytes(ip), infer_limit);
      EXPECT_GT(t.value("granted_bytes", uint64_t{0}), 0u) << t.dump();
      EXPECT_GT(i.value("granted_bytes", uint64_t{0}), 0u) << i.dump();
    } else {
      // An older node without the limiter: nothing holds them.
      EXPECT_EQ(t.value("granted_bytes", uint64_t{0}), uint64_t{24} * 64 * kMiB) << t.dump();
      EXPECT_EQ(i.value("granted_bytes", uint64_t{0}), uint64_t{24} * 64 * kMiB) << i.dump();
    }
    if (r615) {
      EXPECT_NE(Smi(cgroup_).find("768 MiB"), std::string::npos) << Smi(cgroup_);
      EXPECT_NE(Smi(infer).find("512 MiB"), std::string::npos) << Smi(infer);
    }
    EndLastProbe();  // infer's
    last_ = train_tenant;
    EndLastProbe();
  }

  // A live limit change: train 768 -> 640 MiB goes to the driver on r615
  // (which the next process, limiter or not, meets) and to the limiter on the
  // older node.
  ASSERT_EQ(Call("PUT", "/v1/groups/train", R"({"limits": {"all": {"memory": "640MiB"}}})").first,
            200);
  const uint64_t lowered = 640 * kMiB;
  const json after =
      RunProbeIn("train", cgroup_, 24, r615 ? std::vector<std::string>{} : with_limiter("train"));
  const pid_t ap = last_.pid;
  const json enforcer = Call("GET", "/v1/groups/train").second["gpus"][0]["enforcer"]["memory"];
  std::cerr << GetParam().name << " after the change to 640 MiB (" << (r615 ? "without" : "with")
            << " the limiter): " << after.dump() << " peak " << (PeakBytes(ap) >> 20)
            << " MiB; enforcer " << enforcer.dump() << "\n";
  EXPECT_EQ(after.value("total", uint64_t{0}), lowered) << after.dump();
  EXPECT_LE(PeakBytes(ap), lowered);
  EXPECT_GT(after.value("granted_bytes", uint64_t{0}), 0u) << after.dump();
  if (r615) {
    EXPECT_EQ(enforcer["enforcer"], "driver") << enforcer.dump();
    EXPECT_EQ(enforcer["hard_bytes"], lowered) << enforcer.dump();
    EXPECT_NE(Smi(cgroup_).find("640 MiB"), std::string::npos) << Smi(cgroup_);
  } else {
    EXPECT_EQ(enforcer["enforcer"], "limiter") << enforcer.dump();
  }
  EndLastProbe();
}

// Detection is per GPU: on an r615 node whose GPU 0 is in MIG mode, GET
// /v1/gpus says so for GPU 0 only, and a group on both GPUs has its memory
// held by the driver on GPU 1 and by the limiter on GPU 0 (the driver's
// limits do not apply to MIG), each saying why, in the API, `gpuslice
// status`, the metrics and `gpuslice gpu list`.
TEST_P(EnforcerTest, AMigGpuLeavesMemoryToTheLimiterWhileTheOtherGpuHasTheDriver) {
  if (!GetParam().r615) GTEST_SKIP() << "the driver's limits need r615";
  config_ = std::string(R"({"driver_version":")") + GetParam().driver_version +
            R"(","devices":[{"mig":true},{}]})";
  StartDaemon();
  auto [gcode, gpus] = Call("GET", "/v1/gpus");
  ASSERT_EQ(gcode, 200);
  EXPECT_EQ(gpus["gpus"][0]["features"]["mig"], true) << gpus.dump();
  EXPECT_EQ(gpus["gpus"][1]["features"]["mig"], false) << gpus.dump();
  const std::string list = Cli({"gpu", "list", "--socket", socket_});
  EXPECT_NE(list.find("limiter (MIG)"), std::string::npos) << list;

  ASSERT_EQ(Call("PUT", "/v1/groups/train", R"({"limits": {"all": {"memory": "512MiB"}}})").first,
            200);
  testing::ForkedTenantOptions options;
  options.cgroup = cgroup_;
  testing::ForkedTenant t = tenants_.Start(R"({"group": "train", "devices": [0, 1]})", options);
  ASSERT_EQ(t.status, 201) << t.body.dump() << t.step_error;
  const json group = Call("GET", "/v1/groups/train").second;
  json on[2];
  for (const json& g : group["gpus"]) on[g.value("index", 0) == 1 ? 1 : 0] = g["enforcer"];
  std::cerr << "MIG GPU 0: " << on[0].dump() << "\nGPU 1: " << on[1].dump() << "\n";
  EXPECT_EQ(on[0]["memory"]["enforcer"], "limiter") << group.dump();
  EXPECT_NE(on[0]["memory"].value("reason", "").find("MIG"), std::string::npos) << on[0].dump();
  EXPECT_EQ(on[1]["memory"]["enforcer"], "driver") << group.dump();
  EXPECT_EQ(on[1]["memory"]["hard_bytes"], kLimit) << on[1].dump();
  const std::string status = Cli({"status", "--socket", socket_, "--shm-dir", shm_dir_});
  EXPECT_NE(status.find("enforcer GPU 0: memory limiter"), std::string::npos) << status;
  EXPECT_NE(status.find("enforcer GPU 1: memory driver"), std::string::npos) << status;
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(gpuslice_group_enforcer{group="train",gpu="0",dimension="memory",)"
                         R"(enforcer="limiter",reason="mig"} 1)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(gpuslice_group_enforcer{group="train",gpu="1",dimension="memory",)"
                         R"(enforcer="driver",reason="driver_hard_limit"} 1)"),
            std::string::npos)
      << metrics;
  tenants_.Release(t);
}

INSTANTIATE_TEST_SUITE_P(Nodes, EnforcerTest,
                         ::testing::Values(Node{"old", "580.65.06", false},
                                           Node{"r615", "615.10", true}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace gpuslice
