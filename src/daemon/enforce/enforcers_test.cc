#include "daemon/enforce/enforcers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "daemon/gpu/fake_backend.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr const char* kRoot = "/sys/fs/cgroup";
constexpr const char* kCgroupA = "/sys/fs/cgroup/tenants/a";

class EnforcersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = proc_.root() + "-state";
    std::filesystem::remove_all(state_dir_);
    store_ = std::move(StateStore::Open(state_dir_).value());
    registry_ = std::make_unique<TenantRegistry>(TenantRegistry::Options{proc_.root()}, clock_,
                                                 watcher_, nullptr, nullptr);
    proc_.Add(100, "100", 0, 11, "0::/tenants/a\n");
    proc_.Add(101, "101", 0, 12, "0::/tenants/a\n");
    proc_.Add(200, "200", 0, 21, "0::/\n");
    Driver("615.10");
  }
  void TearDown() override { std::filesystem::remove_all(state_dir_); }

  // Both GPUs run `version`; r615 and later have the memory limits API.
  void Driver(const std::string& version) {
    for (uint32_t i = 0; i < 2; ++i) {
      backend_.Mutate(i, [&](GpuInfo& g) {
        g.features.driver_version = version;
        g.features.memory_limits_api = version >= "615";
        g.features.cgroup_v2 = true;
      });
    }
  }
  std::shared_ptr<const Snapshot> Gpus() {
    auto s = std::make_shared<Snapshot>();
    for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) s->gpus.push_back(*backend_.Read(i));
    return s;
  }
  std::unique_ptr<Enforcers> Make() {
    return std::make_unique<Enforcers>(
        Enforcers::Options{.cgroup_root = kRoot}, backend_, *registry_,
        Enforcers::Sources{
            .gpus = [this] { return Gpus(); },
            .mps_granted = [this](const std::string& g,
                                  const std::string&) { return mps_groups_.contains(g); },
            .mps_partition_sms =
                [this](const std::string& g, const std::string&) {
                  auto it = partitions_.find(g);
                  return it == partitions_.end() ? 0u : it->second;
                },
            .mig_profile =
                [this](const std::string& g, const std::string&) {
                  return mig_groups_.contains(g) ? "1g.10gb" : "";
                }},
        store_.get());
  }
  void Register(pid_t pid, const std::string& group) {
    Registration r;
    r.pid = pid;
    r.uid = 0;
    r.group = group;
    r.devices = {"GPU-fake-0"};
    ASSERT_TRUE(registry_->Register(r).ok());
  }
  void Limit(const std::string& group, uint64_t memory, uint64_t request = 0) {
    TenantRegistry::GroupChange change;
    change.limits = Limits{{kAllGpus, GpuLimit{.memory_bytes = memory, .compute_percent = 50}}};
    if (request > 0) {
      ScheduleEntry entry;
      entry.memory_request_bytes = request;
      change.schedule = ScheduleSettings{{kAllGpus, entry}};
    }
    ASSERT_TRUE(registry_->UpdateGroup(group, change).ok());
  }

  FakeProc proc_;
  SimulatedClock clock_{1'000};
  FakeWatcher watcher_;
  FakeBackend backend_{2};
  std::string state_dir_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<TenantRegistry> registry_;
  std::set<std::string> mps_groups_;
  std::set<std::string> mig_groups_;            // in a 1g.10gb
  std::map<std::string, uint32_t> partitions_;  // SMs of a group's MPS v3 partition
};

