// gpusliced's kubelet side end to end: the real daemon (--dra) on a private
// simulated GPU, the fake kubelet registering its plugin and preparing a
// claim for 4 GiB and 30 %, and a tenant started with the CDI spec's
// environment (LD_PRELOAD and the rest, as a container runtime would apply
// it) that must see exactly a 4 GiB device and be refused beyond it; then
// unprepare releases it. Also: a daemon restart keeps the allocation and a
// kubelet retry after it prepares nothing twice.
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
#include "shm/group_segment.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/mps_cleanup.h"
#include "tests/integration/support/sim_process_test.h"
#include "tests/support/fake_kube_api.h"

namespace gpuslice {
namespace {

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
    socket_ = dir_ + "/gpusliced.sock";
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
    std::ifstream f(mps_root_ + "/" + uuid + "/log/control.log");
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
                                     dir_ + "/cdi",
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
  static json ClaimObject(const std::string& device) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"metadata", {{"name", "slice"}, {"namespace", "team-a"}, {"uid", kClaimUid}}},
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

  static daemon::kubelet::dra_api::Claim Claim() {
    daemon::kubelet::dra_api::Claim c;
    c.set_namespace_("team-a");
    c.set_name("slice");
    c.set_uid(kClaimUid);
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

  std::string SpecPath() const { return dir_ + "/cdi/gpuslice.io-" + kClaimUid + ".json"; }
  json Spec() {
    std::ifstream in(SpecPath());
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

  std::string kubelet_dir_;
  std::string socket_;
  std::string mps_root_;
  pid_t daemon_ = 0;
  int next_ = 0;
  FakeKubelet kubelet_;
};

TEST_F(KubeletE2eTest, AClaimFor4GiBAnd30PercentIsExactlyThatSlice) {
  StartDaemon();
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());
  WriteClaim("gpu-0");
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());

  auto prepared = kubelet_.Prepare(endpoint, {Claim()});
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  const auto& result = prepared->claims().at(kClaimUid);
  ASSERT_EQ(result.error(), "");
  ASSERT_EQ(result.devices_size(), 1);
  EXPECT_EQ(result.devices(0).cdi_device_ids(0), std::string("gpuslice.io/claim=") + kClaimUid);

  // The daemon's word: group = claim, its limits on that GPU.
  int status = 0;
  const json group = Get(std::string("/v1/groups/") + kClaimUid, &status);
  ASSERT_EQ(status, 200) << group.dump();
  EXPECT_EQ(group["limits"][uuid]["memory_bytes"], 4 * kGiB) << group.dump();
  EXPECT_EQ(group["limits"][uuid]["compute_percent"], 30) << group.dump();

  // A tenant started the way the container runtime applies the CDI spec.
  const json spec = Spec();
  ASSERT_FALSE(spec.is_discarded());
  EXPECT_EQ(CdiEnv(spec).at("GPUSLICE_SOCKET"), socket_);
  const json info = json::parse(RunTenant(spec, {"info"}), nullptr, false);
  ASSERT_TRUE(info.is_object()) << Read("err" + std::to_string(next_ - 1));
  EXPECT_EQ(info["total"], 4 * kGiB) << info.dump();

  // Refused beyond it: 256 MiB chunks until the driver says no.
  const json alloc = json::parse(
      RunTenant(spec, {"alloc", "--api", "alloc", "--chunk", std::to_string(256 << 20)}), nullptr,
      false);
  ASSERT_TRUE(alloc.is_object()) << Read("err" + std::to_string(next_ - 1));
  EXPECT_LE(alloc["granted_bytes"].get<uint64_t>(), 4 * kGiB) << alloc.dump();
  EXPECT_GE(alloc["granted_bytes"].get<uint64_t>(), 4 * kGiB - (512ull << 20)) << alloc.dump();
  EXPECT_EQ(alloc["error"], "CUDA_ERROR_OUT_OF_MEMORY") << alloc.dump();

