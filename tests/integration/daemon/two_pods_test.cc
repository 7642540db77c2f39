// Two "pods" on one node (issue 12, "Tests"): each is a real process tree in
// a PID namespace of its own (`unshare --pid --fork --mount-proc`), placed in
// a cgroup of a shape the kubelet makes (cgroup v2; the systemd driver with
// containerd for one pod, the cgroupfs driver for the other), made here.
// Their limited processes (libgpuslice.so preloaded) register with the real
// gpusliced on the simulated GPU; the registry must name each by its pod UID,
// container id, container pid and host pid, and a process of one pod can
// neither join the other's group nor raise its limits.
//
// Needs root (namespaces, cgroups; CI runs as root) and a writable cgroup v2
// hierarchy; skipped saying why otherwise. The cgroups made are removed.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
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

constexpr char kUnshare[] = "/usr/bin/unshare";
constexpr char kSimConfig[] = R"({"device_count":2})";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Where the cgroup v2 hierarchy is mounted ("" if nowhere): /sys/fs/cgroup
// on a unified host, /sys/fs/cgroup/unified on a hybrid one.
std::string CgroupV2Root() {
  std::istringstream mounts(ReadText("/proc/mounts"));
  std::string device, dir, type;
  std::string rest;
  while (mounts >> device >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return dir;
  }
  return "";
}

// Field 4 (ppid) of /proc/<pid>/stat; -1 if unreadable.
pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
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

std::string RandomHex(std::mt19937_64& rng, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kHex[rng() % 16];
  return s;
}

// A pod: its UID, its container's id, and the cgroup directories made for
// it (parents first; only those this test created, so removed after).
struct Pod {
  std::string uid;           // 8-4-4-4-12, lower case
  std::string container_id;  // 64 hex
  std::string cgroup;        // the container's cgroup directory (absolute)
  std::string cgroup_path;   // as /proc/<pid>/cgroup shows it
  std::string qos;
  std::string runtime;
  std::vector<std::string> made;
};

class TwoPodsTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root (pid namespaces, cgroups)";
    if (access(kUnshare, X_OK) != 0) GTEST_SKIP() << kUnshare << " is not installed";
    if (system("/usr/bin/unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "unshare --pid --fork --mount-proc is not permitted here";
    }
    root_ = CgroupV2Root();
    if (root_.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted (see /proc/mounts)";
    const std::string probe = root_ + "/gpuslice-probe-" + std::to_string(getpid());
    if (mkdir(probe.c_str(), 0755) != 0) {
      GTEST_SKIP() << "the cgroup v2 hierarchy at " << root_
                   << " is not writable here (mkdir: " << strerror(errno) << ")";
    }
    const bool is_cgroup = access((probe + "/cgroup.procs").c_str(), F_OK) == 0;
    rmdir(probe.c_str());
    if (!is_cgroup) GTEST_SKIP() << root_ << " holds no cgroup.procs: not a cgroup hierarchy";
    socket_ = dir_ + "/gpusliced.sock";
    tenants_.set_socket(socket_);
  }

  void TearDown() override {
    tenants_.KillAll();
    SimProcessTest::TearDown();  // the pods' unshare processes (--kill-child) and the daemon
    for (Pod& pod : pods_) RemoveCgroups(pod);
  }

  // Makes the cgroup of a pod's container: the systemd driver's shape
  // (kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
  // cri-containerd-<id>.scope) or the cgroupfs driver's
  // (kubepods/<qos>/pod<uid>/<id>).
  Pod MakePod(bool systemd_driver, const std::string& qos) {
    std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(getpid()));
    Pod pod;
    pod.uid = RandomHex(rng, 8) + "-" + RandomHex(rng, 4) + "-" + RandomHex(rng, 4) + "-" +
              RandomHex(rng, 4) + "-" + RandomHex(rng, 12);
    pod.container_id = RandomHex(rng, 64);
    pod.qos = qos;
    std::vector<std::string> parts;
    if (systemd_driver) {
      std::string underscored = pod.uid;
      std::replace(underscored.begin(), underscored.end(), '-', '_');
      parts = {"kubepods.slice", "kubepods-" + qos + ".slice",
               "kubepods-" + qos + "-pod" + underscored + ".slice",
               "cri-containerd-" + pod.container_id + ".scope"};
      pod.runtime = "containerd";
    } else {
      parts = {"kubepods", qos, "pod" + pod.uid, pod.container_id};
    }
    std::string dir = root_;
    for (const std::string& part : parts) {
      dir += "/" + part;
      pod.cgroup_path += "/" + part;
      if (mkdir(dir.c_str(), 0755) == 0) {
        pod.made.push_back(dir);
      } else if (errno != EEXIST) {
        ADD_FAILURE() << "mkdir " << dir << ": " << strerror(errno);
      }
    }
    pod.cgroup = dir;
    pods_.push_back(pod);
    return pod;
  }

  // Removes what MakePod made, innermost first, once its processes are gone
  // (a cgroup is busy until its last process is reaped).
  static void RemoveCgroups(Pod& pod) {
    std::reverse(pod.made.begin(), pod.made.end());
    for (const std::string& dir : pod.made) {
      const bool removed = WaitFor([&] { return rmdir(dir.c_str()) == 0 || errno == ENOENT; }, 5s);
      EXPECT_TRUE(removed) << "cannot remove the cgroup " << dir << ": " << strerror(errno);
    }
    pod.made.clear();
  }

  void StartDaemon() {
    daemon_ = StartProgram("gpusliced", next_++,
                           {"--socket", socket_, "--poll-interval-ms", "100", "--log-level",
                            "debug", "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_},
                           {std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }

  // The simulator's node helper (host pids for namespaced processes).
  void StartNodeHelper() {
    StartProgram(BuildDir() + "/sim/bin/gpuslice-sim-node", next_++,
                 {"--socket", state_ + ".node"});
  }

  // Starts, in `pod`'s cgroup, `unshare --pid --fork --mount-proc` running
  // gpuslice-alloc-probe with the limiter preloaded (registering on the
  // daemon's socket) as pid 1 of the new namespace; holds 64 MiB for a
  // minute. Returns the unshare process (the probe is its child); its log is
  // "err<n>".
  pid_t StartPodProcess(const Pod& pod, int n, const std::vector<std::string>& extra_env) {
    std::vector<std::string> argv = {"/bin/sh",
                                     "-c",
                                     R"(echo 0 > "$1/cgroup.procs" && shift && exec "$@")",
                                     "sh",
                                     pod.cgroup,
                                     kUnshare,
                                     "--pid",
                                     "--fork",
                                     "--mount-proc",
                                     "--kill-child",
                                     BuildDir() + "/bin/gpuslice-alloc-probe",
                                     "alloc",
                                     "--chunk",
                                     std::to_string(64 << 20),
                                     "--max",
                                     "1",
                                     "--hold-s",
                                     "60"};
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_,
                                    std::string("GPUSLICE_SIM_CONFIG=") + kSimConfig,
                                    "LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so",
                                    "GPUSLICE_SHM_DIR=" + shm_dir_,
                                    "GPUSLICE_SOCKET=" + socket_,
                                    "GPUSLICE_LOG_LEVEL=debug"};
    for (const std::string& e : extra_env) {  // replaces a default of the same name
      const std::string name = e.substr(0, e.find('=') + 1);
      std::erase_if(env, [&](const std::string& d) { return d.starts_with(name); });
      env.push_back(e);
    }
    return Spawn(n, argv, env);
  }

  // Every tenant, by host pid.
  std::map<int, json> Tenants() {
    std::map<int, json> out;
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/v1/tenants");
    if (!r.ok() || r->status != 200) return out;
    const json body = json::parse(r->body, nullptr, false);
    if (!body.is_object()) return out;
    for (const json& t : body.value("tenants", json::array())) out[t["host_pid"].get<int>()] = t;
    return out;
  }

  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    return testing::CallDaemon(socket_, method, target, body);
  }

  std::string root_, socket_;
  pid_t daemon_ = kNoProcess;
  int next_ = 0;
  std::vector<Pod> pods_;
  testing::ForkedTenants tenants_;
};

