#include "daemon/tenants/group_tiers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "daemon/gpu/fake_backend.h"
#include "daemon/mps/fake_mps.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

using ::testing::HasSubstr;
constexpr uint64_t kGiB = 1ull << 30;

class GroupTiersTest : public ::testing::Test {
 protected:
  GroupTiersTest() {
    for (pid_t pid : {100, 101, 102}) {
      proc_.Add(pid, std::to_string(pid), 1000, 10 + pid, "0::/user.slice/u.scope\n");
    }
  }

  mps::MpsManager& Manager() {
    if (!manager_) {
      manager_ =
          std::make_unique<mps::MpsManager>(mps::MpsOptions{.root = "/mps"}, gpus_, host_, clock_);
      EXPECT_TRUE(manager_->Start().ok());
      tiers_ = std::make_unique<GroupTiers>(
          registry_, *manager_, [this](std::string_view type, const nlohmann::json& data) {
            events_.emplace_back(type, data);
          });
    }
    return *manager_;
  }
  GroupTiers& Tiers() {
    Manager();
    return *tiers_;
  }
  void MpsGroup(const std::string& id, GpuLimit all) {
    ASSERT_TRUE(registry_.SetGroup(id, {{kAllGpus, all}}, Tier::kMps).ok());
  }
  Tenant Register(pid_t pid, const std::string& group, std::vector<std::string> devices,
                  GpuLimit own = {}) {
    Registration reg;
    reg.pid = pid;
    reg.uid = 1000;
    reg.group = group;
    reg.devices = std::move(devices);
    reg.limits = own;
    auto t = registry_.Register(reg);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? *t : Tenant{};
  }
  std::string Uuid(int i) const { return gpus_.uuids[i]; }
  std::string Pipe(int i) const { return mps::MpsGpuDir("/mps", gpus_.uuids[i]) + "/pipe"; }

  FakeProc proc_;
  SimulatedClock clock_;
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, clock_, watcher_, nullptr, {}};
  mps::testing::FakeGpus gpus_{2};
  mps::testing::FakeHost host_{clock_};
  std::unique_ptr<mps::MpsManager> manager_;
  std::unique_ptr<GroupTiers> tiers_;
  std::vector<std::pair<std::string, nlohmann::json>> events_;  // what tiers_ published
};