  // A kubelet restart: its plugin watcher finds the registration socket
  // again and registers the plugin, and the kubelet prepares the claim
  // again (its pods are admitted again): the same allocation, nothing twice.
  {
    FakeKubelet restarted;
    const auto sockets = FakeKubelet::FindPluginSockets(kubelet_dir_ + "/plugins_registry");
    ASSERT_EQ(sockets.size(), 1u);
    auto registered = restarted.RegisterPlugin(sockets[0]);
    ASSERT_TRUE(registered.ok()) << registered.status().ToString();
    EXPECT_EQ(registered->endpoint(), endpoint);
    auto again = restarted.Prepare(endpoint, {Claim()});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->claims().at(kClaimUid).error(), "");
    EXPECT_EQ(again->claims().at(kClaimUid).devices(0).cdi_device_ids(0),
              std::string("gpuslice.io/claim=") + kClaimUid);
    EXPECT_TRUE(HasLimits(kClaimUid, uuid, 4 * kGiB, 30)) << Get("/v1/groups").dump();
    std::ifstream record(dir_ + "/state/kube_allocations.json");
    std::stringstream text;
    text << record.rdbuf();
    const json saved = json::parse(text.str(), nullptr, false);
    ASSERT_TRUE(saved.is_object()) << text.str();
    EXPECT_EQ(saved["data"]["allocations"].size(), 1u) << saved.dump();
  }

  // Unprepare releases it: no group, no spec; twice is fine. The kubelet
  // unprepares once the pod's containers have stopped, but the daemon sees
  // a tenant's exit up to a second later: here a tenant still runs when the
  // kubelet unprepares. The group loses its limits at once and goes with
  // that tenant.
  const pid_t holder =
      StartTenant(CdiEnv(spec), {"alloc", "--api", "alloc", "--chunk", std::to_string(256 << 20),
                                 "--max", "1", "--hold-s", "600"});
  ASSERT_TRUE(WaitFor(
      [&] {
        const json g = Get(std::string("/v1/groups/") + kClaimUid, &status);
        if (status != 200 || !g.contains("members")) return false;
        for (const json& m : g["members"]) {
          if (m == holder) return true;
        }
        return false;
      },
      10s))
      << Get(std::string("/v1/groups/") + kClaimUid, &status).dump();
  // Its slice, as the daemon holds it: 4 GiB and 30 % on that GPU.
  json holder_limit;
  for (const json& t : Get("/v1/tenants").value("tenants", json::array())) {
    if (t.value("host_pid", 0) != holder) continue;
    for (const json& g : t["gpus"]) {
      if (g.value("uuid", "") == uuid) holder_limit = g;
    }
  }
  ASSERT_TRUE(holder_limit.is_object()) << Get("/v1/tenants").dump();
  EXPECT_EQ(holder_limit.value("/limit/memory_bytes"_json_pointer, uint64_t{0}), 4 * kGiB)
      << holder_limit.dump();
  EXPECT_EQ(holder_limit.value("/limit/compute_percent"_json_pointer, 0), 30)
      << holder_limit.dump();
  for (int i = 0; i < 2; ++i) {
    auto un = kubelet_.Unprepare(endpoint, {Claim()});
    ASSERT_TRUE(un.ok()) << un.status().ToString();
    EXPECT_EQ(un->claims().at(kClaimUid).error(), "");
  }
  EXPECT_FALSE(std::filesystem::exists(SpecPath()));
  const json held = Get(std::string("/v1/groups/") + kClaimUid, &status);
  ASSERT_EQ(status, 200) << "the group went while its tenant runs";
  EXPECT_TRUE(held["limits"].empty()) << held.dump();
  kill(holder, SIGKILL);
  Join(holder);
  EXPECT_TRUE(WaitFor(
      [&] {
        Get(std::string("/v1/groups/") + kClaimUid, &status);
        return status == 404;
      },
      10s))
      << "the group outlived its claim: "
      << Get(std::string("/v1/groups/") + kClaimUid, &status).dump();
  // And its segment directory, which the tenant's segment kept at unprepare.
  EXPECT_TRUE(
      WaitFor([&] { return !std::filesystem::exists(shm_dir_ + "/claims/" + kClaimUid); }, 10s));
}

