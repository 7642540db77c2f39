// gpusliced's kubelet side end to end: the real daemon (--dra) on a private
// simulated GPU, the fake kubelet registering its plugin and preparing a
// claim for 4 GiB and 30 %, and a tenant started with the CDI spec's
// environment (LD_PRELOAD and the rest, as a container runtime would apply
// it) that must see exactly a 4 GiB device and be refused beyond it; then
// unprepare releases it. Also: a daemon restart keeps the allocation and a
// kubelet retry after it prepares nothing twice.
#include "tests/integration/kubelet/kubelet_e2e_fixture.h"

namespace gpuslice {
namespace {

using namespace kubelet_e2e;  // NOLINT(google-build-using-namespace): the fixture and its constants

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
  std::string uuid;
  AllocatedSlice allocated;
  ASSERT_NO_FATAL_FAILURE(StartMpsPodSlice(api, uuid, allocated));
  std::map<std::string, std::string> env = allocated.env;
  const std::string& group = allocated.group;

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
