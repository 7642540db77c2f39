// The device plugins through the fake kubelet over real unix sockets.
#include "daemon/kubelet/device_plugin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "daemon/kubelet/cdi_spec.h"
#include "daemon/kubelet/fake_kubelet.h"

namespace gpuslice::daemon::kubelet {
namespace {

using namespace std::chrono_literals;

constexpr char kGpu0[] = "GPU-00000000-aaaa-bbbb-cccc-000000000000";
constexpr char kGpu1[] = "GPU-11111111-aaaa-bbbb-cccc-111111111111";

TEST(DpDeviceIds, RoundTripAndFitTheKubeletsLimit) {
  const std::string id = DpDeviceId(DpResource::kMemory, kGpu1, 81919);
  EXPECT_LE(id.size(), 63u);
  auto p = ParseDpDeviceId(id);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->resource, DpResource::kMemory);
  EXPECT_EQ(p->uuid, kGpu1);
  EXPECT_EQ(p->n, 81919u);
  EXPECT_EQ(ParseDpDeviceId(DpDeviceId(DpResource::kCores, kGpu0, 7))->resource,
            DpResource::kCores);
  for (const char* bad : {"", "nvidia0", "GPU-x-q1", "GPU-x-m", "GPU-x-m1a"}) {
    EXPECT_FALSE(ParseDpDeviceId(bad).ok()) << bad;
  }
}

// The registry's side of the slices' limits.
class RecordingSink final : public GroupLimitSink {
 public:
  Status SetLimits(const std::string& group, const Limits& limits) override {
    std::lock_guard lock(mu_);
    groups_[group] = limits;
    return Status::Ok();
  }
  Status SetSettings(const std::string& group, const TenantRegistry::GroupChange& change) override {
    std::lock_guard lock(mu_);
    groups_[group] = change.limits.value_or(Limits{});
    changes_[group] = change;
    return Status::Ok();
  }
  Status ClearLimits(const std::string& group) override {
    std::lock_guard lock(mu_);
    groups_.erase(group);
    changes_.erase(group);
    return Status::Ok();
  }
  std::map<std::string, Limits> groups() {
    std::lock_guard lock(mu_);
    return groups_;
  }
  std::optional<TenantRegistry::GroupChange> change(const std::string& group) {
    std::lock_guard lock(mu_);
    auto it = changes_.find(group);
    if (it == changes_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Limits> groups_;
  std::map<std::string, TenantRegistry::GroupChange> changes_;
};

// A pod's annotations as kube/pod_settings.h GroupChangeFor gives them.
TenantRegistry::GroupChange Annotated(std::optional<uint64_t> memory, std::optional<uint32_t> cores,
                                      std::optional<uint32_t> request = {},
                                      std::optional<Tier> tier = {}) {
  TenantRegistry::GroupChange change;
  change.limits = Limits{};
  if (memory || cores) (*change.limits)[kAllGpus] = GpuLimit{memory, cores};
  change.schedule = ScheduleSettings{};
  if (request) {
    (*change.schedule)[kAllGpus] = ScheduleEntry{.request_percent = request,
                                                 .priority = Priority::kLatency,
                                                 .weight = {},
                                                 .memory_request_bytes = {}};
  }
  change.tier = tier;
  return change;
}

TEST(ContainerSettings, AnnotationsLowerTheAmountsAndFillWhatTheyLack) {
  const Limits amounts = {{kGpu0, GpuLimit{4ull << 30, std::nullopt}}};
  const std::set<std::string> gpus = {kGpu0};
  // No annotations: the amounts, the default schedule, the shared tier.
  auto plain = DevicePlugins::ContainerSettings(amounts, gpus, std::nullopt);
  EXPECT_EQ(plain.limits, amounts);
  EXPECT_TRUE(plain.schedule->empty());
  EXPECT_EQ(plain.tier, Tier::kShared);
  // Less memory than the amount lowers it; cores the container has no amount for are set.
  auto lower = DevicePlugins::ContainerSettings(amounts, gpus, Annotated(2ull << 30, 30, 20));
  EXPECT_EQ(lower.limits->at(kGpu0), (GpuLimit{2ull << 30, 30}));
  EXPECT_EQ(lower.schedule->at(kGpu0).request_percent, 20u);
  EXPECT_EQ(lower.schedule->at(kGpu0).priority, Priority::kLatency);
  EXPECT_EQ(lower.schedule->count(kAllGpus), 0u);  // on the container's GPUs only
  // More than the amount never raises it.
  auto more = DevicePlugins::ContainerSettings(amounts, gpus, Annotated(8ull << 30, {}));
  EXPECT_EQ(more.limits->at(kGpu0), (GpuLimit{4ull << 30, std::nullopt}));
  // The tier is the annotation's.
  EXPECT_EQ(DevicePlugins::ContainerSettings(amounts, gpus, Annotated({}, {}, {}, Tier::kMps)).tier,
            Tier::kMps);
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/gs-dp." + std::to_string(getpid()) + "." +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    state_ = std::move(StateStore::Open(dir_ + "/state").value());
    store_ = std::make_unique<AllocationStore>(state_.get(), sink_, "kube_device_plugin");
    ASSERT_TRUE(kubelet_.StartDevicePluginManager(dir_ + "/dp").ok());
    ASSERT_TRUE(kubelet_.StartPodResources(dir_ + "/pr/kubelet.sock").ok());
    DevicePluginOptions& options = options_;
    options.dir = dir_ + "/dp";
    options.pod_resources_socket = dir_ + "/pr/kubelet.sock";
    options.vgpu_per_gpu = 4;
    options.memory_unit_mib = 256;
    options.poll_interval = 20ms;
    options.reconcile_every = 0;  // the tests call Reconcile themselves
    options.inject.library = "/opt/gpuslice/libgpuslice.so";
    options.inject.daemon_socket = "/run/gpuslice/gpusliced.sock";
    options.inject.dev_root = dir_ + "/nodev";
    options.inject.shm_dir = dir_ + "/shm";
    options.limits = &limits_;
    plugins_ = std::make_unique<DevicePlugins>(options, *store_, [this] {
      return std::vector<GpuOffer>{{0, kGpu0, 8ull << 30, true},
                                   {1, kGpu1, 8ull << 30, !gpu1_unhealthy_.load()}};
    });
    ASSERT_TRUE(plugins_->Start().ok());
  }
  void TearDown() override {
    plugins_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string Socket(const char* name) const { return dir_ + "/dp/gpuslice-" + name + ".sock"; }
  // The plugins again, with `options_` as the test changed them.
  void Restart() {
    plugins_.reset();
    plugins_ = std::make_unique<DevicePlugins>(options_, *store_, [] {
      return std::vector<GpuOffer>{{0, kGpu0, 8ull << 30, true}, {1, kGpu1, 8ull << 30, true}};
    });
    ASSERT_TRUE(plugins_->Start().ok());
  }

  std::string dir_;
  DevicePluginOptions options_;
  std::unique_ptr<StateStore> state_;
  NoLimitSink sink_;
  RecordingSink limits_;
  std::unique_ptr<AllocationStore> store_;
  FakeKubelet kubelet_;
  std::unique_ptr<DevicePlugins> plugins_;
  std::atomic<bool> gpu1_unhealthy_{false};
};

TEST_F(DevicePluginTest, RegistersTheThreeResources) {
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 5s));
  std::vector<std::string> names;
  for (const auto& r : kubelet_.Registrations()) {
    EXPECT_EQ(r.version(), "v1beta1");
    names.push_back(r.resource_name() + " " + r.endpoint());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"gpuslice.io/vgpu gpuslice-vgpu.sock",
                                             "gpuslice.io/gpu-memory gpuslice-gpu-memory.sock",
                                             "gpuslice.io/gpu-cores gpuslice-gpu-cores.sock"}));
}