TEST_F(KubeletE2eTest, ADaemonRestartKeepsTheAllocationAndPreparesNothingTwice) {
  StartDaemon();
  const std::string uuid = GpuUuid(1);
  ASSERT_FALSE(uuid.empty());
  WriteClaim("gpu-1");
  std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  ASSERT_TRUE(kubelet_.Prepare(endpoint, {Claim()}).ok());
  StopDaemon();
  EXPECT_FALSE(std::filesystem::exists(endpoint));  // the socket went with it

  // The claim vanishes from the "API server": a retry must need nothing.
  std::filesystem::remove_all(dir_ + "/claims");
  StartDaemon();
  endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  int status = 0;
  const json group = Get(std::string("/v1/groups/") + kClaimUid, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(group["limits"][uuid]["memory_bytes"], 4 * kGiB);
  auto again = kubelet_.Prepare(endpoint, {Claim()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->claims().at(kClaimUid).error(), "");
  std::ifstream record(dir_ + "/state/kube_allocations.json");
  std::stringstream text;
  text << record.rdbuf();
  const json saved = json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(saved.is_object()) << text.str();
  EXPECT_EQ(saved["data"]["allocations"].size(), 1u) << saved.dump();
}

// Without DRA: the device plugins register with the kubelet, a container
// given a vgpu slice, 16 gpu-memory devices (256 MiB each) and 30 gpu-cores
// devices runs with what the three Allocate answers inject, merged as the
// kubelet merges them, in its slice's own segment directory; once the
// kubelet's PodResources shows the three in one container, the daemon holds
// the slice's group to 4 GiB and 30 % whatever the environment says; a
// kubelet restart re-registers; a daemon restart keeps it all.
TEST_F(KubeletE2eTest, TheDevicePluginsGiveAContainerItsSlice) {
  using daemon::kubelet::DpDeviceId;
  using daemon::kubelet::DpResource;
  ASSERT_TRUE(kubelet_.StartDevicePluginManager(kubelet_dir_ + "/device-plugins").ok());
  ASSERT_TRUE(kubelet_.StartPodResources(kubelet_dir_ + "/pod-resources/kubelet.sock").ok());
  StartDaemon({"--device-plugin"});
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());

  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, uuid, 0)};
  std::vector<std::string> memory, cores;
  for (int n = 0; n < 16; ++n) memory.push_back(DpDeviceId(DpResource::kMemory, uuid, n));
  for (int n = 0; n < 30; ++n) cores.push_back(DpDeviceId(DpResource::kCores, uuid, n));
  const std::string dp = kubelet_dir_ + "/device-plugins/";
  auto v = kubelet_.Allocate(dp + "gpuslice-vgpu.sock", {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto m = kubelet_.Allocate(dp + "gpuslice-gpu-memory.sock", {memory});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto c = kubelet_.Allocate(dp + "gpuslice-gpu-cores.sock", {cores});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::map<std::string, std::string> env;
  for (const auto* r : {&*v, &*m, &*c}) {
    for (const auto& [name, value] : r->container_responses(0).envs()) env[name] = value;
  }
  EXPECT_EQ(json::parse(env.at("GPUSLICE_COMPUTE_LIMIT")), json({{uuid, "30"}}));
  const std::string group = env.at("GPUSLICE_GROUP");
  EXPECT_EQ(env.at("GPUSLICE_SHM_DIR"), shm_dir_ + "/claims/" + group);  // its own, only
  const json info = json::parse(RunTenantWith(env, {"info"}), nullptr, false);
  ASSERT_TRUE(info.is_object()) << Read("err" + std::to_string(next_ - 1));
  EXPECT_EQ(info["total"], 4 * kGiB) << info.dump();
  EXPECT_TRUE(std::filesystem::exists(GroupSegment::PathFor(shm_dir_ + "/claims/" + group, group)))
      << "the slice's segment is in its own directory";

  // The kubelet's PodResources joins the amounts to the slice: the daemon's word.
  kubelet_.SetPods({daemon::kubelet::PodWithDevices("trainer", "team-a",
                                                    {{"gpuslice.io/vgpu", slice},
                                                     {"gpuslice.io/gpu-memory", memory},
                                                     {"gpuslice.io/gpu-cores", cores}})});
  auto limited = [&] { return HasLimits(group, uuid, 4 * kGiB, 30); };
  // The kubelet's PreStartContainer, before it starts the container: the
  // daemon's word is there when it answers, not a poll later.
  ASSERT_TRUE(kubelet_.PreStart(dp + "gpuslice-vgpu.sock", slice).ok());
  ASSERT_TRUE(limited()) << Get("/v1/groups/" + group).dump();
  // A container whose environment was changed to ask for more gets no more.
  std::map<std::string, std::string> forged = env;
  forged["GPUSLICE_MEMORY_LIMIT"] = json({{uuid, std::to_string(8 * kGiB)}}).dump();
  forged.erase("GPUSLICE_COMPUTE_LIMIT");
  const json alloc = json::parse(
      RunTenantWith(forged, {"alloc", "--api", "alloc", "--chunk", std::to_string(256 << 20)}),
      nullptr, false);
  ASSERT_TRUE(alloc.is_object()) << Read("err" + std::to_string(next_ - 1));
  EXPECT_LE(alloc["granted_bytes"].get<uint64_t>(), 4 * kGiB) << alloc.dump();
  EXPECT_EQ(alloc["error"], "CUDA_ERROR_OUT_OF_MEMORY") << alloc.dump();

  // A kubelet restart (its socket and the plugins' removed): registered again.
  ASSERT_TRUE(kubelet_.RestartDevicePluginManager().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(6, 10s)) << kubelet_.Registrations().size();
  EXPECT_TRUE(WaitFor([&] { return kubelet_.ListDevices(dp + "gpuslice-vgpu.sock").ok(); }, 5s));

  // A daemon restart keeps both allocations.
  StopDaemon();
  StartDaemon({"--device-plugin"});
  std::ifstream record(dir_ + "/state/kube_device_plugin.json");
  std::stringstream text;
  text << record.rdbuf();
  const json saved = json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(saved.is_object()) << text.str();
  EXPECT_EQ(saved["data"]["allocations"].size(), 3u) << saved.dump();
  EXPECT_TRUE(WaitFor(limited, 10s)) << Get("/v1/groups/" + group).dump();

  // The pod goes (PodResources no longer shows its ids) while the daemon
  // has not yet seen its last process exit: after two checks (10 s apart)
  // the slice is released (the device plugins' unprepare): its settings at
  // once, its group once that process is gone, its segment directory and
  // its record.
  const pid_t holder =
      StartTenant(env, {"alloc", "--api", "alloc", "--chunk", std::to_string(256 << 20), "--max",
                        "1", "--hold-s", "600"});
  int status = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        const json g = Get("/v1/groups/" + group, &status);
        return status == 200 && g.contains("members") && g["members"].size() == 1 &&
               g["members"][0] == holder;
      },
      10s))
      << Get("/v1/groups/" + group).dump();
  kubelet_.SetPods({});
  EXPECT_TRUE(WaitFor(
      [&] {
        const json g = Get("/v1/groups/" + group, &status);
        return status == 200 && g.contains("limits") && g["limits"].empty();
      },
      45s))
      << Get("/v1/groups/" + group).dump();
  kill(holder, SIGKILL);
  Join(holder);
  EXPECT_TRUE(WaitFor(
      [&] {
        Get("/v1/groups/" + group, &status);
        return status == 404;
      },
      10s))
      << "the slice's group outlived it: " << Get("/v1/groups/" + group).dump();
  // Its segment directory, which the tenant's segment kept at the release,
  // goes once the group has.
  EXPECT_TRUE(
      WaitFor([&] { return !std::filesystem::exists(shm_dir_ + "/claims/" + group); }, 10s));
  std::ifstream released(dir_ + "/state/kube_device_plugin.json");
  std::stringstream after;
  after << released.rdbuf();
  const json left = json::parse(after.str(), nullptr, false);
  ASSERT_TRUE(left.is_object()) << after.str();
  EXPECT_TRUE(left["data"]["allocations"].empty()) << left.dump();
}

