// The DRA plugin through the fake kubelet over real unix sockets.
#include "daemon/kubelet/dra_plugin.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "daemon/kubelet/fake_kubelet.h"
#include "daemon/kubelet/kubelet_side.h"

namespace gpuslice::daemon::kubelet {
namespace {

using nlohmann::json;

constexpr char kUid[] = "7d0e4c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6";
constexpr char kGpu0[] = "GPU-00000000-aaaa-bbbb-cccc-000000000000";
constexpr char kGpu1[] = "GPU-11111111-aaaa-bbbb-cccc-111111111111";
constexpr uint64_t kGiB = 1ull << 30;

// Called on the plugin's gRPC threads: locked, so the test's reads after a
// call are ordered after the call's writes (gRPC's own ordering is invisible
// to ThreadSanitizer).
class FakeClaimReader : public ClaimReader {
 public:
  StatusOr<ClaimInfo> Read(const ClaimRef& ref) override {
    std::lock_guard lock(mu);
    ++reads;
    auto it = claims.find(ref.uid);
    if (it == claims.end()) return NotFound("no claim " + ref.uid);
    return it->second;
  }
  int Reads() {
    std::lock_guard lock(mu);
    return reads;
  }
  void Forget() {
    std::lock_guard lock(mu);
    claims.clear();
  }
  std::mutex mu;
  std::map<std::string, ClaimInfo> claims;  // set before the first call
  int reads = 0;
};

class RecordingSink : public GroupLimitSink {
 public:
  Status SetLimits(const std::string& group, const Limits& limits) override {
    std::lock_guard lock(mu);
    groups_[group] = limits;
    return Status::Ok();
  }
  Status ClearLimits(const std::string& group) override {
    std::lock_guard lock(mu);
    groups_.erase(group);
    return Status::Ok();
  }
  std::map<std::string, Limits> groups() {
    std::lock_guard lock(mu);
    return groups_;
  }
  void Clear() {
    std::lock_guard lock(mu);
    groups_.clear();
  }

 private:
  std::mutex mu;
  std::map<std::string, Limits> groups_;
};

class DraPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/gs-dra." + std::to_string(getpid()) + "." +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/dev");
    std::ofstream(dir_ + "/dev/nvidia1") << "";
    std::ofstream(dir_ + "/dev/nvidiactl") << "";
    state_ = std::move(StateStore::Open(dir_ + "/state").value());
    reader_.claims[kUid] = ClaimInfo{.pod_uids = {"pod-1"},
                                     .devices = {ClaimDevice{.request = "gpu",
                                                             .pool = "node-1",
                                                             .device = DeviceNameOf(kGpu1),
                                                             .memory_bytes = 4 * kGiB,
                                                             .cores_percent = 30}}};
    MakePlugin();
  }
  void TearDown() override {
    plugin_.reset();
    std::filesystem::remove_all(dir_);
  }

  void MakePlugin() {
    plugin_.reset();
    store_ = std::make_unique<AllocationStore>(state_.get(), sink_);
    ASSERT_TRUE(store_->Restore().ok());
    DraPluginOptions options;
    options.plugin_socket = dir_ + "/plugins/gpuslice.io/dra.sock";
    options.registration_socket = dir_ + "/plugins_registry/gpuslice.io-reg.sock";
    options.cdi.dir = dir_ + "/cdi";
    options.cdi.dev_root = dir_ + "/dev";
    options.cdi.library = "/opt/gpuslice/libgpuslice.so";
    options.cdi.daemon_socket = "/run/gpuslice/gpusliced.sock";
    options.cdi.shm_dir = dir_ + "/shm";
    options.pool = "node-1";
    options.health_poll = std::chrono::milliseconds(10);
    options.health = [this] {
      std::lock_guard lock(health_mu_);
      return health_;
    };
    plugin_ = std::make_unique<DraPlugin>(options, reader_, *store_, [] {
      return std::vector<NodeGpu>{{0, kGpu0}, {1, kGpu1}};
    });
    ASSERT_TRUE(plugin_->Start().ok());
  }

  static dra_api::Claim Claim() {
    dra_api::Claim c;
    c.set_namespace_("team-a");
    c.set_name("slice");
    c.set_uid(kUid);
    return c;
  }
  std::string SpecPath() const { return dir_ + "/cdi/gpuslice.io-" + kUid + ".json"; }
  json Spec() const {
    std::ifstream in(SpecPath());
    return json::parse(in, nullptr, false);
  }

  std::string dir_;
  std::unique_ptr<StateStore> state_;
  FakeClaimReader reader_;
  RecordingSink sink_;
  std::mutex health_mu_;
  std::vector<DeviceHealthReport> health_ = {
      {"gpu0", DeviceHealthReport::State::kHealthy, 100, ""},
      {"gpu1", DeviceHealthReport::State::kHealthy, 100, ""}};
  std::unique_ptr<AllocationStore> store_;
  std::unique_ptr<DraPlugin> plugin_;
  FakeKubelet kubelet_;
};