TEST_F(DevicePluginTest, ListsDeterministicDevices) {
  auto vgpu = kubelet_.ListDevices(Socket("vgpu"));
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->devices_size(), 8);
  EXPECT_EQ(vgpu->devices(0).id(), std::string(kGpu0) + "-v0");
  EXPECT_EQ(vgpu->devices(0).health(), "Healthy");
  auto memory = kubelet_.ListDevices(Socket("gpu-memory"));
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->devices_size(), 2 * 32);  // 8 GiB in 256 MiB units, per GPU
  auto cores = kubelet_.ListDevices(Socket("gpu-cores"));
  ASSERT_TRUE(cores.ok());
  EXPECT_EQ(cores->devices_size(), 200);
}

TEST_F(DevicePluginTest, AllocateReadsTheGpuAndAmountFromTheIds) {
  std::vector<std::string> ids;
  ids.reserve(16);
  for (int n = 0; n < 16; ++n) ids.push_back(DpDeviceId(DpResource::kMemory, kGpu1, n));
  auto r = kubelet_.Allocate(Socket("gpu-memory"), {ids});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->container_responses_size(), 1);
  const auto& envs = r->container_responses(0).envs();
  EXPECT_EQ(nlohmann::json::parse(envs.at("GPUSLICE_MEMORY_LIMIT")),
            nlohmann::json({{kGpu1, std::to_string(16ull * 256 << 20)}}));
  // An amount of the container's slice: its limit, nothing mounted or named
  // (the vgpu's answer does that; the kubelet merges them).
  EXPECT_EQ(envs.size(), 1u);
  EXPECT_EQ(r->container_responses(0).mounts_size(), 0);

  std::vector<std::string> cores;
  cores.reserve(30);
  for (int n = 0; n < 30; ++n) cores.push_back(DpDeviceId(DpResource::kCores, kGpu0, n));
  auto c = kubelet_.Allocate(Socket("gpu-cores"), {cores});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(nlohmann::json::parse(c->container_responses(0).envs().at("GPUSLICE_COMPUTE_LIMIT")),
            nlohmann::json({{kGpu0, "30"}}));
  EXPECT_EQ(store_->All().size(), 2u);
  // The same ids again (a kubelet retry): the same allocation.
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-memory"), {ids}).ok());
  EXPECT_EQ(store_->All().size(), 2u);
  // Ids of another resource, or of no GPU here, are refused.
  EXPECT_FALSE(kubelet_.Allocate(Socket("gpu-memory"), {cores}).ok());
  EXPECT_FALSE(
      kubelet_.Allocate(Socket("gpu-memory"), {{DpDeviceId(DpResource::kMemory, "GPU-x", 0)}})
          .ok());
}