TEST_F(EnforcersTest, TheDriverHoldsAGroupsMemoryFromItsFirstMemberUntilItsLast) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB, kGiB);
  Register(100, "train");
  Register(101, "train");
  enforcers->Reconcile();
  auto limits = backend_.MemoryLimits(0);
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits[kCgroupA], (FakeBackend::MemoryLimit{kGiB, 2 * kGiB}));
  EXPECT_TRUE(backend_.MemoryLimits(1).empty()) << "no member uses GPU 1";
  auto c = enforcers->ChoiceOf("train", "GPU-fake-0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->memory.enforcer, Enforcer::kDriver);
  EXPECT_EQ(c->compute.enforcer, Enforcer::kLimiter);
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-1")->memory.enforcer, Enforcer::kLimiter);
  // Nothing changed: nothing set again.
  const int calls = backend_.memory_limit_calls();
  enforcers->Reconcile();
  EXPECT_EQ(backend_.memory_limit_calls(), calls);

  // A limit change goes to the driver.
  Limit("train", 3 * kGiB);
  enforcers->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0)[kCgroupA], (FakeBackend::MemoryLimit{kGiB, 3 * kGiB}));

  // One member leaving keeps it; the last clears it.
  registry_->OnExited({100});
  enforcers->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0).size(), 1u);
  registry_->OnExited({101});
  enforcers->Reconcile();
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->memory.enforcer, Enforcer::kLimiter);
}

// A sample's view (taken before a registration) reconciled after the
// registration's own Reconcile must not clear the limit that one set; the
// view of the same instant again is reconciled as usual.
TEST_F(EnforcersTest, AViewOlderThanOneReconciledIsLeftAlone) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  const RegistryView before = registry_->TakeView();  // "train" without members
  Register(100, "train");
  const RegistryView after = registry_->TakeView();
  enforcers->Reconcile(after);
  ASSERT_EQ(backend_.MemoryLimits(0).size(), 1u);
  enforcers->Reconcile(before);
  EXPECT_EQ(backend_.MemoryLimits(0).size(), 1u) << "the older view undid the newer";
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->memory.enforcer, Enforcer::kDriver);
  // The decision is the view's, not the registry's now: the member has left
  // the registry, the view still has it.
  registry_->OnExited({100});
  enforcers->Reconcile(after);
  EXPECT_EQ(backend_.MemoryLimits(0).size(), 1u);
  enforcers->Reconcile();  // the registry now: no member, the limit goes
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
}

TEST_F(EnforcersTest, AnOldDriverLeavesMemoryToTheLimiter) {
  Driver("580.65.06");
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  enforcers->Reconcile();
  EXPECT_EQ(backend_.memory_limit_calls(), 0);
  auto c = enforcers->ChoiceOf("train", "GPU-fake-0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->memory.enforcer, Enforcer::kLimiter);
  EXPECT_NE(c->memory.reason.find("580.65.06"), std::string::npos) << c->memory.reason;
}

TEST_F(EnforcersTest, ADriverRefusalFallsBackToTheLimiterAndIsCounted) {
  auto enforcers = Make();
  backend_.FailMemoryLimits(0, {StatusCode::kPermissionDenied, "not root"});
  Limit("train", 2 * kGiB);
  Register(100, "train");
  enforcers->Reconcile();
  auto c = enforcers->ChoiceOf("train", "GPU-fake-0");
  EXPECT_EQ(c->memory.enforcer, Enforcer::kLimiter);
  EXPECT_NE(c->memory.reason.find("not root"), std::string::npos) << c->memory.reason;
  EXPECT_EQ(enforcers->driver_failures(), 1u);
  const std::string metrics = enforcers->FormatMetrics({{"GPU-fake-0", 0}});
  EXPECT_NE(metrics.find("gpuslice_driver_limit_failures_total 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("gpuslice_group_enforcer{group=\"train\",gpu=\"0\",dimension=\"memory\","
                         "enforcer=\"limiter\",reason=\"driver_refused\"} 1\n"),
            std::string::npos)
      << metrics;
  // The driver accepts it later: the next Reconcile sets it.
  backend_.FailMemoryLimits(0, Status::Ok());
  enforcers->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0).size(), 1u);
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->memory.enforcer, Enforcer::kDriver);
}