TEST_F(DraPluginTest, RegistersWithThePluginWatcher) {
  const auto sockets = FakeKubelet::FindPluginSockets(dir_ + "/plugins_registry");
  ASSERT_EQ(sockets.size(), 1u);
  auto info = kubelet_.RegisterPlugin(sockets[0]);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->type(), "DRAPlugin");
  EXPECT_EQ(info->name(), "gpuslice.io");
  EXPECT_EQ(info->endpoint(), dir_ + "/plugins/gpuslice.io/dra.sock");
  ASSERT_EQ(info->supported_versions_size(), 2);
  EXPECT_EQ(info->supported_versions(0), "v1.DRAPlugin");
  EXPECT_EQ(info->supported_versions(1), "v1beta1.DRAPlugin");
  EXPECT_EQ(plugin_->registration().notifications, 1);
  EXPECT_TRUE(plugin_->registration().registered);
  ASSERT_TRUE(kubelet_.RegisterPlugin(sockets[0], /*accept=*/false).ok());
  EXPECT_FALSE(plugin_->registration().registered);
  EXPECT_EQ(plugin_->registration().error, "refused by the fake kubelet");
}

TEST_F(DraPluginTest, PrepareRecordsLimitsAndWritesTheCdiSpec) {
  auto r = kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->claims().count(kUid), 1u);
  const auto& claim = r->claims().at(kUid);
  EXPECT_EQ(claim.error(), "");
  ASSERT_EQ(claim.devices_size(), 1);
  EXPECT_EQ(claim.devices(0).pool_name(), "node-1");
  EXPECT_EQ(claim.devices(0).device_name(), DeviceNameOf(kGpu1));
  ASSERT_EQ(claim.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(claim.devices(0).cdi_device_ids(0), std::string("gpuslice.io/claim=") + kUid);
  EXPECT_EQ(LimitOn(sink_.groups()[kUid], kGpu1).memory_bytes, 4 * kGiB);
  EXPECT_EQ(LimitOn(sink_.groups()[kUid], kGpu1).compute_percent, 30u);
  auto a = store_->Get(kUid);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->pod_uids, std::vector<std::string>{"pod-1"});

  const json spec = Spec();
  ASSERT_FALSE(spec.is_discarded());
  EXPECT_EQ(spec["cdiVersion"], kCdiVersion);
  EXPECT_EQ(spec["kind"], "gpuslice.io/claim");
  EXPECT_EQ(spec["devices"][0]["name"], kUid);
  const auto env = CdiEnv(spec);
  EXPECT_EQ(env.at("GPUSLICE_GROUP"), kUid);
  EXPECT_EQ(json::parse(env.at("GPUSLICE_MEMORY_LIMIT")), json({{kGpu1, "4294967296"}}));
  EXPECT_EQ(json::parse(env.at("GPUSLICE_COMPUTE_LIMIT")), json({{kGpu1, "30"}}));
  EXPECT_EQ(env.at("LD_PRELOAD"), "/opt/gpuslice/libgpuslice.so");
  EXPECT_EQ(env.at("GPUSLICE_SOCKET"), "/run/gpuslice/gpusliced.sock");
  const std::string own = dir_ + "/shm/claims/" + kUid;  // the claim's directory only
  EXPECT_EQ(env.at("GPUSLICE_SHM_DIR"), own);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), kGpu1);
  std::vector<std::string> mounted;
  for (const json& m : spec["devices"][0]["containerEdits"]["mounts"]) {
    mounted.push_back(m["containerPath"]);
  }
  EXPECT_EQ(mounted,
            (std::vector<std::string>{"/opt/gpuslice/libgpuslice.so", "/run/gpuslice", own}));
  for (const json& m : spec["devices"][0]["containerEdits"]["mounts"]) {
    EXPECT_NE(m["hostPath"], dir_ + "/shm") << "the shared segment directory is mounted";
  }
  struct stat st {};
  ASSERT_EQ(stat(own.c_str(), &st), 0);  // made, for the container to create its segment in
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  std::vector<std::string> nodes;  // only those that exist on the "host"
  for (const json& n : spec["devices"][0]["containerEdits"]["deviceNodes"]) {
    nodes.push_back(n["path"]);
  }
  EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/nvidia1", "/dev/nvidiactl"}));
}

