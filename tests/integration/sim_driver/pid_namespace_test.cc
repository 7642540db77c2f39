// Tenants in real PID namespaces (`unshare --pid --fork --mount-proc`) on the
// simulated GPU, as on a container node: the simulated NVML must report their
// host pids (NVIDIA's driver knows every process by its host pid), a tenant
// must never be taken for dead by a process of another namespace, and a dead
// tenant must still be reclaimed. The host pid comes from the simulator's node
// helper (gpuslice-sim-node, started here outside the namespace).
//
// Needs permission to create PID and mount namespaces (CI runs as root);
// skipped with the reason otherwise.
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nvml_abi/nvml.h"
#include "sim/core/node_helper.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::testing {
namespace {

using std::chrono::milliseconds;
constexpr char kUnshare[] = "/usr/bin/unshare";

// Whether this process may create PID + mount namespaces; why not otherwise.
std::string UnshareRefusal() {
  if (access(kUnshare, X_OK) != 0) return std::string(kUnshare) + " is not installed";
  const std::string cmd = std::string(kUnshare) + " --pid --fork --mount-proc true >/dev/null 2>&1";
  if (system(cmd.c_str()) != 0) {  // NOLINT(cert-env33-c): a fixed command line
    return "unshare --pid --fork --mount-proc is not permitted here (needs root or "
           "CAP_SYS_ADMIN)";
  }
  return "";
}

// Field 4 (ppid) of /proc/<pid>/stat; -1 if unreadable.
pid_t ParentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  char state = 0;
  int ppid = -1;
  if (sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) return -1;
  return ppid;
}

// The (first) child of `parent`, by its host pid; 0 if none.
pid_t ChildOf(pid_t parent) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(proc)) {
    const auto pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid > 0 && ParentOf(pid) == parent) {
      found = pid;
      break;
    }
  }
  closedir(proc);
  return found;
}

// The simulated NVML, loaded by path into this process.
struct Nvml {
  void* lib = nullptr;
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
  decltype(&::nvmlSystemGetProcessName) name = nullptr;
};