TEST_F(GroupTiersTest, AnMpsGroupGetsOneMpsTenantWithItsLimitsInTheEnvironment) {
  MpsGroup("train", {.memory_bytes = 4 * kGiB, .compute_percent = 30});
  GroupTiers::Grant a = Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  EXPECT_EQ(a.tier, Tier::kMps);
  EXPECT_EQ(a.reason, "");
  EXPECT_EQ(a.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0));
  EXPECT_EQ(a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(a.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4G");
  ASSERT_EQ(a.per_gpu.size(), 1u);
  EXPECT_EQ(a.per_gpu[0].uuid, Uuid(0));
  // The manager holds one tenant named by the group, with the group's limits.
  auto tenants = Manager().Tenants();
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0].name, "train");
  EXPECT_EQ(tenants[0].settings.active_thread_percentage, 30u);
  EXPECT_EQ(tenants[0].settings.pinned_memory_limit, 4 * kGiB);
  EXPECT_NE(host_.DaemonOf(Pipe(0)), 0);

  // A second member shares it; its own lower limits go into its environment.
  GroupTiers::Grant b = Tiers().GrantFor(
      Register(101, "train", {Uuid(0)},
               {.memory_bytes = kGiB + 512 * (kGiB / 1024), .compute_percent = std::nullopt}));
  EXPECT_EQ(b.tier, Tier::kMps);
  EXPECT_EQ(b.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=1536M");
  EXPECT_EQ(b.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(host_.starts, 1) << "one daemon for the GPU";
  ASSERT_TRUE(Tiers().GroupState("train").has_value());
  EXPECT_EQ(Tiers().GroupState("train")->uuids, std::vector<std::string>{Uuid(0)});
}

TEST_F(GroupTiersTest, TheLastMemberLeavingReleasesTheMpsTenant) {
  MpsGroup("train", {});
  Tiers().GrantFor(Register(100, "train", {Uuid(1)}));
  Tiers().GrantFor(Register(101, "train", {Uuid(1)}));
  const pid_t daemon = host_.DaemonOf(Pipe(1));
  ASSERT_NE(daemon, 0);
  ASSERT_TRUE(registry_.Unregister(100).ok());
  Tiers().ReleaseIfUnused("train");
  EXPECT_EQ(Manager().Tenants().size(), 1u) << "a member is left";
  registry_.OnExited({101});
  Tiers().ReleaseIfUnused("train");
  EXPECT_TRUE(Manager().Tenants().empty());
  EXPECT_EQ(host_.DaemonOf(Pipe(1)), 0) << "the GPU's daemon stopped with its last tenant";
  EXPECT_FALSE(Tiers().GroupState("train").has_value());
  // A new member acquires it again.
  EXPECT_EQ(Tiers().GrantFor(Register(102, "train", {Uuid(1)})).tier, Tier::kMps);
  EXPECT_EQ(host_.starts, 2);
}

TEST_F(GroupTiersTest, TheWorkerReleasesAfterTheLastExit) {
  MpsGroup("train", {});
  Tiers().Start();
  Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  registry_.OnExited({100});
  Tiers().TenantLeft("train");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!Manager().Tenants().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(Manager().Tenants().empty());
  Tiers().Stop();
}

TEST_F(GroupTiersTest, WithoutMpsTheGroupFallsBackToSharedSayingWhy) {
  host_.binary_installed = false;
  MpsGroup("train", {.memory_bytes = 4 * kGiB, .compute_percent = 30});
  GroupTiers::Grant g = Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  EXPECT_EQ(g.tier, Tier::kShared);
  EXPECT_THAT(g.reason, HasSubstr("not found"));
  EXPECT_TRUE(g.env.empty());
  ASSERT_TRUE(Tiers().GroupState("train").has_value());
  EXPECT_EQ(Tiers().GroupState("train")->tier, Tier::kShared);
  EXPECT_THAT(Tiers().Current(*registry_.TenantOf(100)).reason, HasSubstr("not found"));
  registry_.OnExited({100});
  Tiers().ReleaseIfUnused("train");
  EXPECT_TRUE(Manager().Tenants().empty()) << "the manager's fallback record is released too";
}

TEST_F(GroupTiersTest, AStartFailureFallsBackToShared) {
  host_.fail_start = true;
  MpsGroup("train", {});
  GroupTiers::Grant g = Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  EXPECT_EQ(g.tier, Tier::kShared);
  EXPECT_THAT(g.reason, HasSubstr("could not start"));
}

TEST_F(GroupTiersTest, AMemberOnOtherGpusGetsSharedSayingWhy) {
  MpsGroup("train", {});
  ASSERT_EQ(Tiers().GrantFor(Register(100, "train", {Uuid(0)})).tier, Tier::kMps);
  GroupTiers::Grant g = Tiers().GrantFor(Register(101, "train", {Uuid(0), Uuid(1)}));
  EXPECT_EQ(g.tier, Tier::kShared);
  EXPECT_THAT(g.reason, HasSubstr("not among"));
  EXPECT_EQ(Tiers().Current(*registry_.TenantOf(100)).tier, Tier::kMps);
  EXPECT_EQ(Tiers().Current(*registry_.TenantOf(101)).tier, Tier::kShared);
}

TEST_F(GroupTiersTest, AnMpsTenantOfTheSameNameMadeThroughTheMpsApiIsNotTaken) {
  ASSERT_TRUE(Manager().Acquire({.tenant = "train", .gpus = "1", .settings = {}}).ok());
  MpsGroup("train", {});
  GroupTiers::Grant g = Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  EXPECT_EQ(g.tier, Tier::kShared);
  EXPECT_THAT(g.reason, HasSubstr("MPS refused"));
  registry_.OnExited({100});
  Tiers().ReleaseIfUnused("train");
  EXPECT_EQ(Manager().Tenants().size(), 1u) << "not ours to release";
}

TEST_F(GroupTiersTest, AnMpsTenantReleasedBehindTheGroupsBackIsAcquiredAgain) {
  MpsGroup("train", {});
  ASSERT_EQ(Tiers().GrantFor(Register(100, "train", {Uuid(0)})).tier, Tier::kMps);
  ASSERT_TRUE(Manager().Release("train").ok());  // through /v1/mps/release
  EXPECT_EQ(host_.DaemonOf(Pipe(0)), 0);
  GroupTiers::Grant g = Tiers().GrantFor(Register(101, "train", {Uuid(0)}));
  EXPECT_EQ(g.tier, Tier::kMps);
  EXPECT_EQ(g.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0));
  EXPECT_NE(host_.DaemonOf(Pipe(0)), 0) << "started again";
}