TEST_F(DraPluginTest, HealthIsStreamedToTheKubeletAndAgainWhenItChanges) {
  bool lost = false;
  auto updates = kubelet_.WatchHealth(
      plugin_->options().plugin_socket,
      [&](const v1alpha1::NodeWatchResourcesResponse& u) {
        if (!lost) {  // after the first list, GPU 1 is lost
          lost = true;
          std::lock_guard lock(health_mu_);
          health_[1] = {"gpu1", DeviceHealthReport::State::kUnhealthy, 101, "NVML: GPU is lost"};
          return false;
        }
        return u.devices_size() == 2 && u.devices(1).health() == v1alpha1::UNHEALTHY;
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(updates.ok()) << updates.status().ToString();
  ASSERT_EQ(updates->size(), 2u) << "one update per change, none while nothing changes";
  const auto& first = (*updates)[0];
  ASSERT_EQ(first.devices_size(), 2);
  EXPECT_EQ(first.devices(0).device().pool_name(), "node-1");
  EXPECT_EQ(first.devices(0).device().device_name(), "gpu0");
  EXPECT_EQ(first.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(first.devices(1).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(first.devices(0).last_updated_time(), 100);
  const auto& second = (*updates)[1];
  EXPECT_EQ(second.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(second.devices(1).health(), v1alpha1::UNHEALTHY);
  EXPECT_EQ(second.devices(1).last_updated_time(), 101);
}

TEST_F(DraPluginTest, PreparingTwiceIsOneAllocation) {
  ASSERT_TRUE(kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()}).ok());
  auto again = kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()}, "v1beta1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->claims().at(kUid).error(), "");
  EXPECT_EQ(again->claims().at(kUid).devices(0).cdi_device_ids(0),
            std::string("gpuslice.io/claim=") + kUid);
  EXPECT_EQ(reader_.Reads(), 1);  // answered from the record
  EXPECT_EQ(store_->All().size(), 1u);
}

TEST_F(DraPluginTest, UnprepareTwiceIsFine) {
  ASSERT_TRUE(kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()}).ok());
  for (const char* version : {"v1", "v1beta1"}) {
    auto r = kubelet_.Unprepare(plugin_->options().plugin_socket, {Claim()}, version);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->claims().count(kUid), 1u);
    EXPECT_EQ(r->claims().at(kUid).error(), "");
  }
  EXPECT_TRUE(store_->All().empty());
  EXPECT_EQ(sink_.groups().count(kUid), 0u);
  EXPECT_FALSE(std::filesystem::exists(SpecPath()));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/shm/claims/" + kUid));  // its segments go too
}

TEST_F(DraPluginTest, AFailedPrepareLeavesNothing) {
  reader_.claims[kUid].devices[0].device = "gpu-7";  // not a GPU of this node
  auto r = kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->claims().at(kUid).error().find("gpu-7"), std::string::npos);
  EXPECT_TRUE(store_->All().empty());
  EXPECT_TRUE(sink_.groups().empty());
  EXPECT_FALSE(std::filesystem::exists(SpecPath()));
  dra_api::Claim unknown = Claim();
  unknown.set_uid("no-such-claim");
  r = kubelet_.Prepare(plugin_->options().plugin_socket, {unknown});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->claims().at("no-such-claim").error(), "");
}