const Nvml& LoadNvml() {
  static const Nvml nvml = [] {
    Nvml n;
    n.lib = dlopen((BuildDir() + "/sim/lib/libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n.lib == nullptr) return n;
    n.init = reinterpret_cast<decltype(n.init)>(dlsym(n.lib, "nvmlInit_v2"));
    n.shutdown = reinterpret_cast<decltype(n.shutdown)>(dlsym(n.lib, "nvmlShutdown"));
    n.handle = reinterpret_cast<decltype(n.handle)>(dlsym(n.lib, "nvmlDeviceGetHandleByIndex_v2"));
    n.processes = reinterpret_cast<decltype(n.processes)>(
        dlsym(n.lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    n.name = reinterpret_cast<decltype(n.name)>(dlsym(n.lib, "nvmlSystemGetProcessName"));
    return n;
  }();
  return nvml;
}

class PidNamespaceTest : public SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    if (std::string why = UnshareRefusal(); !why.empty()) GTEST_SKIP() << why;
  }

  std::string HelperSocket() const { return state_ + ".node"; }

  // Starts gpuslice-sim-node outside any namespace and waits until it answers.
  void StartNodeHelper(int n) {
    StartProgram(BuildDir() + "/sim/bin/gpuslice-sim-node", n, {"--socket", HelperSocket()});
    ASSERT_TRUE(
        WaitFor([&] { return sim::AskNodeHelper(HelperSocket(), 100).ok(); }, milliseconds(10000)))
        << Read("err" + std::to_string(n));
  }

  // Starts gpuslice-workload as pid 1 of a new PID namespace, with a /proc of
  // its own (`mount_proc`) or the host's. Returns the unshare process; the
  // workload is its child.
  pid_t StartInNamespace(int n, const std::vector<std::string>& args, bool mount_proc = true) {
    std::vector<std::string> argv = {"--pid", "--fork"};
    if (mount_proc) argv.emplace_back("--mount-proc");
    argv.emplace_back("--kill-child");
    argv.push_back(BuildDir() + "/bin/gpuslice-workload");
    argv.insert(argv.end(), args.begin(), args.end());
    return StartProgram(kUnshare, n, argv);
  }

  // The host pid of the namespace's pid 1 (the workload) under `unshare_pid`.
  pid_t TenantOf(pid_t unshare_pid) {
    pid_t tenant = 0;
    WaitFor([&] { return (tenant = ChildOf(unshare_pid)) != 0; }, milliseconds(10000));
    return tenant;
  }

  // Pids in NVML's compute process list of device 0 (empty on any error).
  std::set<unsigned> NvmlComputePids() {
    const Nvml& n = LoadNvml();
    std::set<unsigned> pids;
    if (n.init == nullptr || n.processes == nullptr) {
      ADD_FAILURE() << "cannot load the simulated NVML";
      return pids;
    }
    setenv("GPUSLICE_SIM_STATE", state_.c_str(), 1);
    if (n.init() != NVML_SUCCESS) return pids;
    nvmlDevice_t dev = nullptr;
    nvmlProcessInfo_t infos[32];
    unsigned count = 32;
    if (n.handle(0, &dev) == NVML_SUCCESS && n.processes(dev, &count, infos) == NVML_SUCCESS) {
      for (unsigned i = 0; i < count; ++i) pids.insert(infos[i].pid);
    }
    n.shutdown();
    return pids;
  }
};

// (a) NVML lists a namespaced tenant under its host pid, not as pid 1, whether
// the tenant's /proc is its namespace's own or the host's.
class PidNamespaceNvmlTest : public PidNamespaceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PidNamespaceNvmlTest, NvmlReportsTheHostPidOfANamespacedTenant) {
  StartNodeHelper(0);
  const pid_t unshare_pid =
      StartInNamespace(1, {"--alloc", "67108864", "--hold-s", "60"}, /*mount_proc=*/GetParam());
  const pid_t tenant = TenantOf(unshare_pid);
  ASSERT_GT(tenant, 1) << "no child of unshare: " << Read("err1");
  ASSERT_TRUE(WaitFor([&] { return NvmlComputePids().contains(static_cast<unsigned>(tenant)); },
                      milliseconds(10000)))
      << "NVML lists no pid " << tenant << ": " << Read("err1");
  EXPECT_FALSE(NvmlComputePids().contains(1u));
  // The driver's record names it, whatever this process's /proc shows.
  const Nvml& nvml = LoadNvml();
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  char name[64] = "";
  EXPECT_EQ(nvml.name(static_cast<unsigned>(tenant), name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "gpuslice-worklo");  // comm: 15 characters
  nvml.shutdown();
  // Ground truth: the record holds the host pid, learned from the helper, and
  // the tenant's own view of itself.
  const json p = Process(Stats(), tenant);
  ASSERT_FALSE(p.empty()) << Stats().dump();
  EXPECT_EQ(p["local_pid"], 1);
  EXPECT_EQ(p["host_pid"], true);
  EXPECT_EQ(p["status"], "running");
  EXPECT_GE(p["devices"][0]["memory_bytes"].get<uint64_t>(), 64u << 20);
}

INSTANTIATE_TEST_SUITE_P(Proc, PidNamespaceNvmlTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "OwnProc" : "HostProc"; });

// (b) A namespaced tenant and a host process launch side by side; neither is
// taken for dead by the other (the namespaced one is pid 1 in its namespace,
// and the host's pid 1 is another process). With and without the node helper
// (without it the tenant is recorded by its namespace pid and namespace), and
// with the namespace's own /proc or the host's.
class PidNamespaceSideBySideTest : public PidNamespaceTest,
                                   public ::testing::WithParamInterface<std::tuple<bool, bool>> {};

TEST_P(PidNamespaceSideBySideTest, NamespacedTenantSurvivesBesideAHostProcess) {
  const auto [with_helper, mount_proc] = GetParam();
  if (with_helper) StartNodeHelper(0);
  const std::vector<std::string> args = {"--kernel-us", "500", "--duration-s", "1.5", "--quiet"};
  const pid_t host = Start(1, args);
  const pid_t unshare_pid = StartInNamespace(2, args, mount_proc);
  // Both registered at once: from here on each one's reaper looks at the other.
  ASSERT_TRUE(WaitFor(
      [&] {
        int running = 0;
        for (const auto& p : Stats().value("processes", json::array())) {
          running += p["status"] == "running" ? 1 : 0;
        }
        return running == 2;
      },
      milliseconds(10000)));
  EXPECT_EQ(Join(host), 0) << Read("err1");
  EXPECT_EQ(Join(unshare_pid), 0) << Read("err2");
  const json stats = Stats();
  for (const auto& p : stats["processes"]) {
    EXPECT_GT(p["devices"][0]["kernels"].get<uint64_t>(), 100u) << p.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(NodeHelper, PidNamespaceSideBySideTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) ? "WithHelper" : "NoHelper") +
                                  (std::get<1>(p.param) ? "OwnProc" : "HostProc");
                         });

// (c) A namespaced tenant that dies is reclaimed by a process of the host's
// view (here this test, reading the stats) like any dead process.
TEST_F(PidNamespaceTest, DeadNamespacedTenantIsReclaimed) {
  StartNodeHelper(0);
  const pid_t unshare_pid = StartInNamespace(1, {"--alloc", "1073741824", "--hold-s", "60"});
  const pid_t tenant = TenantOf(unshare_pid);
  ASSERT_GT(tenant, 1) << Read("err1");
  ASSERT_TRUE(WaitFor(
      [&] {
        const json p = Process(Stats(), tenant);
        return !p.empty() && p["devices"][0]["memory_bytes"].get<uint64_t>() >= (1ull << 30);
      },
      milliseconds(10000)))
      << Read("err1");
  const uint64_t used_before = Stats()["devices"][0]["memory_used_bytes"].get<uint64_t>();
  ASSERT_EQ(kill(tenant, SIGKILL), 0);
  Join(unshare_pid);
  ASSERT_TRUE(
      WaitFor([&] { return Process(Stats(), tenant)["status"] == "exited"; }, milliseconds(5000)))
      << Stats().dump();
  const json after = Stats();
  EXPECT_EQ(Process(after, tenant)["devices"][0]["memory_bytes"], 0);
  EXPECT_LE(after["devices"][0]["memory_used_bytes"].get<uint64_t>() + (1ull << 30), used_before);
}

}  // namespace
}  // namespace gpuslice::testing