TEST_F(DevicePluginTest, ASliceMountsOnlyItsOwnSegmentDirectory) {
  std::vector<std::vector<std::string>> containers = {{DpDeviceId(DpResource::kVgpu, kGpu0, 0)},
                                                      {DpDeviceId(DpResource::kVgpu, kGpu0, 1)}};
  auto r = kubelet_.Allocate(Socket("vgpu"), containers);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->container_responses_size(), 2);
  std::set<std::string> groups;
  for (const auto& c : r->container_responses()) {
    const std::string group = c.envs().at("GPUSLICE_GROUP");
    groups.insert(group);
    const std::string own = dir_ + "/shm/claims/" + group;
    EXPECT_EQ(c.envs().at("GPUSLICE_SHM_DIR"), own);
    EXPECT_EQ(c.envs().at("LD_PRELOAD"), "/opt/gpuslice/libgpuslice.so");
    EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), kGpu0);
    std::vector<std::string> segment_mounts;
    for (const auto& m : c.mounts()) {
      if (m.host_path().starts_with(dir_ + "/shm")) segment_mounts.push_back(m.host_path());
    }
    EXPECT_EQ(segment_mounts, std::vector<std::string>{own}) << "only the group's own directory";
    EXPECT_TRUE(std::filesystem::is_directory(own));
  }
  EXPECT_EQ(groups.size(), 2u);  // one group, and one directory, per container
}