TEST_F(DraPluginTest, ADaemonRestartKeepsTheAllocation) {
  ASSERT_TRUE(kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()}).ok());
  std::filesystem::remove(SpecPath());  // /var/run/cdi lost, as on a tmpfs
  sink_.Clear();                        // the new daemon's registry
  MakePlugin();                         // a new daemon on the same state directory
  EXPECT_TRUE(std::filesystem::exists(SpecPath()));
  EXPECT_EQ(LimitOn(sink_.groups()[kUid], kGpu1).memory_bytes, 4 * kGiB);
  reader_.Forget();  // the API server is not even needed for a retry
  auto r = kubelet_.Prepare(plugin_->options().plugin_socket, {Claim()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->claims().at(kUid).error(), "");
  EXPECT_EQ(reader_.Reads(), 1);
}

TEST_F(DraPluginTest, LdSoPreloadInsteadOfLdPreload) {
  Allocation a;
  a.claim_uid = kUid;
  a.devices = {DeviceShare{.uuid = kGpu0,
                           .pool = "",
                           .device = "gpu-0",
                           .request = "",
                           .memory_bytes = kGiB,
                           .cores_percent = std::nullopt}};
  CdiOptions options;
  options.ld_so_preload = "/etc/gpuslice/ld.so.preload";
  const json spec = CdiSpecFor(a, options, {});
  const auto env = CdiEnv(spec);
  EXPECT_EQ(env.count("LD_PRELOAD"), 0u);
  EXPECT_EQ(env.count("GPUSLICE_COMPUTE_LIMIT"), 0u);
  bool preload_mounted = false;
  for (const json& m : spec["devices"][0]["containerEdits"]["mounts"]) {
    if (m["containerPath"] == "/etc/ld.so.preload") {
      preload_mounted = m["hostPath"] == "/etc/gpuslice/ld.so.preload";
    }
  }
  EXPECT_TRUE(preload_mounted);
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet

namespace gpuslice::daemon::kubelet {
namespace {

TEST(GpuHealth, UnknownBeforeAReadUnhealthyWhileReadsFail) {
  Snapshot s;
  s.gpus.resize(3);
  for (uint32_t i = 0; i < 3; ++i) {
    s.gpus[i].index = i;
    s.gpus[i].uuid = "GPU-" + std::to_string(i);
  }
  s.reads = {{.read_ns = 5, .failed = false}, {.read_ns = 5, .failed = true}, {}};
  const auto r = GpuHealth(s, 1700000000);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].device, "gpu0");
  EXPECT_EQ(r[0].state, DeviceHealthReport::State::kHealthy);
  EXPECT_EQ(r[1].state, DeviceHealthReport::State::kUnhealthy);
  EXPECT_NE(r[1].why.find("GPU-1"), std::string::npos);
  EXPECT_EQ(r[2].state, DeviceHealthReport::State::kUnknown);
  EXPECT_EQ(r[0].updated_unix_s, 1700000000);
  EXPECT_EQ(NodeName("node-7"), "node-7");
  EXPECT_FALSE(NodeName("").empty());
}

TEST(GpuHealth, ACriticalXidIsUnhealthyAnApplicationsIsNot) {
  Snapshot s;
  s.gpus.resize(2);
  for (uint32_t i = 0; i < 2; ++i) {
    s.gpus[i].index = i;
    s.gpus[i].uuid = "GPU-" + std::to_string(i);
    s.gpus[i].xid_errors = 1;
  }
  s.gpus[0].last_xid = 13;  // an application's: counted, not the GPU's fault
  s.gpus[1].last_xid = 79;
  s.gpus[1].critical_xid = 79;
  s.reads = {{.read_ns = 5, .failed = false}, {.read_ns = 5, .failed = false}};
  const auto r = GpuHealth(s, 1700000000);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].state, DeviceHealthReport::State::kHealthy);
  EXPECT_EQ(r[1].state, DeviceHealthReport::State::kUnhealthy);
  EXPECT_NE(r[1].why.find("XID 79"), std::string::npos) << r[1].why;
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