// A container asking for gpu-memory or gpu-cores without a gpuslice.io/vgpu
// is refused at PreStartContainer, saying why (the kubelet shows it on the
// pod): it has no slice to run the limiter in.
TEST_F(KubeletE2eTest, AnAmountWithoutASliceIsRefusedBeforeItsContainerStarts) {
  using daemon::kubelet::DpDeviceId;
  using daemon::kubelet::DpResource;
  ASSERT_TRUE(kubelet_.StartDevicePluginManager(kubelet_dir_ + "/device-plugins").ok());
  ASSERT_TRUE(kubelet_.StartPodResources(kubelet_dir_ + "/pod-resources/kubelet.sock").ok());
  StartDaemon({"--device-plugin"});
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  for (const auto& r : kubelet_.Registrations()) EXPECT_TRUE(r.options().pre_start_required());
  const std::string uuid = GpuUuid(0);
  std::vector<std::string> memory;
  memory.reserve(8);
  for (int n = 0; n < 8; ++n) memory.push_back(DpDeviceId(DpResource::kMemory, uuid, n));
  const std::string socket = kubelet_dir_ + "/device-plugins/gpuslice-gpu-memory.sock";
  ASSERT_TRUE(kubelet_.Allocate(socket, {memory}).ok());
  kubelet_.SetPods(
      {daemon::kubelet::PodWithDevices("loose", "team-a", {{"gpuslice.io/gpu-memory", memory}})});
  const Status refused = kubelet_.PreStart(socket, memory);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("needs gpuslice.io/vgpu"), std::string::npos)
      << refused.ToString();
}