TEST_F(DevicePluginTest, AContainersAmountsBecomeItsSlicesLimitsInTheDaemon) {
  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, kGpu1, 3)};
  std::vector<std::string> memory;
  memory.reserve(16);
  for (int n = 0; n < 16; ++n) memory.push_back(DpDeviceId(DpResource::kMemory, kGpu1, n));
  std::vector<std::string> cores;
  cores.reserve(30);
  for (int n = 0; n < 30; ++n) cores.push_back(DpDeviceId(DpResource::kCores, kGpu1, n));
  auto v = kubelet_.Allocate(Socket("vgpu"), {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string group = v->container_responses(0).envs().at("GPUSLICE_GROUP");
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-memory"), {memory}).ok());
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-cores"), {cores}).ok());
  EXPECT_EQ(limits_.groups().count(group), 0u);  // not joined yet

  kubelet_.SetPods({PodWithDevices("trainer", "team-a",
                                   {{"gpuslice.io/vgpu", slice},
                                    {"gpuslice.io/gpu-memory", memory},
                                    {"gpuslice.io/gpu-cores", cores}})});
  ASSERT_TRUE(plugins_->Reconcile().ok());
  auto groups = limits_.groups();
  ASSERT_EQ(groups.count(group), 1u);
  EXPECT_EQ(LimitOn(groups[group], kGpu1).memory_bytes, 16ull * 256 << 20);
  EXPECT_EQ(LimitOn(groups[group], kGpu1).compute_percent, 30u);
  EXPECT_EQ(groups.size(), 1u);  // the amounts are no groups of their own

  kubelet_.SetPods({});  // gone: twice, then released, limits and directory too
  ASSERT_TRUE(plugins_->Reconcile().ok());
  ASSERT_TRUE(plugins_->Reconcile().ok());
  EXPECT_TRUE(store_->All().empty());
  EXPECT_TRUE(limits_.groups().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/shm/claims/" + group));
}

// A slice released while its record cannot be saved (the state directory
// renamed away) is released all the same: limits cleared, segment directory
// removed; the record is saved by the store's retry once it can be.
TEST_F(DevicePluginTest, AnUnsavedReleaseStillReleasesAndIsSavedLater) {
  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, kGpu0, 1)};
  auto v = kubelet_.Allocate(Socket("vgpu"), {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string group = v->container_responses(0).envs().at("GPUSLICE_GROUP");
  kubelet_.SetPods({PodWithDevices("trainer", "team-a", {{"gpuslice.io/vgpu", slice}})});
  ASSERT_TRUE(plugins_->Reconcile().ok());
  ASSERT_EQ(limits_.groups().count(group), 1u);

  const std::string state = dir_ + "/state";
  std::filesystem::rename(state, state + ".away");
  kubelet_.SetPods({});
  ASSERT_TRUE(plugins_->Reconcile().ok());  // missing once
  Status released = plugins_->Reconcile();
  EXPECT_EQ(released.code(), StatusCode::kUnavailable) << released.ToString();
  EXPECT_TRUE(store_->All().empty());
  EXPECT_TRUE(limits_.groups().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/shm/claims/" + group));
  EXPECT_TRUE(state_->Stale("kube_device_plugin"));

  std::filesystem::rename(state + ".away", state);
  ASSERT_TRUE(store_->RetryCheckpoint().ok());
  EXPECT_FALSE(state_->Stale("kube_device_plugin"));
  NoLimitSink none;
  AllocationStore restarted(state_.get(), none, "kube_device_plugin");
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_TRUE(restarted.All().empty());
}

TEST_F(DevicePluginTest, EveryPluginAsksForPreStartContainer) {
  for (const char* name : {"vgpu", "gpu-memory", "gpu-cores"}) {
    auto o = kubelet_.Options(Socket(name));
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_TRUE(o->pre_start_required()) << name;
  }
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 5s));
  for (const auto& r : kubelet_.Registrations()) {
    EXPECT_TRUE(r.options().pre_start_required()) << r.resource_name();
  }
}

// The kubelet calls PreStartContainer after every Allocate of the container
// and before starting it: the slice's group holds its settings by then,
// whatever the environment says and without waiting for a poll (this
// fixture has none: reconcile_every = 0).
TEST_F(DevicePluginTest, TheSlicesSettingsAreSetBeforeItsContainerStarts) {
  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, kGpu0, 1)};
  std::vector<std::string> memory;
  memory.reserve(16);
  for (int n = 0; n < 16; ++n) memory.push_back(DpDeviceId(DpResource::kMemory, kGpu0, n));
  auto v = kubelet_.Allocate(Socket("vgpu"), {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string group = v->container_responses(0).envs().at("GPUSLICE_GROUP");
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-memory"), {memory}).ok());
  // Not in PodResources (yet): the start is refused, nothing is set.
  Status early = kubelet_.PreStart(Socket("vgpu"), slice);
  EXPECT_FALSE(early.ok());
  EXPECT_NE(early.message().find("PodResources"), std::string::npos) << early.ToString();
  EXPECT_EQ(limits_.groups().count(group), 0u);

  kubelet_.SetPods({PodWithDevices(
      "trainer", "team-a", {{"gpuslice.io/vgpu", slice}, {"gpuslice.io/gpu-memory", memory}})});
  ASSERT_TRUE(kubelet_.PreStart(Socket("gpu-memory"), memory).ok());
  ASSERT_TRUE(kubelet_.PreStart(Socket("vgpu"), slice).ok());
  auto groups = limits_.groups();
  ASSERT_EQ(groups.count(group), 1u);
  EXPECT_EQ(LimitOn(groups[group], kGpu0).memory_bytes, 4ull << 30);
  // Ids this daemon never allocated are refused.
  EXPECT_FALSE(kubelet_.PreStart(Socket("vgpu"), {DpDeviceId(DpResource::kVgpu, kGpu0, 3)}).ok());
}

TEST_F(DevicePluginTest, AnAmountWithoutASliceIsRefusedAtStart) {
  std::vector<std::string> cores;
  cores.reserve(30);
  for (int n = 0; n < 30; ++n) cores.push_back(DpDeviceId(DpResource::kCores, kGpu1, n));
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-cores"), {cores}).ok());
  kubelet_.SetPods({PodWithDevices("loose", "team-a", {{"gpuslice.io/gpu-cores", cores}})});
  const Status s = kubelet_.PreStart(Socket("gpu-cores"), cores);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("team-a/loose"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("needs gpuslice.io/vgpu"), std::string::npos) << s.ToString();
  EXPECT_TRUE(limits_.groups().empty());
}

// The pod's gpuslice.io/* annotations reach its containers' slices, live,
// with the precedence of ContainerSettings.
TEST_F(DevicePluginTest, PodAnnotationsReachItsContainersSlicesLive) {
  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, kGpu1, 0)};
  std::vector<std::string> memory;
  memory.reserve(16);
  for (int n = 0; n < 16; ++n) memory.push_back(DpDeviceId(DpResource::kMemory, kGpu1, n));
  auto v = kubelet_.Allocate(Socket("vgpu"), {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string group = v->container_responses(0).envs().at("GPUSLICE_GROUP");
  ASSERT_TRUE(kubelet_.Allocate(Socket("gpu-memory"), {memory}).ok());
  // Annotations known before the container is: applied once it is.
  plugins_->SetPodSettings("team-a/trainer", Annotated(2ull << 30, 30, 20));
  EXPECT_TRUE(limits_.groups().empty());
  kubelet_.SetPods({PodWithDevices(
      "trainer", "team-a", {{"gpuslice.io/vgpu", slice}, {"gpuslice.io/gpu-memory", memory}})});
  ASSERT_TRUE(plugins_->Reconcile().ok());
  auto change = limits_.change(group);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->limits->at(kGpu1), (GpuLimit{2ull << 30, 30}));
  EXPECT_EQ(change->schedule->at(kGpu1).request_percent, 20u);
  // A change applies at once, without a check: more memory than the
  // container's amount does not raise it.
  plugins_->SetPodSettings("team-a/trainer", Annotated(8ull << 30, 50));
  change = limits_.change(group);
  EXPECT_EQ(change->limits->at(kGpu1), (GpuLimit{4ull << 30, 50}));
  EXPECT_TRUE(change->schedule->empty());
  // Annotations removed: the amounts alone.
  plugins_->SetPodSettings("team-a/trainer", std::nullopt);
  EXPECT_EQ(limits_.change(group)->limits->at(kGpu1), (GpuLimit{4ull << 30, std::nullopt}));
  // Another pod's annotations change nothing here.
  plugins_->SetPodSettings("team-a/other", Annotated(1ull << 30, 10));
  EXPECT_EQ(limits_.change(group)->limits->at(kGpu1), (GpuLimit{4ull << 30, std::nullopt}));
}