TEST_F(EnforcersTest, GroupsSharingACgroupOrInTheRootOneAreLeftToTheLimiter) {
  auto enforcers = Make();
  Limit("a", 2 * kGiB);
  Limit("b", 2 * kGiB);
  Limit("root", 2 * kGiB);
  Register(100, "a");
  Register(101, "b");
  Register(200, "root");
  enforcers->Reconcile();
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
  EXPECT_NE(enforcers->ChoiceOf("a", "GPU-fake-0")->memory.reason.find("several groups"),
            std::string::npos);
  EXPECT_EQ(enforcers->ChoiceOf("a", "GPU-fake-0")->memory.code, "cgroup_shared_by_groups");
  EXPECT_NE(enforcers->ChoiceOf("root", "GPU-fake-0")->memory.reason.find("root cgroup"),
            std::string::npos);
}

TEST_F(EnforcersTest, MpsGroupsComputeIsMps) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  mps_groups_.insert("train");
  enforcers->Reconcile();
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->compute.enforcer, Enforcer::kMps);
  // An MPS v3 partition, once there, is named at the next Reconcile.
  backend_.Mutate(0, [](GpuInfo& g) { g.features.mps_protocol = 3; });
  partitions_["train"] = 32;
  enforcers->Reconcile();
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->compute.code, "mps_v3_sm_partition");
}

TEST_F(EnforcersTest, AMigGroupIsHeldByItsInstanceAndGetsNoDriverLimit) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  mig_groups_.insert("train");
  enforcers->Reconcile();
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->memory.enforcer, Enforcer::kMig);
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->compute.enforcer, Enforcer::kMig);
  EXPECT_EQ(backend_.memory_limit_calls(), 0);
}

TEST_F(EnforcersTest, ARestartedDaemonClearsTheLimitsOfGroupsThatLeftMeanwhile) {
  {
    auto enforcers = Make();
    Limit("train", 2 * kGiB);
    Register(100, "train");
    enforcers->Reconcile();
    ASSERT_EQ(backend_.MemoryLimits(0).size(), 1u);
  }
  ASSERT_TRUE(registry_->Unregister(100).ok());
  auto restarted = Make();
  restarted->Reconcile();
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
  auto again = Make();  // and the record says so
  const int calls = backend_.memory_limit_calls();
  again->Reconcile();
  EXPECT_EQ(backend_.memory_limit_calls(), calls);
}

TEST_F(EnforcersTest, ACleanStopClearsEveryLimitAndNoLaterReconcileSetsOne) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB, kGiB);
  Register(100, "train");
  enforcers->Reconcile();
  ASSERT_EQ(backend_.MemoryLimits(0).size(), 1u);
  ASSERT_TRUE(enforcers->ClearAll().ok());
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
  EXPECT_FALSE(enforcers->ChoiceOf("train", "GPU-fake-0"));
  // A registry event racing the stop (a member joining) sets nothing again.
  Register(101, "train");
  enforcers->Reconcile();
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
  // The record is empty: a restart has nothing to clear, and sets the
  // limits of the groups still there.
  auto restarted = Make();
  restarted->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0)[kCgroupA], (FakeBackend::MemoryLimit{kGiB, 2 * kGiB}));
}

TEST_F(EnforcersTest, ALimitTheStopCouldNotClearIsClearedByTheNextStart) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  enforcers->Reconcile();
  backend_.FailMemoryLimits(0, Unavailable("gpu fell off the bus"));
  EXPECT_EQ(enforcers->ClearAll().code(), StatusCode::kUnavailable);
  EXPECT_EQ(enforcers->driver_failures(), 1u);
  backend_.FailMemoryLimits(0, Status());
  ASSERT_TRUE(registry_->Unregister(100).ok());
  auto restarted = Make();
  restarted->Reconcile();
  EXPECT_TRUE(backend_.MemoryLimits(0).empty());
}