TEST_F(GroupTiersTest, TheGroupsNewLimitsReachItsMpsTenantAndItsAloneServers) {
  MpsGroup("train", {.memory_bytes = 4 * kGiB, .compute_percent = 30});
  Tiers().GrantFor(Register(100, "train", {Uuid(0)}));
  host_.servers[Pipe(0)][777] = {100};  // the group's running MPS server
  ASSERT_TRUE(
      registry_
          .SetGroup("train", {{kAllGpus, {.memory_bytes = 2 * kGiB, .compute_percent = 20}}}, {})
          .ok());
  Tiers().ApplyLimits("train");
  EXPECT_EQ(Manager().Tenants().at(0).settings.active_thread_percentage, 20u);
  EXPECT_EQ(Manager().Tenants().at(0).settings.pinned_memory_limit, 2 * kGiB);
  EXPECT_EQ(host_.CountCommands("set_active_thread_percentage 777 20"), 1);
  EXPECT_EQ(host_.CountCommands("set_device_pinned_mem_limit 777 0 2G"), 1);
  // A later member's environment has them too.
  EXPECT_EQ(
      Tiers().GrantFor(Register(101, "train", {Uuid(0)})).env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
      "20");
  // A shared group's change touches nothing.
  ASSERT_TRUE(registry_.SetGroup("plain", {}, {}).ok());
  Tiers().ApplyLimits("plain");
  EXPECT_EQ(Manager().Tenants().size(), 1u);
}

TEST_F(GroupTiersTest, ASharedGroupNeverTouchesMps) {
  GroupTiers::Grant g = Tiers().GrantFor(Register(100, "plain", {Uuid(0)}));
  EXPECT_EQ(g.tier, Tier::kShared);
  EXPECT_EQ(g.reason, "");
  EXPECT_TRUE(Manager().Tenants().empty());
  EXPECT_EQ(host_.starts, 0);
}

TEST_F(GroupTiersTest, ReconcileReleasesGroupsWithoutMembersAndKeepsTheOthers) {
  MpsGroup("idle", {});
  MpsGroup("busy", {});
  ASSERT_TRUE(Manager().Acquire({.tenant = "idle", .gpus = "0", .settings = {}}).ok());
  ASSERT_TRUE(Manager().Acquire({.tenant = "busy", .gpus = "0", .settings = {}}).ok());
  ASSERT_TRUE(Manager().Acquire({.tenant = "manual", .gpus = "1", .settings = {}}).ok());
  Register(100, "busy", {Uuid(0)});
  Tiers().Reconcile();
  std::vector<std::string> names;
  for (const auto& t : Manager().Tenants()) names.push_back(t.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("busy", "manual"));
  ASSERT_TRUE(Tiers().GroupState("busy").has_value());
  EXPECT_EQ(Tiers().GroupState("busy")->tier, Tier::kMps);
  EXPECT_EQ(Tiers().Current(*registry_.TenantOf(100)).tier, Tier::kMps);
}

// Each group's turn is its own: while group "slow"'s limit change is stuck
// in its GPU 0 daemon (the fake control tool blocks until the test lets it
// go), a registration in group "fast" on GPU 1 gets MPS within a deadline.
// With one lock for every group it would wait for GPU 0.
TEST_F(GroupTiersTest, AGroupStuckOnAHungGpuNeverBlocksAGroupOnAnother) {
  MpsGroup("slow", {.memory_bytes = std::nullopt, .compute_percent = 30});
  MpsGroup("fast", {.memory_bytes = std::nullopt, .compute_percent = 40});
  ASSERT_EQ(Tiers().GrantFor(Register(100, "slow", {Uuid(0)})).tier, Tier::kMps);
  const pid_t hung = host_.DaemonOf(Pipe(0));
  ASSERT_GT(hung, 0);
  host_.servers[Pipe(0)][2000] = {};  // a server: the limit change goes to it
  host_.Block(hung);
  ASSERT_TRUE(registry_
                  .SetGroup("slow",
                            {{kAllGpus, {.memory_bytes = std::nullopt, .compute_percent = 20}}},
                            Tier::kMps)
                  .ok());
  std::thread change([&] { Tiers().ApplyLimits("slow"); });
  host_.WaitForStuckCalls(1);

  const Tenant member = Register(101, "fast", {Uuid(1)});
  auto fast = std::async(std::launch::async, [&] { return Tiers().GrantFor(member); });
  // A deadline, not a measurement.
  const bool done = fast.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(done) << "group fast waited for group slow's hung GPU";
  EXPECT_EQ(host_.StuckCalls(), 1);
  host_.Unblock(hung);
  change.join();
  EXPECT_EQ(fast.get().tier, Tier::kMps);
}

// The group's compute request is the MPS tenant's static SM partition share
// (docs/mps.md "SM partitions"); a request change follows like a limit.
TEST_F(GroupTiersTest, TheGroupsRequestIsItsSmPartitionShare) {
  MpsGroup("train", {.memory_bytes = std::nullopt, .compute_percent = 50});
  TenantRegistry::GroupChange change;
  ScheduleEntry request;
  request.request_percent = 25;
  change.schedule = ScheduleSettings{{kAllGpus, request}};
  ASSERT_TRUE(registry_.UpdateGroup("train", change).ok());
  ASSERT_EQ(Tiers().GrantFor(Register(100, "train", {Uuid(0)})).tier, Tier::kMps);
  ASSERT_EQ(Manager().Tenants().size(), 1u);
  EXPECT_EQ(Manager().Tenants()[0].settings.sm_partition_percent, 25u);
  EXPECT_EQ(Manager().Tenants()[0].settings.active_thread_percentage, 50u);
  request.request_percent = 40;
  change.schedule = ScheduleSettings{{kAllGpus, request}};
  ASSERT_TRUE(registry_.UpdateGroup("train", change).ok());
  Tiers().ApplyLimits("train");
  EXPECT_EQ(Manager().Tenants()[0].settings.sm_partition_percent, 40u);
}

// docs/mps.md "Tiers": a refused placement names the groups in the way, and
// is counted and published, not only logged.
TEST_F(GroupTiersTest, ARefusedPlacementNamesTheGroupsAndIsCountedAndPublished) {
  MpsGroup("train", {});
  EXPECT_EQ(Tiers().GrantFor(Register(100, "train", {Uuid(0)})).tier, Tier::kMps);
  const Status shared = Tiers().CheckPlacement("web", Tier::kShared, {Uuid(0)});
  EXPECT_EQ(shared.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.message().find("groups train run an MPS server"), std::string::npos)
      << shared.message();
  EXPECT_TRUE(Tiers().CheckPlacement("web", Tier::kShared, {Uuid(1)}).ok());
  Register(101, "web", {Uuid(1)});
  MpsGroup("infer", {});
  const Status mps = Tiers().CheckPlacement("infer", Tier::kMps, {Uuid(0), Uuid(1)});
  EXPECT_EQ(mps.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mps.message().find("groups web run shared tenants"), std::string::npos)
      << mps.message();

  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[0].first, "tier_conflict");
  EXPECT_EQ(events_[0].second["group"], "web");
  EXPECT_EQ(events_[0].second["tier"], "shared");
  EXPECT_EQ(events_[0].second["conflicting_groups"], nlohmann::json::array({"train"}));
  EXPECT_EQ(events_[1].second["group"], "infer");
  EXPECT_EQ(events_[1].second["gpus"], nlohmann::json::array({Uuid(0), Uuid(1)}));
  const std::string metrics = Tiers().FormatMetrics();
  EXPECT_NE(metrics.find("gpuslice_tier_conflicts_total{tier=\"shared\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_tier_conflicts_total{tier=\"mps\"} 1\n"), std::string::npos)
      << metrics;
}