// docs/kubelet.md "MPS": a slice's Allocate names its MPS CDI device
// (empty: Allocate cannot know the pod); PreStartContainer fills it for a pod
// asking for tier mps, with what acquiring the group's MPS tenant gives, and
// leaves it empty for a shared pod or where MPS cannot be had; a release
// removes it and lets the tenant go.
TEST_F(DevicePluginTest, AnMpsPodsSliceGetsItsGroupsMpsClientBeforeItStarts) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::vector<std::string>>> acquired;
  std::vector<std::string> released;
  bool grant = true;
  options_.inject.dir = dir_ + "/cdi";
  options_.mps_acquire = [&](const std::string& group, const std::vector<std::string>& uuids) {
    std::lock_guard lock(mu);
    acquired.emplace_back(group, uuids);
    DevicePluginOptions::MpsGrant g;
    if (!grant) {
      g.reason = "no MPS here";
      return g;
    }
    g.tier = Tier::kMps;
    g.env = {{"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/mps/pipe"},
             {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"}};
    return g;
  };
  options_.mps_release = [&](const std::string& group) {
    std::lock_guard lock(mu);
    released.push_back(group);
  };
  Restart();
  auto spec_of = [&](const std::string& group) {
    std::ifstream in(CdiMpsSpecPath(dir_ + "/cdi", group));
    return nlohmann::json::parse(in, nullptr, false);
  };

  const std::vector<std::string> slice = {DpDeviceId(DpResource::kVgpu, kGpu1, 0)};
  auto v = kubelet_.Allocate(Socket("vgpu"), {slice});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string group = v->container_responses(0).envs().at("GPUSLICE_GROUP");
  ASSERT_EQ(v->container_responses(0).cdi_devices_size(), 1);
  EXPECT_EQ(v->container_responses(0).cdi_devices(0).name(), "gpuslice.io/mps=" + group);
  EXPECT_EQ(CdiEnv(spec_of(group)), (std::map<std::string, std::string>{{"GPUSLICE_MPS", "off"}}));
  // An amount's answer names none (only the slice's does).
  auto m = kubelet_.Allocate(Socket("gpu-memory"), {{DpDeviceId(DpResource::kMemory, kGpu1, 0)}});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->container_responses(0).cdi_devices_size(), 0);

  plugins_->SetPodSettings("team-a/server", Annotated({}, 30, {}, Tier::kMps));
  kubelet_.SetPods({PodWithDevices("server", "team-a", {{"gpuslice.io/vgpu", slice}})});
  ASSERT_TRUE(kubelet_.PreStart(Socket("vgpu"), slice).ok());
  nlohmann::json spec = spec_of(group);
  EXPECT_EQ(spec["kind"], "gpuslice.io/mps");
  EXPECT_EQ(CdiEnv(spec).at("CUDA_MPS_PIPE_DIRECTORY"), dir_ + "/mps/pipe");
  EXPECT_EQ(CdiEnv(spec).at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  const nlohmann::json mounts = spec["devices"][0]["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 1u) << spec.dump();  // the pipe directory alone
  EXPECT_EQ(mounts[0]["hostPath"], dir_ + "/mps/pipe");
  EXPECT_EQ(mounts[0]["containerPath"], dir_ + "/mps/pipe");
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(acquired.size(), 1u);
    EXPECT_EQ(acquired[0].first, group);
    EXPECT_EQ(acquired[0].second, std::vector<std::string>{kGpu1});
  }

  // The container started again where MPS cannot be had: no MPS client.
  {
    std::lock_guard lock(mu);
    grant = false;
  }
  ASSERT_TRUE(kubelet_.PreStart(Socket("vgpu"), slice).ok());
  EXPECT_EQ(CdiEnv(spec_of(group)), (std::map<std::string, std::string>{{"GPUSLICE_MPS", "off"}}));

  // A shared pod's slice: nothing acquired, its spec empty.
  const std::vector<std::string> plain = {DpDeviceId(DpResource::kVgpu, kGpu0, 0)};
  auto p = kubelet_.Allocate(Socket("vgpu"), {plain});
  ASSERT_TRUE(p.ok());
  const std::string plain_group = p->container_responses(0).envs().at("GPUSLICE_GROUP");
  kubelet_.SetPods({PodWithDevices("server", "team-a", {{"gpuslice.io/vgpu", slice}}),
                    PodWithDevices("plain", "team-a", {{"gpuslice.io/vgpu", plain}})});
  ASSERT_TRUE(kubelet_.PreStart(Socket("vgpu"), plain).ok());
  EXPECT_EQ(CdiEnv(spec_of(plain_group)),
            (std::map<std::string, std::string>{{"GPUSLICE_MPS", "off"}}));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(acquired.size(), 2u);
  }

  // The pod gone (two checks): its spec removed, its tenant let go.
  kubelet_.SetPods({PodWithDevices("plain", "team-a", {{"gpuslice.io/vgpu", plain}})});
  ASSERT_TRUE(plugins_->Reconcile().ok());
  ASSERT_TRUE(plugins_->Reconcile().ok());
  EXPECT_FALSE(std::filesystem::exists(CdiMpsSpecPath(dir_ + "/cdi", group)));
  EXPECT_TRUE(std::filesystem::exists(CdiMpsSpecPath(dir_ + "/cdi", plain_group)));
  std::lock_guard lock(mu);
  EXPECT_NE(std::find(released.begin(), released.end(), group), released.end());
}

TEST_F(DevicePluginTest, PodResourcesNamesThePodAndReleasesWhatNoPodHolds) {
  std::vector<std::string> ids = {DpDeviceId(DpResource::kVgpu, kGpu0, 2)};
  ASSERT_TRUE(kubelet_.Allocate(Socket("vgpu"), {ids}).ok());
  v1::PodResources pod;
  pod.set_name("trainer");
  pod.set_namespace_("team-a");
  auto* devices = pod.add_containers()->add_devices();
  devices->set_resource_name("gpuslice.io/vgpu");
  devices->add_device_ids(ids[0]);
  kubelet_.SetPods({pod});
  ASSERT_TRUE(plugins_->Reconcile().ok());
  ASSERT_EQ(store_->All().size(), 1u);
  EXPECT_EQ(store_->All()[0].claim_namespace, "team-a");
  EXPECT_EQ(store_->All()[0].claim_name, "trainer");
  kubelet_.SetPods({});  // the pod is gone
  ASSERT_TRUE(plugins_->Reconcile().ok());
  EXPECT_EQ(store_->All().size(), 1u);  // once could be a race with a starting pod
  ASSERT_TRUE(plugins_->Reconcile().ok());
  EXPECT_TRUE(store_->All().empty());
}

// A GPU going unhealthy (lost, or a critical XID) is sent to the kubelet
// on the open ListAndWatch stream: its devices Unhealthy, the others not.
TEST_F(DevicePluginTest, AnUnhealthyGpusDevicesAreSentUnhealthy) {
  auto health_of = [](const v1beta1::ListAndWatchResponse& r, const std::string& prefix) {
    std::set<std::string> states;
    for (const auto& d : r.devices()) {
      if (d.id().starts_with(prefix)) states.insert(d.health());
    }
    return states;
  };
  int lists = 0;
  auto watched = kubelet_.WatchDevices(
      Socket("vgpu"),
      [&](const v1beta1::ListAndWatchResponse& r) {
        if (++lists == 1) {
          EXPECT_EQ(health_of(r, kGpu1), std::set<std::string>{"Healthy"});
          gpu1_unhealthy_ = true;  // the XID arrives while the kubelet watches
          return false;
        }
        return true;
      },
      10s);
  ASSERT_TRUE(watched.ok()) << watched.status().ToString();
  ASSERT_EQ(watched->size(), 2u) << "the change was sent on the stream";
  EXPECT_EQ(health_of(watched->back(), kGpu1), std::set<std::string>{"Unhealthy"});
  EXPECT_EQ(health_of(watched->back(), kGpu0), std::set<std::string>{"Healthy"});
  EXPECT_EQ(watched->back().devices_size(), 8);
}

TEST_F(DevicePluginTest, AKubeletRestartReRegisters) {
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 5s));
  ASSERT_TRUE(kubelet_.RestartDevicePluginManager().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(6, 10s)) << kubelet_.Registrations().size();
  // The plugins serve again on their (removed and recreated) sockets.
  auto vgpu = kubelet_.ListDevices(Socket("vgpu"));
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->devices_size(), 8);
  // The plugin counts a registration once the kubelet's answer is back.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (plugins_->registrations() < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(plugins_->registrations(), 6);
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