// The device plugins and the pod's annotations give a container the same
// slice as the DRA claim above: a pod asking for one gpuslice.io/vgpu with
// gpuslice.io/memory: 4Gi and gpuslice.io/cores: 30 (the pod watch, against
// the fake API server) runs in a 4 GiB, 30 % slice, whatever its environment
// says; a change of the annotation applies live.
TEST_F(KubeletE2eTest, AnnotationsGiveADevicePluginContainerTheSameSliceAsDra) {
  const std::string api_dir = dir_ + "/api";
  std::filesystem::create_directories(api_dir);
  auto api = testing::FakeKubeApi::Start(api_dir);
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  (*api)->AcceptToken("node-token");
  std::ofstream(api_dir + "/token") << "node-token\n";
  (*api)->Create("/api/v1/nodes", {{"metadata", {{"name", "node-1"}}}});
  const char* pods = "/api/v1/namespaces/team-a/pods";
  (*api)->Create(pods,
                 {{"metadata",
                   {{"name", "trainer"},
                    {"annotations", {{"gpuslice.io/memory", "4Gi"}, {"gpuslice.io/cores", "30"}}}}},
                  {"spec",
                   {{"nodeName", "node-1"},
                    {"containers",
                     json::array({{{"name", "main"},
                                   {"resources", {{"limits", {{"gpuslice.io/vgpu", "1"}}}}}}})}}}});
  ASSERT_TRUE(kubelet_.StartDevicePluginManager(kubelet_dir_ + "/device-plugins").ok());
  ASSERT_TRUE(kubelet_.StartPodResources(kubelet_dir_ + "/pod-resources/kubelet.sock").ok());
  StartDaemon({"--device-plugin", "--kube-node", "node-1", "--kube-api", (*api)->url(), "--kube-ca",
               (*api)->ca_file(), "--kube-token-file", api_dir + "/token", "--kube-resource-slices",
               "off"});
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());

  const AllocatedSlice allocated = AllocateSlice(uuid);
  ASSERT_FALSE(allocated.group.empty());
  const std::vector<std::string>& slice = allocated.ids;
  const std::string& socket = allocated.socket;
  std::map<std::string, std::string> env = allocated.env;
  const std::string& group = allocated.group;
  // A node without MPS: the answer names no MPS CDI device.
  EXPECT_EQ(allocated.answer.cdi_devices_size(), 0);
  kubelet_.SetPods(
      {daemon::kubelet::PodWithDevices("trainer", "team-a", {{"gpuslice.io/vgpu", slice}})});
  ASSERT_TRUE(kubelet_.PreStart(socket, slice).ok());
  ASSERT_TRUE(WaitFor([&] { return HasLimits(group, uuid, 4 * kGiB, 30); }, 10s))
      << Get("/v1/groups/" + group).dump() << Read("err0");

  // A tenant of the container, its environment asking for 8 GiB: once it
  // has registered (its first round trip to the daemon; until then a fresh
  // segment holds the environment's limits, as for a DRA claim), exactly the
  // DRA claim's slice.
  env["GPUSLICE_MEMORY_LIMIT"] = json({{uuid, std::to_string(8 * kGiB)}}).dump();
  std::vector<std::string> vars;
  vars.reserve(env.size());
  for (const auto& [name, value] : env) {
    std::string entry = name;
    entry += "=";
    entry += value;
    vars.push_back(std::move(entry));
  }
  const std::string go = dir_ + "/go";
  const int n = next_++;
  const pid_t tenant = StartProgram(
      "gpuslice-alloc-probe", n,
      {"alloc", "--api", "alloc", "--chunk", std::to_string(256 << 20), "--go-file", go}, vars);
  ASSERT_TRUE(WaitFor(
      [&] { return Read("out" + std::to_string(n)).find("ready") != std::string::npos; }, 10s))
      << Read("err" + std::to_string(n));
  // Registered: the daemon's answer lowered the group's segment to its word.
  auto segment_limit = [&]() -> uint64_t {
    auto segment = GroupSegment::Open(shm_dir_ + "/claims/" + group, group, /*create=*/false);
    if (!segment.ok()) return 0;
    const GroupSnapshot snap = (*segment)->Snapshot();
    return snap.devices.empty() ? 0 : snap.devices[0].memory_limit;
  };
  ASSERT_TRUE(WaitFor([&] { return segment_limit() == 4 * kGiB; }, 10s))
      << segment_limit() << " " << Get("/v1/tenants").dump();
  std::ofstream(go) << "go\n";
  ASSERT_EQ(Join(tenant), 0) << Read("err" + std::to_string(n));
  std::string out = Read("out" + std::to_string(n));
  out = out.substr(out.rfind('{'));
  const json alloc = json::parse(out, nullptr, false);
  ASSERT_TRUE(alloc.is_object()) << out;
  EXPECT_LE(alloc["granted_bytes"].get<uint64_t>(), 4 * kGiB) << alloc.dump();
  EXPECT_GE(alloc["granted_bytes"].get<uint64_t>(), 4 * kGiB - (512ull << 20)) << alloc.dump();
  EXPECT_EQ(alloc["error"], "CUDA_ERROR_OUT_OF_MEMORY") << alloc.dump();
  EXPECT_EQ(alloc["total"], 4 * kGiB) << alloc.dump();

  // A change of the annotation applies live.
  (*api)->Modify(std::string(pods) + "/trainer",
                 [](json& p) { p["metadata"]["annotations"]["gpuslice.io/memory"] = "2Gi"; });
  EXPECT_TRUE(WaitFor([&] { return HasLimits(group, uuid, 2 * kGiB, 30); }, 10s))
      << Get("/v1/groups/" + group).dump();
}

// A pod asking for MPS (gpuslice.io/tier: mps, deploy/examples/mps-pod.yaml)
// through the device plugin: the slice's Allocate answer names its MPS CDI
// device, PreStartContainer writes the group's MPS client into that device's
// spec, and a process started with exactly what the kubelet and the runtime
// give the container (the Allocate answer's environment, then the CDI
// device's edits; its mounts are at their host paths) is a client of the
// group's MPS server, granted the mps tier, and held by the MPS pinned memory
// limit even without the limiter.
TEST_F(KubeletE2eTest, AnMpsPodsContainerIsAClientOfItsGroupsMpsServer) {
  std::unique_ptr<testing::FakeKubeApi> api;
  ASSERT_NO_FATAL_FAILURE(StartMpsPodNode(api));
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());

  const AllocatedSlice allocated = AllocateSlice(uuid);
  ASSERT_FALSE(allocated.group.empty());
  const std::vector<std::string>& slice = allocated.ids;
  const std::string& socket = allocated.socket;
  const auto& answer = allocated.answer;
  std::map<std::string, std::string> env = allocated.env;
  const std::string& group = allocated.group;
  ASSERT_EQ(answer.cdi_devices_size(), 1) << answer.DebugString();
  EXPECT_EQ(answer.cdi_devices(0).name(), daemon::kubelet::CdiMpsDeviceId(group));
  kubelet_.SetPods(
      {daemon::kubelet::PodWithDevices("mps-trainer", "team-a", {{"gpuslice.io/vgpu", slice}})});
  // The pod watch has seen the pod before the kubelet starts its container
  // (as it has in a cluster: the pod is on the node from its binding on).
  ASSERT_TRUE(WaitFor([&] { return HasLimits(group, uuid, kGiB, 40); }, 10s))
      << Get("/v1/groups/" + group).dump() << Read("err0");
  EXPECT_EQ(Get("/v1/groups/" + group).value("tier", ""), "mps");
  ASSERT_TRUE(kubelet_.PreStart(socket, slice).ok()) << Read("err0");

  // What the runtime reads when it creates the container: the CDI device's
  // spec, now the group's MPS client.
  std::ifstream in(daemon::kubelet::CdiMpsSpecPath(dir_ + "/cdi", group));
  const json spec = json::parse(in, nullptr, false);
  ASSERT_TRUE(spec.is_object()) << Read("err0");
  EXPECT_EQ(spec["kind"], "gpuslice.io/mps") << spec.dump();
  ASSERT_EQ(spec["devices"].size(), 1u) << spec.dump();
  EXPECT_EQ(spec["devices"][0]["name"], group) << spec.dump();
  // The simulator's control binary speaks MPS v2: the group's limits are the
  // client's environment (on v3 its namespace holds them).
  const std::map<std::string, std::string> client = ExpectMpsClientSpec(spec, "0=1G");
  EXPECT_EQ(client.count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                ? client.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                : "",
            "40")
      << spec.dump();
  for (const auto& [name, value] : client) env[name] = value;

  // The container's process, with exactly that environment: an MPS client of
  // the group's server, registered as a tenant on the mps tier, and held to
  // the group's 1 GiB by the MPS tier alone too.
  ExpectAnMpsClientHeldTo(env, uuid, 32, kGiB);
}