TEST_F(TwoPodsTest, EachPodIsIdentifiedAndNeitherCanJoinOrRaiseTheOthersGroup) {
  StartDaemon();  // err0
  StartNodeHelper();
  const Pod a = MakePod(/*systemd_driver=*/true, "burstable");
  const Pod b = MakePod(/*systemd_driver=*/false, "besteffort");
  ASSERT_FALSE(HasFailure());
  // No GPUSLICE_GROUP: each limiter's group is its pod ("pod-<uid>").
  const pid_t unshare_a = StartPodProcess(
      a, next_++, {"POD_NAME=web-0", "POD_NAMESPACE=prod", "GPUSLICE_MEMORY_LIMIT=512MiB"});
  const int log_a = next_ - 1;
  const pid_t unshare_b = StartPodProcess(b, next_++, {"POD_NAME=batch-0"});
  const int log_b = next_ - 1;

  pid_t host_a = 0, host_b = 0;
  ASSERT_TRUE(WaitFor([&] { return (host_a = ChildOf(unshare_a)) > 1; }, 10s)) << Read("err1");
  ASSERT_TRUE(WaitFor([&] { return (host_b = ChildOf(unshare_b)) > 1; }, 10s)) << Read("err2");
  std::map<int, json> tenants;
  ASSERT_TRUE(WaitFor(
      [&] {
        tenants = Tenants();
        return tenants.contains(host_a) && tenants.contains(host_b);
      },
      20s))
      << "tenants: " << json(Tenants()).dump() << "\ndaemon:\n"
      << Read("err0") << "\npod a:\n"
      << Read("err" + std::to_string(log_a)) << "\npod b:\n"
      << Read("err" + std::to_string(log_b));
  EXPECT_EQ(tenants.size(), 2u);

  for (const auto& [pod, host_pid] : {std::pair{&a, host_a}, std::pair{&b, host_b}}) {
    const json& t = tenants[host_pid];
    SCOPED_TRACE(t.dump());
    // The host's own view of the process, for the record.
    const std::string own_cgroup = ReadText("/proc/" + std::to_string(host_pid) + "/cgroup");
    EXPECT_NE(own_cgroup.find(pod->cgroup_path), std::string::npos) << own_cgroup;
    EXPECT_EQ(t["host_pid"], host_pid);
    EXPECT_EQ(t["container_pid"], 1);  // pid 1 of its namespace
    EXPECT_EQ(t["pod_uid"], pod->uid);
    EXPECT_EQ(t["container_id"], pod->container_id);
    EXPECT_EQ(t["runtime"], pod->runtime);
    EXPECT_EQ(t["qos"], pod->qos);
    EXPECT_EQ(t["group"], "pod-" + pod->uid);
    EXPECT_NE(t["cgroup"].get<std::string>().find(pod->cgroup_path), std::string::npos);
    EXPECT_TRUE(t["hint_conflicts"].empty());
  }
  EXPECT_EQ(tenants[host_a]["pod"], "web-0");
  EXPECT_EQ(tenants[host_a]["namespace"], "prod");
  EXPECT_EQ(tenants[host_a]["requested_limits"].dump().find("536870912") != std::string::npos, true)
      << tenants[host_a].dump();
  EXPECT_EQ(tenants[host_b]["pod"], "batch-0");

  // An admin caps pod a's group; a process of pod b (in b's cgroup, its own
  // pid namespace) tries to join that group, asking for more: refused, and
  // nothing of a's group changes.
  const std::string group_a = "pod-" + a.uid;
  ASSERT_EQ(
      Call("PUT", "/v1/groups/" + group_a, R"({"limits": {"all": {"memory": "1GiB"}}})").first,
      200);
  testing::ForkedTenantOptions intruder_options;
  intruder_options.cgroup = b.cgroup;
  intruder_options.own_pid_namespace = true;
  testing::ForkedTenant intruder = tenants_.Start(
      R"({"group": ")" + group_a + R"(", "limits": {"memory": "8GiB"}})", intruder_options);
  EXPECT_EQ(intruder.step_error, "");
  EXPECT_EQ(intruder.status, 403) << intruder.body.dump();
  const std::string message = intruder.body["error"].value("message", "");
  EXPECT_NE(message.find("in pod " + a.uid), std::string::npos) << message;
  EXPECT_NE(message.find("in pod " + b.uid + " may not join it"), std::string::npos) << message;
  // Nor under pod a's uid as a hint: the daemon reads the cgroup, not the claim.
  testing::ForkedTenant forger =
      tenants_.Start(R"({"group": ")" + group_a + R"(", "hints": {"pod_uid": ")" + a.uid + R"("}})",
                     intruder_options);
  EXPECT_EQ(forger.status, 403) << forger.body.dump();

  // The same through the limiter: another process of pod b naming a's group
  // (with pod b's own segment directory, as a pod's mount gives it).
  const int log_c = next_;
  const pid_t unshare_c =
      StartPodProcess(b, next_++,
                      {"GPUSLICE_GROUP=" + group_a, "GPUSLICE_MEMORY_LIMIT=8GiB",
                       "GPUSLICE_SHM_DIR=" + dir_ + "/shm-of-pod-b"});
  pid_t host_c = 0;
  ASSERT_TRUE(WaitFor([&] { return (host_c = ChildOf(unshare_c)) > 1; }, 10s));
  const std::string refusal =
      "gpusliced refused the registration in group " + group_a + " (HTTP 403";
  EXPECT_TRUE(WaitFor(
      [&] { return Read("err" + std::to_string(log_c)).find(refusal) != std::string::npos; }, 20s))
      << Read("err" + std::to_string(log_c));
  EXPECT_FALSE(Tenants().contains(host_c));

  auto [code, group] = Call("GET", "/v1/groups/" + group_a);
  ASSERT_EQ(code, 200);
  EXPECT_EQ(group["members"], json::array({host_a})) << group.dump();
  EXPECT_EQ(group["owner"]["pod_uid"], a.uid);
  EXPECT_EQ(group["limits"]["all"]["memory_bytes"], uint64_t{1} << 30) << group.dump();
  EXPECT_EQ(Tenants().size(), 2u);
  EXPECT_NE(Read("err0").find("event=registration_refused"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice
