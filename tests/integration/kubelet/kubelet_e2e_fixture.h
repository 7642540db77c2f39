// KubeletE2eTest: the fixture of gpusliced's kubelet side end to end (the
// real daemon with --dra / --device-plugin on a private simulated GPU, the
// fake kubelet and API server): starting the daemon, claims as the API
// server returns them, the plugin's registration, tenants started with what
// the kubelet would inject, MPS clients. Header-only, for the test binaries
// of this directory (kubelet_e2e_test.cc, container_e2e_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "daemon/kubelet/cdi_spec.h"
#include "daemon/kubelet/device_plugin.h"
#include "daemon/kubelet/fake_kubelet.h"
#include "daemon/mps/mps_control_daemon.h"
#include "shm/group_segment.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/mps_cleanup.h"
#include "tests/integration/support/sim_process_test.h"
#include "tests/support/fake_kube_api.h"

namespace gpuslice::kubelet_e2e {

using daemon::kubelet::CdiEnv;
using daemon::kubelet::FakeKubelet;
using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

constexpr char kSimConfig[] = R"({"device_count":2})";
// One GPU, for MPS: the simulated driver shows a process every GPU of the
// node (it has no CUDA_VISIBLE_DEVICES), where a container sees only its own.
constexpr char kOneGpu[] = R"({"device_count":1})";
constexpr char kClaimUid[] = "c1a1e2d3-4b5c-4d6e-8f70-8192a3b4c5d6";
constexpr uint64_t kGiB = 1ull << 30;

class KubeletE2eTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    // Unix socket paths are short: the kubelet's tree lives under /tmp.
    kubelet_dir_ = "/tmp/gs-kl." + std::to_string(getpid());
    std::filesystem::remove_all(kubelet_dir_);
    // The socket in a directory of its own: every claim's container mounts
    // its directory, which gpusliced refuses to share with its other state.
    socket_ = dir_ + "/api/gpusliced.sock";
    std::filesystem::create_directories(dir_ + "/api");
    cdi_dir_ = dir_ + "/cdi";
  }
  void TearDown() override {
    SimProcessTest::TearDown();
    std::filesystem::remove_all(kubelet_dir_);
    // The MPS control daemons detach: stopping the daemon leaves them.
    if (!mps_root_.empty()) {
      testing::StopMpsControlDaemonsUnder(mps_root_);
      std::filesystem::remove_all(mps_root_);
    }
  }

  // The daemon's flags for MPS from the simulator (a short root: the
  // control socket's path must fit a socket address).
  std::vector<std::string> MpsArgs() {
    char root[] = "/tmp/gs-mps.XXXXXX";
    if (mkdtemp(root) == nullptr) return {};
    mps_root_ = root;
    return {"--mps-root", mps_root_, "--mps-control",
            BuildDir() + "/sim/bin/nvidia-cuda-mps-control"};
  }

  // `gpuslice-alloc-probe alloc` (up to `max_chunks` of 64 MiB, held a
  // minute) with exactly `vars` plus the node's simulated driver
  // (`sim_config`, as the MPS server sees it); its pid and its first line
  // of output (the JSON result), once there.
  std::pair<pid_t, json> StartMpsProbe(const std::map<std::string, std::string>& vars,
                                       int max_chunks, const std::string& sim_config) {
    const int n = next_++;
    std::vector<std::string> env = EnvEntries(vars);
    env.push_back("GPUSLICE_SIM_CONFIG=" + sim_config);
    const pid_t pid = StartProgram("gpuslice-alloc-probe", n,
                                   {"alloc", "--api", "alloc", "--chunk", std::to_string(64 << 20),
                                    "--max", std::to_string(max_chunks), "--hold-s", "60"},
                                   env);
    EXPECT_TRUE(WaitFor(
        [&] { return Read("out" + std::to_string(n)).find("\"granted\"") != std::string::npos; },
        20s))
        << Read("err" + std::to_string(n)) << "\ndaemon:\n"
        << Read("err0");
    const std::string out = Read("out" + std::to_string(n));
    return {pid, json::parse(out.substr(0, out.find('\n')), nullptr, false)};
  }
  // The simulated MPS control daemon's log of GPU `uuid`.
  std::string MpsControlLog(const std::string& uuid) {
    std::ifstream f(daemon::mps::MpsGpuDir(mps_root_, uuid) + "/log/control.log");
    std::stringstream text;
    text << f.rdbuf();
    return text.str();
  }
  // Whether `pid` connected to GPU `uuid`'s MPS server as its client.
  bool IsMpsClient(const std::string& uuid, pid_t pid) {
    return WaitFor(
        [&] {
          return MpsControlLog(uuid).find("NEW CLIENT " + std::to_string(pid)) != std::string::npos;
        },
        5s);
  }
  // The client environment of `spec` (a CDI spec of one device), checked to
  // be an MPS client's: the pipe directory under the node's MPS root,
  // mounted at the same path (as is every MPS directory it mounts), and
  // `pinned` as its pinned memory limit.
  std::map<std::string, std::string> ExpectMpsClientSpec(const json& spec,
                                                         const std::string& pinned) {
    std::map<std::string, std::string> env = CdiEnv(spec);
    if (!env.contains("CUDA_MPS_PIPE_DIRECTORY")) {
      ADD_FAILURE() << "no MPS client in " << spec.dump() << "\n" << Read("err0");
      return env;
    }
    EXPECT_EQ(env.at("CUDA_MPS_PIPE_DIRECTORY").rfind(mps_root_ + "/", 0), 0u) << spec.dump();
    EXPECT_EQ(env.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                  ? env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                  : "",
              pinned)
        << spec.dump();
    bool pipe_mounted = false;
    for (const json& m : spec["devices"][0]["containerEdits"].value("mounts", json::array())) {
      const std::string host = m.value("hostPath", "");
      if (host.rfind(mps_root_ + "/", 0) != 0) continue;  // the limiter's, not MPS's
      EXPECT_EQ(m["containerPath"], host) << m.dump();
      EXPECT_TRUE(std::filesystem::is_directory(host)) << m.dump();
      pipe_mounted = pipe_mounted || host == env.at("CUDA_MPS_PIPE_DIRECTORY");
    }
    EXPECT_TRUE(pipe_mounted) << spec.dump();
    return env;
  }
  // A process started with exactly `env` (what the container gets), asking
  // for `max_chunks` of 64 MiB, is a client of GPU `uuid`'s MPS server on the
  // mps tier and gets at most `limit` bytes; so does one without the limiter
  // (the MPS pinned memory limit alone holds it); and gpusliced ends the
  // first as that server's client.
  void ExpectAnMpsClientHeldTo(const std::map<std::string, std::string>& env,
                               const std::string& uuid, int max_chunks, uint64_t limit) {
    const auto [tenant, result] = StartMpsProbe(env, max_chunks, kOneGpu);
    EXPECT_TRUE(result.is_object());
    EXPECT_GT(result.value("granted_bytes", uint64_t{0}), 0u) << result.dump();
    EXPECT_LE(result.value("granted_bytes", uint64_t{0}), limit) << result.dump();
    EXPECT_TRUE(IsMpsClient(uuid, tenant)) << MpsControlLog(uuid);
    EXPECT_TRUE(GrantedMps(tenant)) << Get("/v1/tenants").dump();
    std::map<std::string, std::string> bare = env;
    bare.erase("LD_PRELOAD");
    const auto [unlimited, bare_result] = StartMpsProbe(bare, max_chunks, kOneGpu);
    EXPECT_TRUE(bare_result.is_object());
    EXPECT_GT(bare_result.value("granted_bytes", uint64_t{0}), 0u) << bare_result.dump();
    EXPECT_LE(bare_result.value("granted_bytes", uint64_t{0}), limit) << bare_result.dump();
    auto [code, terminated] =
        testing::CallDaemon(socket_, "POST", "/v1/mps/terminate",
                            R"({"gpu": "0", "client_pid": )" + std::to_string(tenant) + "}");
    EXPECT_EQ(code, 200) << terminated.dump() << "\n" << Read("err0");
    kill(unlimited, SIGKILL);
    kill(tenant, SIGKILL);
    Join(unlimited);
    Join(tenant);
  }
  // Whether the daemon holds `pid` as a tenant on the mps tier.
  bool GrantedMps(pid_t pid) {
    return WaitFor(
        [&] {
          const json seen = Get("/v1/tenants");
          for (const json& t : seen.value("tenants", json::array())) {
            if (t.value("host_pid", 0) == pid) return t.value("tier_granted", "") == "mps";
          }
          return false;
        },
        10s);
  }

  // A one-GPU node with MPS (the simulator's), the device plugins and the pod
  // watch; the API server holds pod team-a/mps-trainer, on the node, asking
  // for tier mps, 1 GiB and 40 % with one gpuslice.io/vgpu.
  void StartMpsPodNode(std::unique_ptr<testing::FakeKubeApi>& api) {
    const std::string api_dir = dir_ + "/api";
    std::filesystem::create_directories(api_dir);
    auto started = testing::FakeKubeApi::Start(api_dir);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    api = std::move(*started);
    api->AcceptToken("node-token");
    std::ofstream(api_dir + "/token") << "node-token\n";
    api->Create("/api/v1/nodes", {{"metadata", {{"name", "node-1"}}}});
    api->Create("/api/v1/namespaces/team-a/pods",
                {{"metadata",
                  {{"name", "mps-trainer"},
                   {"annotations",
                    {{"gpuslice.io/tier", "mps"},
                     {"gpuslice.io/memory", "1Gi"},
                     {"gpuslice.io/cores", "40"}}}}},
                 {"spec",
                  {{"nodeName", "node-1"},
                   {"containers",
                    json::array({{{"name", "main"},
                                  {"resources", {{"limits", {{"gpuslice.io/vgpu", "1"}}}}}}})}}}});
    ASSERT_TRUE(kubelet_.StartDevicePluginManager(kubelet_dir_ + "/device-plugins").ok());
    ASSERT_TRUE(kubelet_.StartPodResources(kubelet_dir_ + "/pod-resources/kubelet.sock").ok());
    std::vector<std::string> args = {"--device-plugin",
                                     "--kube-node",
                                     "node-1",
                                     "--kube-api",
                                     api->url(),
                                     "--kube-ca",
                                     api->ca_file(),
                                     "--kube-token-file",
                                     api_dir + "/token",
                                     "--kube-resource-slices",
                                     "off"};
    const std::vector<std::string> mps = MpsArgs();
    ASSERT_FALSE(mps.empty());
    args.insert(args.end(), mps.begin(), mps.end());
    StartDaemon(args, /*claims_dir=*/true, kOneGpu);
  }

  // `vars` as NAME=VALUE entries.
  static std::vector<std::string> EnvEntries(const std::map<std::string, std::string>& vars) {
    std::vector<std::string> out;
    out.reserve(vars.size());
    for (const auto& [name, value] : vars) {
      std::string entry = name;
      entry += "=";
      entry += value;
      out.push_back(std::move(entry));
    }
    return out;
  }

  // `claims_dir`: the DRA plugin reads claims from dir_/claims (else from
  // the API server, which `mode` then names).
  // `sim_config`: the node's simulated GPUs.
  void StartDaemon(const std::vector<std::string>& mode = {"--dra"}, bool claims_dir = true,
                   const std::string& sim_config = kSimConfig) {
    std::vector<std::string> args = {"--socket",
                                     socket_,
                                     "--poll-interval-ms",
                                     "100",
                                     "--log-level",
                                     "debug",
                                     "--state-dir",
                                     dir_ + "/state",
                                     "--shm-dir",
                                     shm_dir_,
                                     "--kubelet-dir",
                                     kubelet_dir_,
                                     "--cdi-dir",
                                     cdi_dir_,
                                     "--limiter-library",
                                     BuildDir() + "/lib/libgpuslice.so",
                                     "--gpu-memory-unit-mib",
                                     "256"};
    if (claims_dir) args.insert(args.end(), {"--dra-claims-dir", dir_ + "/claims"});
    args.insert(args.end(), mode.begin(), mode.end());
    daemon_ = StartProgram("gpusliced", next_++, args, {"GPUSLICE_SIM_CONFIG=" + sim_config});
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err" + std::to_string(next_ - 1));
  }
  void StopDaemon() {
    ASSERT_GT(daemon_, 0);
    kill(daemon_, SIGTERM);
    EXPECT_EQ(Join(daemon_), 0);
  }

  json Get(const std::string& target, int* status = nullptr) {
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", target);
    if (status != nullptr) *status = r.ok() ? r->status : -1;
    if (!r.ok()) return nullptr;
    return json::parse(r->body, nullptr, false);
  }

  std::string GpuUuid(uint32_t index) {
    json gpus = Get("/v1/gpus");
    if (gpus.is_object()) gpus = gpus.value("gpus", json::array());
    for (const json& g : gpus) {
      if (g.value("index", 99u) == index) return g.value("uuid", "");
    }
    return "";
  }

  // The ResourceClaim as the API server would return it once allocated.
  void WriteClaim(const std::string& device) {
    std::filesystem::create_directories(dir_ + "/claims/team-a");
    std::ofstream(dir_ + "/claims/team-a/slice.json") << ClaimObject(device).dump();
  }
  static json ClaimObject(const std::string& device, const std::string& name = "slice",
                          const std::string& uid = kClaimUid) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"metadata", {{"name", name}, {"namespace", "team-a"}, {"uid", uid}}},
            {"status",
             {{"allocation",
               {{"devices",
                 {{"results",
                   json::array({{{"request", "gpu"},
                                 {"driver", "gpuslice.io"},
                                 {"pool", "node-1"},
                                 {"device", device},
                                 {"consumedCapacity", {{"memory", "4Gi"}, {"cores", "30"}}}}})}}}}},
              {"reservedFor", json::array({{{"resource", "pods"},
                                            {"name", "trainer"},
                                            {"uid", "0a0b0c0d-1111-2222-3333-444455556666"}}})}}}};
  }

  static daemon::kubelet::dra_api::Claim Claim(const std::string& name = "slice",
                                               const std::string& uid = kClaimUid) {
    daemon::kubelet::dra_api::Claim c;
    c.set_namespace_("team-a");
    c.set_name(name);
    c.set_uid(uid);
    return c;
  }

  // Registers the daemon's plugin as the kubelet's plugin watcher would;
  // its DRA endpoint.
  std::string RegisterPlugin() {
    std::vector<std::string> sockets;
    EXPECT_TRUE(WaitFor(
        [&] {
          sockets = FakeKubelet::FindPluginSockets(kubelet_dir_ + "/plugins_registry");
          return sockets.size() == 1;
        },
        5s));
    if (sockets.size() != 1) return "";
    auto info = kubelet_.RegisterPlugin(sockets[0]);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (!info.ok()) return "";
    EXPECT_EQ(info->type(), "DRAPlugin");
    EXPECT_EQ(info->name(), "gpuslice.io");
    return info->endpoint();
  }

  std::string SpecPath(const std::string& uid = kClaimUid) const {
    return cdi_dir_ + "/gpuslice.io-" + uid + ".json";
  }
  json Spec(const std::string& uid = kClaimUid) {
    std::ifstream in(SpecPath(uid));
    return json::parse(in, nullptr, false);
  }

  // gpuslice-alloc-probe with exactly the CDI spec's environment (plus the
  // simulator's); its stdout.
  std::string RunTenant(const json& spec, const std::vector<std::string>& args) {
    return RunTenantWith(CdiEnv(spec), args);
  }
  std::string RunTenantWith(const std::map<std::string, std::string>& vars,
                            const std::vector<std::string>& args) {
    const pid_t pid = StartTenant(vars, args);
    const int n = next_ - 1;
    EXPECT_EQ(Join(pid), 0) << Read("err" + std::to_string(n));
    return Read("out" + std::to_string(n));
  }
  // gpuslice-alloc-probe started with `vars`, not waited for.
  pid_t StartTenant(const std::map<std::string, std::string>& vars,
                    const std::vector<std::string>& args) {
    std::vector<std::string> env;
    for (const auto& [name, value] : vars) {
      std::string entry = name;
      entry += "=";
      entry += value;
      env.push_back(std::move(entry));
    }
    return StartProgram("gpuslice-alloc-probe", next_++, args, env);
  }

  // One vGPU slice of GPU `uuid` allocated by the device plugin, as the
  // kubelet does before it creates a container: the slice's device ids, the
  // plugin's socket, the container's answer, its environment and its group.
  struct AllocatedSlice {
    std::vector<std::string> ids;
    std::string socket;
    ::v1beta1::ContainerAllocateResponse answer;
    std::map<std::string, std::string> env;
    std::string group;
  };
  AllocatedSlice AllocateSlice(const std::string& uuid) {
    using daemon::kubelet::DpDeviceId;
    using daemon::kubelet::DpResource;
    AllocatedSlice a;
    a.ids = {DpDeviceId(DpResource::kVgpu, uuid, 0)};
    a.socket = kubelet_dir_ + "/device-plugins/gpuslice-vgpu.sock";
    auto v = kubelet_.Allocate(a.socket, {a.ids});
    EXPECT_TRUE(v.ok() && v->container_responses_size() == 1)
        << (v.ok() ? v->DebugString() : v.status().ToString());
    if (!v.ok() || v->container_responses_size() != 1) return a;
    a.answer = v->container_responses(0);
    a.env.insert(a.answer.envs().begin(), a.answer.envs().end());
    a.group = a.env["GPUSLICE_GROUP"];
    return a;
  }

  // Whether group `group` holds exactly `memory` bytes and `cores` % on `uuid`.
  bool HasLimits(const std::string& group, const std::string& uuid, uint64_t memory, int cores) {
    int status = 0;
    const json g = Get("/v1/groups/" + group, &status);
    if (status != 200 || !g.is_object() || !g.contains("limits") || !g["limits"].is_object() ||
        !g["limits"].contains(uuid)) {
      return false;
    }
    const json& l = g["limits"][uuid];
    return l.value("memory_bytes", uint64_t{0}) == memory && l.value("compute_percent", 0) == cores;
  }

  // On the MPS pod node (StartMpsPodNode), what the kubelet does before the
  // runtime makes pod team-a/mps-trainer's container: its slice of the
  // node's one GPU (`uuid`) allocated, naming the group's MPS device; the
  // pod seen by the pod watch (the group's limits, 1 GiB and 40 %, and tier
  // mps); PreStartContainer, which fills that device's spec.
  void StartMpsPodSlice(std::unique_ptr<testing::FakeKubeApi>& api, std::string& uuid,
                        AllocatedSlice& allocated) {
    ASSERT_NO_FATAL_FAILURE(StartMpsPodNode(api));
    ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
    uuid = GpuUuid(0);
    ASSERT_FALSE(uuid.empty());
    allocated = AllocateSlice(uuid);
    ASSERT_FALSE(allocated.group.empty());
    ASSERT_EQ(allocated.answer.cdi_devices_size(), 1) << allocated.answer.DebugString();
    EXPECT_EQ(allocated.answer.cdi_devices(0).name(),
              daemon::kubelet::CdiMpsDeviceId(allocated.group));
    kubelet_.SetPods({daemon::kubelet::PodWithDevices("mps-trainer", "team-a",
                                                      {{"gpuslice.io/vgpu", allocated.ids}})});
    // The pod watch has seen the pod before the kubelet starts its container
    // (as it has in a cluster: the pod is on the node from its binding on).
    ASSERT_TRUE(WaitFor([&] { return HasLimits(allocated.group, uuid, kGiB, 40); }, 10s))
        << Get("/v1/groups/" + allocated.group).dump() << Read("err0");
    EXPECT_EQ(Get("/v1/groups/" + allocated.group).value("tier", ""), "mps");
    ASSERT_TRUE(kubelet_.PreStart(allocated.socket, allocated.ids).ok()) << Read("err0");
  }

  std::string kubelet_dir_;
  std::string socket_;
  std::string cdi_dir_;  // where the daemon writes the CDI specs
  std::string mps_root_;
  pid_t daemon_ = 0;
  int next_ = 0;
  FakeKubelet kubelet_;
};

}  // namespace gpuslice::kubelet_e2e