// An mps pod where MPS cannot be had for its group (a shared tenant of
// another group already runs on the GPU: MPS would put the GPU in
// EXCLUSIVE_PROCESS mode under it, docs/mps.md "Tiers"): the container's
// MPS device stays empty, the daemon says why, and its process is no MPS
// client.
TEST_F(KubeletE2eTest, AnMpsPodWhoseGroupCannotHaveMpsGetsNoClientAndSaysWhy) {
  std::unique_ptr<testing::FakeKubeApi> api;
  ASSERT_NO_FATAL_FAILURE(StartMpsPodNode(api));
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());
  // A shared tenant of group "batch", registered, on the GPU.
  const auto [batch, batch_result] =
      StartMpsProbe({{"LD_PRELOAD", BuildDir() + "/lib/libgpuslice.so"},
                     {"GPUSLICE_SOCKET", socket_},
                     {"GPUSLICE_SHM_DIR", shm_dir_},
                     {"GPUSLICE_GROUP", "batch"}},
                    2, kOneGpu);
  ASSERT_TRUE(batch_result.is_object());
  const pid_t batch_pid = batch;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& t : Get("/v1/tenants").value("tenants", json::array())) {
          if (t.value("host_pid", 0) == batch_pid) return true;
        }
        return false;
      },
      10s));

  const AllocatedSlice allocated = AllocateSlice(uuid);
  ASSERT_FALSE(allocated.group.empty());
  const std::vector<std::string>& slice = allocated.ids;
  const std::string& socket = allocated.socket;
  std::map<std::string, std::string> env = allocated.env;
  const std::string& group = allocated.group;
  ASSERT_EQ(allocated.answer.cdi_devices_size(), 1);
  kubelet_.SetPods(
      {daemon::kubelet::PodWithDevices("mps-trainer", "team-a", {{"gpuslice.io/vgpu", slice}})});
  ASSERT_TRUE(WaitFor([&] { return HasLimits(group, uuid, kGiB, 40); }, 10s))
      << Get("/v1/groups/" + group).dump() << Read("err0");
  ASSERT_TRUE(kubelet_.PreStart(socket, slice).ok()) << Read("err0");
  std::ifstream in(daemon::kubelet::CdiMpsSpecPath(dir_ + "/cdi", group));
  const json spec = json::parse(in, nullptr, false);
  EXPECT_EQ(CdiEnv(spec), (std::map<std::string, std::string>{{"GPUSLICE_MPS", "off"}}))
      << spec.dump();
  const std::string log = Read("err0");
  const size_t said = log.find("event=device_plugin_mps_fallback group=" + group);
  ASSERT_NE(said, std::string::npos) << log;
  EXPECT_NE(log.find("batch", said), std::string::npos) << log.substr(said);

  // Its process, started with what the container gets: no MPS client.
  for (const auto& [name, value] : CdiEnv(spec)) env[name] = value;
  const auto [tenant, result] = StartMpsProbe(env, 2, kOneGpu);
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(MpsControlLog(uuid).find("NEW CLIENT " + std::to_string(tenant)), std::string::npos)
      << MpsControlLog(uuid);
  kill(tenant, SIGKILL);
  kill(batch, SIGKILL);
  Join(tenant);
  Join(batch);
}