TEST_F(EnforcersTest, AFailedSaveIsCountedAndShown) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  std::filesystem::remove_all(state_dir_);
  enforcers->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0).size(), 1u) << "the limit holds all the same";
  EXPECT_EQ(enforcers->save_failures(), 1u);
  EXPECT_NE(enforcers->FormatMetrics({}).find("gpuslice_driver_limits_save_failures_total 1\n"),
            std::string::npos);
}

// Rule 4: a save that failed is tried again by the next Reconcile, even when
// nothing changed, until it works; the record then holds the limit.
TEST_F(EnforcersTest, AFailedSaveIsRetriedByEveryReconcileUntilItWorks) {
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  std::filesystem::remove_all(state_dir_);  // a vanished (or full) state directory
  enforcers->Reconcile();
  ASSERT_EQ(enforcers->save_failures(), 1u);
  enforcers->Reconcile();  // nothing changed: saved again all the same
  EXPECT_EQ(enforcers->save_failures(), 2u);
  std::filesystem::create_directories(state_dir_);
  enforcers->Reconcile();
  EXPECT_EQ(enforcers->save_failures(), 2u);
  auto record = store_->Load(kDriverLimitsRecordName);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_EQ(record->at("limits").size(), 1u);
  EXPECT_EQ(record->at("limits")[0]["cgroup"], kCgroupA);
  enforcers->Reconcile();  // and not again once saved
  EXPECT_EQ(enforcers->save_failures(), 2u);
}

// Rule 6: a limit moving to another cgroup whose old limit cannot be cleared
// is not set on the new cgroup; the old one stays held and is cleared (then
// the new one set) once the driver takes the clear.
TEST_F(EnforcersTest, AMoveWhoseClearFailsKeepsTheOldLimitHeldUntilItIsCleared) {
  constexpr const char* kCgroupB = "/sys/fs/cgroup/tenants/b";
  proc_.Add(300, "300", 0, 31, "0::/tenants/b\n");
  auto enforcers = Make();
  Limit("train", 2 * kGiB);
  Register(100, "train");
  enforcers->Reconcile();
  ASSERT_EQ(backend_.MemoryLimits(0).count(kCgroupA), 1u);
  // The group's member moves: the old member goes, a new one in cgroup b comes.
  backend_.FailMemoryLimitClears(0, Internal("nvmlDeviceSetMemoryLimits_v1: Unknown Error"));
  registry_->OnExited({100});
  enforcers->Reconcile();
  Register(300, "train");
  enforcers->Reconcile();
  EXPECT_EQ(backend_.MemoryLimits(0).count(kCgroupA), 1u) << "the clear failed";
  EXPECT_EQ(backend_.MemoryLimits(0).count(kCgroupB), 0u) << "not set while a is still held";
  auto c = enforcers->ChoiceOf("train", "GPU-fake-0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->memory.enforcer, Enforcer::kLimiter);
  EXPECT_NE(c->memory.reason.find("whose clear failed"), std::string::npos) << c->memory.reason;
  EXPECT_EQ(c->memory.code, "old_limit_not_cleared");
  EXPECT_GE(enforcers->driver_failures(), 2u);
  // The driver takes clears again: a is cleared, then b set.
  backend_.FailMemoryLimitClears(0, Status::Ok());
  enforcers->Reconcile();
  auto limits = backend_.MemoryLimits(0);
  EXPECT_EQ(limits.count(kCgroupA), 0u);
  ASSERT_EQ(limits.count(kCgroupB), 1u);
  EXPECT_EQ(limits[kCgroupB].hard_bytes, 2 * kGiB);
  EXPECT_EQ(enforcers->ChoiceOf("train", "GPU-fake-0")->memory.enforcer, Enforcer::kDriver);
  // A restart finds b in the record (and nothing of a): nothing to clear.
  auto record = store_->Load(kDriverLimitsRecordName);
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->at("limits").size(), 1u);
  EXPECT_EQ(record->at("limits")[0]["cgroup"], kCgroupB);
}

}  // namespace
}  // namespace gpuslice::daemon