TEST(TierConflictsTest, MpsRefusedWhereOtherGroupsSharedTenantsRun) {
  auto tenant = [](std::string group, Tier tier, std::vector<std::string> devices) {
    Tenant t;
    t.group = std::move(group);
    t.tier = tier;
    t.devices = std::move(devices);
    return t;
  };
  const std::vector<Tenant> live = {
      tenant("b", Tier::kShared, {"GPU-0"}), tenant("a", Tier::kShared, {"GPU-0", "GPU-1"}),
      tenant("c", Tier::kShared, {"GPU-1"}), tenant("self", Tier::kShared, {"GPU-0"}),
      tenant("m", Tier::kMps, {"GPU-0"})};
  EXPECT_EQ(GroupTiers::TierConflicts("self", Tier::kMps, {"GPU-0"}, live, {}),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(GroupTiers::TierConflicts("self", Tier::kMps, {"GPU-2"}, live, {}).empty());
  // Shared next to shared is no conflict.
  EXPECT_TRUE(GroupTiers::TierConflicts("self", Tier::kShared, {"GPU-0"}, live, {}).empty());
}

TEST(TierConflictsTest, SharedRefusedWhereOtherGroupsMpsServerRuns) {
  std::map<std::string, GroupTiers::GroupGrant> mps;
  mps["m1"] = {
      .tier = Tier::kMps, .reason = "", .uuids = {"GPU-0"}, .held = true, .mig = std::nullopt};
  mps["m2"] = {
      .tier = Tier::kMps, .reason = "", .uuids = {"GPU-1"}, .held = true, .mig = std::nullopt};
  mps["self"] = {
      .tier = Tier::kMps, .reason = "", .uuids = {"GPU-0"}, .held = true, .mig = std::nullopt};
  mps["fell"] = {
      .tier = Tier::kShared, .reason = "", .uuids = {}, .held = false, .mig = std::nullopt};
  EXPECT_EQ(GroupTiers::TierConflicts("self", Tier::kShared, {"GPU-0", "GPU-1"}, {}, mps),
            (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(GroupTiers::TierConflicts("x", Tier::kShared, {"GPU-1"}, {}, mps),
            (std::vector<std::string>{"m2"}));
  EXPECT_TRUE(GroupTiers::TierConflicts("x", Tier::kShared, {"GPU-3"}, {}, mps).empty());
}

}  // namespace
}  // namespace gpuslice::daemon

namespace gpuslice::daemon {
namespace {

// Rule 7: a `mig` group's MIG instance, on the fake backend's H100s (GPU 1
// in MIG mode).
class GroupTiersMigTest : public GroupTiersTest {
 protected:
  GroupTiersMigTest() { backend_.EnableMig(1); }
  GroupTiers& MigTiers() {
    if (!mig_tiers_) {
      mig_tiers_ = std::make_unique<GroupTiers>(registry_, Manager(), nullptr, &mig_);
    }
    return *mig_tiers_;
  }
  void MigGroup(const std::string& id, GpuLimit all) {
    ASSERT_TRUE(registry_.SetGroup(id, {{kAllGpus, all}}, Tier::kMig).ok());
  }

  FakeBackend backend_{2};
  MigManager mig_{backend_, nullptr};
  std::unique_ptr<GroupTiers> mig_tiers_;
};

TEST_F(GroupTiersMigTest, AMigGroupsMembersShareOneInstanceThatGoesWithTheLast) {
  MigGroup("train", {.memory_bytes = 20 * kGiB, .compute_percent = std::nullopt});
  const GroupTiers::Grant a =
      MigTiers().GrantFor(Register(100, "train", {"GPU-fake-0", "GPU-fake-1"}));
  ASSERT_TRUE(a.refusal.ok()) << a.refusal.message();
  EXPECT_EQ(a.tier, Tier::kMig);
  ASSERT_TRUE(a.mig);
  EXPECT_EQ(a.mig->gpu_uuid, "GPU-fake-1") << "the GPU in MIG mode";
  EXPECT_EQ(a.mig->instance.profile, "1g.20gb");
  EXPECT_EQ(a.env.at("CUDA_VISIBLE_DEVICES"), a.mig->instance.uuid);

  const GroupTiers::Grant b = MigTiers().GrantFor(Register(101, "train", {"GPU-fake-1"}));
  ASSERT_TRUE(b.mig);
  EXPECT_EQ(b.mig->instance.uuid, a.mig->instance.uuid);
  // A member that does not use the instance's GPU cannot run in it.
  const GroupTiers::Grant c = MigTiers().GrantFor(Register(102, "train", {"GPU-fake-0"}));
  EXPECT_FALSE(c.refusal.ok());
  EXPECT_THAT(c.reason, HasSubstr("GPU-fake-1"));

  for (pid_t pid : {100, 101, 102}) ASSERT_TRUE(registry_.Unregister(pid).ok());
  MigTiers().ReleaseIfUnused("train");
  EXPECT_TRUE(backend_.MigInstances(1)->empty());
  EXPECT_FALSE(MigTiers().GroupState("train"));
}

TEST_F(GroupTiersMigTest, AMigGroupWithoutRoomIsRefusedWithTheReason) {
  MigGroup("train", {.memory_bytes = 20 * kGiB, .compute_percent = std::nullopt});
  const GroupTiers::Grant a = MigTiers().GrantFor(Register(100, "train", {"GPU-fake-0"}));
  EXPECT_EQ(a.tier, Tier::kShared);
  EXPECT_EQ(a.refusal.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.reason, HasSubstr("MIG mode"));
  EXPECT_TRUE(a.env.empty());
  EXPECT_FALSE(MigTiers().GroupState("train"));
}

}  // namespace
}  // namespace gpuslice::daemon