// A DRA claim asking for MPS through its opaque configuration (a
// gpuslice.io SliceConfig with tier mps, deploy/examples/dra-mps-claim-pod.yaml):
// at prepare its group is on the mps tier and the claim's CDI spec carries
// the group's MPS client; a process started with the spec's environment is a
// client of the group's MPS server, granted the mps tier, held by the pinned
// memory limit even without the limiter. A config gpuslice does not know is
// refused at prepare, saying why.
TEST_F(KubeletE2eTest, AClaimAskingForMpsIsAClientOfItsGroupsMpsServer) {
  std::vector<std::string> args = {"--dra"};
  const std::vector<std::string> mps = MpsArgs();
  ASSERT_FALSE(mps.empty());
  args.insert(args.end(), mps.begin(), mps.end());
  StartDaemon(args, /*claims_dir=*/true, kOneGpu);
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());
  auto with_config = [](const json& parameters) {
    json claim = ClaimObject("gpu-0");
    claim["status"]["allocation"]["devices"]["config"] =
        json::array({{{"source", "FromClaim"},
                      {"requests", json::array({"gpu"})},
                      {"opaque", {{"driver", "gpuslice.io"}, {"parameters", parameters}}}}});
    return claim;
  };
  std::filesystem::create_directories(dir_ + "/claims/team-a");
  std::ofstream(dir_ + "/claims/team-a/slice.json")
      << with_config(
             {{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}, {"tier", "mps"}})
             .dump();
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  auto prepared = kubelet_.Prepare(endpoint, {Claim()});
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_EQ(prepared->claims().at(kClaimUid).error(), "") << Read("err0");
  const json group = Get(std::string("/v1/groups/") + kClaimUid);
  EXPECT_EQ(group.value("tier", ""), "mps") << group.dump();

  const json spec = Spec();
  ASSERT_FALSE(spec.is_discarded());
  // A process with the spec's environment: its group's MPS client, held to
  // 4 of the 6 GiB it asks for, by the pinned memory limit alone too.
  ExpectAnMpsClientHeldTo(ExpectMpsClientSpec(spec, "0=4G"), uuid, 96, 4 * kGiB);

  // A config of another kind: refused at prepare, the reason in the result.
  json bad = with_config({{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "GpuConfig"}});
  bad["metadata"]["name"] = "bad";
  bad["metadata"]["uid"] = "0bad0bad-1111-2222-3333-444455556666";
  std::ofstream(dir_ + "/claims/team-a/bad.json") << bad.dump();
  daemon::kubelet::dra_api::Claim c;
  c.set_namespace_("team-a");
  c.set_name("bad");
  c.set_uid("0bad0bad-1111-2222-3333-444455556666");
  auto refused = kubelet_.Prepare(endpoint, {c});
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  const std::string error = refused->claims().at(c.uid()).error();
  EXPECT_NE(error.find("is not gpuslice.io/v1alpha1 SliceConfig"), std::string::npos) << error;
  int status = 0;
  Get("/v1/groups/" + c.uid(), &status);
  EXPECT_EQ(status, 404);
}

// An API server outage (every request refused, open watches cut): what the
// daemon applied stays, a claim the kubelet asks for meanwhile is refused
// with nothing left behind (the kubelet retries), and once the server is
// back a change made during the outage applies, the claim is prepared once,
// and the kubelet's retries prepare nothing twice.
TEST_F(KubeletE2eTest, AnApiServerOutageLosesNothingAndPreparesNothingTwice) {
  const std::string api_dir = dir_ + "/api";
  std::filesystem::create_directories(api_dir);
  auto started = testing::FakeKubeApi::Start(api_dir);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  testing::FakeKubeApi& api = **started;
  api.AcceptToken("node-token");
  std::ofstream(api_dir + "/token") << "node-token\n";
  api.Create("/api/v1/nodes", {{"metadata", {{"name", "node-1"}}}});
  const std::string pods = "/api/v1/namespaces/team-a/pods";
  const json pod = api.Create(
      pods, {{"metadata", {{"name", "web"}, {"annotations", {{"gpuslice.io/cores", "30"}}}}},
             {"spec", {{"nodeName", "node-1"}}}});
  const std::string pod_group = "pod-" + pod["metadata"]["uid"].get<std::string>();
  api.Create("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims", ClaimObject("gpu-0"));
  StartDaemon(
      {"--dra", "--kube-node", "node-1", "--kube-api", api.url(), "--kube-ca", api.ca_file(),
       "--kube-token-file", api_dir + "/token", "--kube-resource-slices", "off"},
      /*claims_dir=*/false);
  const std::string uuid = GpuUuid(0);
  ASSERT_FALSE(uuid.empty());
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  auto pod_cores = [&] {
    const json g = Get("/v1/groups/" + pod_group);
    return g.is_object() ? g.value("/limits/all/compute_percent"_json_pointer, 0) : 0;
  };
  ASSERT_TRUE(WaitFor([&] { return pod_cores() == 30; }, 10s)) << Read("err0");

  // The outage: watches cut, every request refused.
  api.FailNextRequests(1 << 30, 503);
  api.DropConnections();
  auto refused_pod_requests = [&] {
    size_t n = 0;
    for (const auto& r : api.Requests()) n += r.path.ends_with("/pods") && r.code == 503 ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return refused_pod_requests() >= 1; }, 10s))
      << "the pod watch never came back to the server";
  auto failed = kubelet_.Prepare(endpoint, {Claim()});
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_NE(failed->claims().at(kClaimUid).error(), "") << "prepared without its claim";
  int status = 0;
  Get(std::string("/v1/groups/") + kClaimUid, &status);
  EXPECT_EQ(status, 404) << "a refused prepare left its group";
  EXPECT_FALSE(std::filesystem::exists(SpecPath()));
  api.Modify(pods + "/web",
             [](json& p) { p["metadata"]["annotations"]["gpuslice.io/cores"] = "50"; });
  ASSERT_TRUE(WaitFor([&] { return refused_pod_requests() >= 2; }, 10s));
  EXPECT_EQ(pod_cores(), 30) << "the outage lost what was applied";

  // The server is back.
  api.FailNextRequests(0, 503);
  EXPECT_TRUE(WaitFor([&] { return pod_cores() == 50; }, 90s))
      << "the change made during the outage never applied: " << pod_cores();
  for (int i = 0; i < 3; ++i) {  // the kubelet's retry, then retries of that
    auto prepared = kubelet_.Prepare(endpoint, {Claim()});
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    EXPECT_EQ(prepared->claims().at(kClaimUid).error(), "");
  }
  EXPECT_TRUE(HasLimits(kClaimUid, uuid, 4 * kGiB, 30)) << Get("/v1/groups").dump();
  std::ifstream record(dir_ + "/state/kube_allocations.json");
  std::stringstream text;
  text << record.rdbuf();
  const json saved = json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(saved.is_object()) << text.str();
  EXPECT_EQ(saved["data"]["allocations"].size(), 1u) << saved.dump();
}

// XID errors on the simulated GPU (`gpuslice sim xid`): an application's
// (13) is counted and changes nothing; a critical one (79, fallen off the
// bus) makes the GPU unhealthy in the API, the metrics, the device plugin's
// ListAndWatch and the DRA health stream.
TEST_F(KubeletE2eTest, ACriticalXidMakesTheGpuUnhealthyEverywhere) {
  ASSERT_TRUE(kubelet_.StartDevicePluginManager(kubelet_dir_ + "/device-plugins").ok());
  StartDaemon({"--dra", "--device-plugin"});
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 10s)) << kubelet_.Registrations().size();
  const std::string endpoint = RegisterPlugin();
  ASSERT_FALSE(endpoint.empty());
  const std::string uuid1 = GpuUuid(1);
  ASSERT_FALSE(uuid1.empty());
  auto xid_of = [&](uint32_t index) {
    json gpus = Get("/v1/gpus");
    if (gpus.is_object()) gpus = gpus.value("gpus", json::array());
    for (const json& g : gpus) {
      if (g.value("index", 99u) == index) return g.value("xid", json::object());
    }
    return json::object();
  };
  auto raise = [&](int gpu, int xid) {
    const int n = next_++;
    const pid_t pid = StartProgram(
        BuildDir() + "/sim/bin/gpuslice-sim", n,
        {"xid", "--state", state_, "--gpu", std::to_string(gpu), "--xid", std::to_string(xid)});
    ASSERT_EQ(Join(pid), 0) << Read("err" + std::to_string(n));
  };
  EXPECT_EQ(xid_of(1).value("healthy", false), true) << xid_of(1).dump();

  raise(0, 13);
  ASSERT_TRUE(WaitFor([&] { return xid_of(0).value("errors", 0) == 1; }, 10s))
      << xid_of(0).dump() << Read("err0");
  EXPECT_EQ(xid_of(0)["last"], 13);
  EXPECT_EQ(xid_of(0)["healthy"], true);

  raise(1, 79);
  ASSERT_TRUE(WaitFor([&] { return xid_of(1).value("healthy", true) == false; }, 10s))
      << xid_of(1).dump();
  EXPECT_EQ(xid_of(1)["critical"], 79);
  EXPECT_EQ(xid_of(0)["healthy"], true);

  auto metrics = cli::UnixHttpClient(socket_, 5s).Request("GET", "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("gpuslice_gpu_xid_errors_total"), std::string::npos);
  std::istringstream lines(metrics->body);
  std::map<std::string, std::string> healthy;  // uuid -> value
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("gpuslice_gpu_healthy{")) continue;
    for (const std::string& u : {GpuUuid(0), uuid1}) {
      if (line.find(u) != std::string::npos) healthy[u] = line.substr(line.rfind(' ') + 1);
    }
  }
  EXPECT_EQ(healthy[uuid1], "0") << metrics->body;
  EXPECT_EQ(healthy[GpuUuid(0)], "1") << metrics->body;

  // The device plugin: gpu1's devices Unhealthy.
  auto list = kubelet_.ListDevices(kubelet_dir_ + "/device-plugins/gpuslice-vgpu.sock");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  for (const auto& d : list->devices()) {
    EXPECT_EQ(d.health(), d.id().starts_with(uuid1) ? "Unhealthy" : "Healthy") << d.id();
  }
  // DRA health: gpu1 Unhealthy.
  auto health = kubelet_.WatchHealth(
      endpoint,
      [](const ::v1alpha1::NodeWatchResourcesResponse& r) {
        for (const auto& d : r.devices()) {
          if (d.device().device_name() == "gpu1" && d.health() == ::v1alpha1::UNHEALTHY) {
            return true;
          }
        }
        return false;
      },
      10s);
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  EXPECT_FALSE(health->empty());
  bool unhealthy = false;
  for (const auto& d : health->back().devices()) {
    if (d.device().device_name() == "gpu1") {
      unhealthy = d.health() == ::v1alpha1::UNHEALTHY;
    }
  }
  EXPECT_TRUE(unhealthy);
}

}  // namespace
}  // namespace gpuslice
