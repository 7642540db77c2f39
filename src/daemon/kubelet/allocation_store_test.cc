#include "daemon/kubelet/allocation_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpuslice::daemon::kubelet {
namespace {

constexpr char kClaim[] = "0f3c2a1e-7b4d-4c55-9a8e-1d2b3c4d5e6f";
constexpr char kGpu0[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr uint64_t kGiB = 1ull << 30;

// Records what the store asks of the registry; can be made to fail.
class FakeSink : public GroupLimitSink {
 public:
  Status SetLimits(const std::string& group, const Limits& limits) override {
    ++set_calls;
    if (fail) return Unavailable("fake sink failing");
    groups[group] = limits;
    return Status::Ok();
  }
  Status ClearLimits(const std::string& group) override {
    ++clear_calls;
    if (fail) return Unavailable("fake sink failing");
    groups.erase(group);
    return Status::Ok();
  }
  Status SetSettings(const std::string& group, const TenantRegistry::GroupChange& change) override {
    if (change.tier) tiers[group] = *change.tier;
    return GroupLimitSink::SetSettings(group, change);
  }
  std::map<std::string, Limits> groups;
  std::map<std::string, Tier> tiers;  // set through SetSettings
  int set_calls = 0;
  int clear_calls = 0;
  bool fail = false;
};

class AllocationStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/alloc-store." + std::to_string(getpid()) + "." +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    state_ = std::move(StateStore::Open(dir_).value());
    store_ = std::make_unique<AllocationStore>(state_.get(), sink_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static Allocation Claim(const std::string& pod = "pod-a") {
    Allocation a;
    a.claim_uid = kClaim;
    a.claim_namespace = "default";
    a.claim_name = "slice";
    a.pod_uids = {pod};
    a.devices = {DeviceShare{.uuid = kGpu0,
                             .pool = "node-1",
                             .device = "gpu-0",
                             .request = "gpu",
                             .memory_bytes = 4 * kGiB,
                             .cores_percent = 30}};
    a.source = "dra";
    return a;
  }

  std::string dir_;
  std::unique_ptr<StateStore> state_;
  FakeSink sink_;
  std::unique_ptr<AllocationStore> store_;
};

TEST_F(AllocationStoreTest, PrepareSetsTheGroupsLimits) {
  auto a = store_->Prepare(Claim());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(sink_.groups.count(kClaim), 1u);
  const GpuLimit limit = LimitOn(sink_.groups[kClaim], kGpu0);
  EXPECT_EQ(limit.memory_bytes, 4 * kGiB);
  EXPECT_EQ(limit.compute_percent, 30u);
  EXPECT_EQ(LimitOn(sink_.groups[kClaim], "GPU-other").memory_bytes, std::nullopt);
}

TEST_F(AllocationStoreTest, PreparingTwiceIsOneAllocation) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  auto again = store_->Prepare(Claim());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Claim());
  EXPECT_EQ(store_->All().size(), 1u);
  EXPECT_EQ(sink_.set_calls, 1);  // a retry touches nothing
}

TEST_F(AllocationStoreTest, ASecondPodSharesTheClaimAndReleasesCountDown) {
  ASSERT_TRUE(store_->Prepare(Claim("pod-a")).ok());
  ASSERT_TRUE(store_->Prepare(Claim("pod-b")).ok());
  EXPECT_EQ(store_->Get(kClaim)->pod_uids, (std::vector<std::string>{"pod-a", "pod-b"}));
  auto gone = store_->Release(kClaim, "pod-a");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(*gone);
  EXPECT_EQ(sink_.groups.count(kClaim), 1u);
  gone = store_->Release(kClaim, "pod-b");
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(*gone);
  EXPECT_FALSE(store_->Get(kClaim));
  EXPECT_EQ(sink_.groups.count(kClaim), 0u);
}

TEST_F(AllocationStoreTest, OtherDevicesForARecordedClaimAreRefused) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  Allocation bigger = Claim();
  bigger.devices[0].memory_bytes = 8 * kGiB;
  auto r = store_->Prepare(bigger);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(LimitOn(sink_.groups[kClaim], kGpu0).memory_bytes, 4 * kGiB);
}

TEST_F(AllocationStoreTest, UnprepareClearsAndIsIdempotent) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  ASSERT_TRUE(store_->Unprepare(kClaim).ok());
  EXPECT_EQ(sink_.groups.count(kClaim), 0u);
  EXPECT_TRUE(store_->All().empty());
  EXPECT_TRUE(store_->Unprepare(kClaim).ok());
  EXPECT_TRUE(store_->Unprepare("never-prepared").ok());
  EXPECT_EQ(sink_.clear_calls, 1);
}

TEST_F(AllocationStoreTest, ARestartKeepsAllocationsAndSetsTheirLimitsAgain) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  FakeSink fresh;  // the new daemon's registry knows nothing yet
  AllocationStore restarted(state_.get(), fresh);
  ASSERT_TRUE(restarted.Restore().ok());
  ASSERT_EQ(restarted.All().size(), 1u);
  EXPECT_EQ(restarted.All()[0], Claim());
  EXPECT_EQ(LimitOn(fresh.groups[kClaim], kGpu0).memory_bytes, 4 * kGiB);
  // The kubelet's retry after the restart prepares nothing twice.
  ASSERT_TRUE(restarted.Prepare(Claim()).ok());
  EXPECT_EQ(fresh.set_calls, 1);
  // And an unprepare after the restart is saved: the next start has nothing.
  ASSERT_TRUE(restarted.Unprepare(kClaim).ok());
  FakeSink third;
  AllocationStore again(state_.get(), third);
  ASSERT_TRUE(again.Restore().ok());
  EXPECT_TRUE(again.All().empty());
  EXPECT_TRUE(third.groups.empty());
}

// A claim asking for MPS (ClaimInfo::tier): its group is set on the mps tier
// with its limits, and again so after a restart.
TEST_F(AllocationStoreTest, AnMpsClaimsGroupIsOnTheMpsTierAcrossARestart) {
  Allocation a = Claim();
  a.tier = Tier::kMps;
  ASSERT_TRUE(store_->Prepare(a).ok());
  EXPECT_EQ(sink_.tiers[kClaim], Tier::kMps);
  EXPECT_EQ(LimitOn(sink_.groups[kClaim], kGpu0).memory_bytes, 4 * kGiB);
  FakeSink fresh;
  AllocationStore restarted(state_.get(), fresh);
  ASSERT_TRUE(restarted.Restore().ok());
  ASSERT_EQ(restarted.All().size(), 1u);
  EXPECT_EQ(restarted.All()[0], a);
  EXPECT_EQ(fresh.tiers[kClaim], Tier::kMps);
  // A plain claim stays without a tier of its own.
  ASSERT_TRUE(store_->Unprepare(kClaim).ok());
  FakeSink plain;
  AllocationStore other(state_.get(), plain);
  ASSERT_TRUE(other.Prepare(Claim()).ok());
  EXPECT_TRUE(plain.tiers.empty());
}

TEST_F(AllocationStoreTest, NoCheckpointNoAllocation) {
  // A state directory that cannot be written: the Prepare fails and leaves
  // neither the record nor the limits behind.
  std::filesystem::remove_all(dir_);
  ASSERT_EQ(symlink("/proc/self/nonexistent-dir", dir_.c_str()), 0);
  auto r = store_->Prepare(Claim());
  std::filesystem::remove(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(store_->All().empty());
  EXPECT_EQ(sink_.groups.count(kClaim), 0u);
}

// The record as a restarted daemon would find it.
std::vector<Allocation> OnDisk(StateStore* state) {
  FakeSink sink;
  AllocationStore restarted(state, sink);
  EXPECT_TRUE(restarted.Restore().ok());
  return restarted.All();
}

TEST_F(AllocationStoreTest, ARemovalThatCannotBeSavedStandsIsCountedAndIsSavedByTheRetry) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  // The state directory vanishes (renamed away): every save fails.
  const std::string away = dir_ + ".away";
  std::filesystem::remove_all(away);
  std::filesystem::rename(dir_, away);
  Status s = store_->Unprepare(kClaim);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  // No pod uses the claim: the removal stands, limits cleared.
  EXPECT_TRUE(store_->All().empty());
  EXPECT_EQ(sink_.groups.count(kClaim), 0u);
  // Counted and shown stale (gpuslice_state_save_failures_total, _record_stale).
  EXPECT_TRUE(state_->Stale(kAllocationRecordName));
  EXPECT_EQ(state_->SaveFailures(kAllocationRecordName), 1u);
  // Retried while the directory is still gone: fails again, counted again.
  EXPECT_FALSE(store_->RetryCheckpoint().ok());
  EXPECT_EQ(state_->SaveFailures(kAllocationRecordName), 2u);

  std::filesystem::rename(away, dir_);
  // The record is behind: a crash now would bring the claim back (and the
  // kubelet, never told OK, would unprepare it again).
  ASSERT_EQ(OnDisk(state_.get()).size(), 1u);
  ASSERT_TRUE(store_->RetryCheckpoint().ok());
  EXPECT_FALSE(state_->Stale(kAllocationRecordName));
  EXPECT_TRUE(OnDisk(state_.get()).empty());
  // Nothing owed: the retry saves nothing more.
  const int sets = sink_.set_calls;
  EXPECT_TRUE(store_->RetryCheckpoint().ok());
  EXPECT_EQ(sink_.set_calls, sets);
  EXPECT_EQ(sink_.clear_calls, 1);
}

TEST_F(AllocationStoreTest, TheKubeletsRetryOfAnUnsavedRemovalSavesItAndAnswersOk) {
  ASSERT_TRUE(store_->Prepare(Claim()).ok());
  const std::string away = dir_ + ".away";
  std::filesystem::remove_all(away);
  std::filesystem::rename(dir_, away);
  EXPECT_FALSE(store_->Unprepare(kClaim).ok());
  EXPECT_FALSE(store_->Unprepare(kClaim).ok());           // still not saved: still not OK
  EXPECT_TRUE(store_->Unprepare("never-prepared").ok());  // nothing of it to save
  std::filesystem::rename(away, dir_);
  EXPECT_TRUE(store_->Unprepare(kClaim).ok());
  EXPECT_FALSE(state_->Stale(kAllocationRecordName));
  EXPECT_TRUE(OnDisk(state_.get()).empty());
  EXPECT_EQ(sink_.clear_calls, 1);  // cleared once, when removed
}

TEST_F(AllocationStoreTest, APrepareThatCannotBeSavedIsRefusedAndTheRetryClearsTheStaleRecord) {
  const std::string away = dir_ + ".away";
  std::filesystem::remove_all(away);
  std::filesystem::rename(dir_, away);
  EXPECT_EQ(store_->Prepare(Claim()).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(store_->All().empty());  // not promised: nothing changed
  EXPECT_EQ(sink_.groups.count(kClaim), 0u);
  EXPECT_TRUE(state_->Stale(kAllocationRecordName));
  std::filesystem::rename(away, dir_);
  ASSERT_TRUE(store_->RetryCheckpoint().ok());
  EXPECT_FALSE(state_->Stale(kAllocationRecordName));
  EXPECT_TRUE(OnDisk(state_.get()).empty());
}

TEST_F(AllocationStoreTest, ALimitTheRegistryRefusesRecordsNothing) {
  sink_.fail = true;
  EXPECT_FALSE(store_->Prepare(Claim()).ok());
  EXPECT_TRUE(store_->All().empty());
}

TEST_F(AllocationStoreTest, BadClaimsAreRefused) {
  Allocation a = Claim();
  a.claim_uid = "bad/uid";
  EXPECT_EQ(store_->Prepare(a).status().code(), StatusCode::kInvalidArgument);
  a = Claim();
  a.devices.clear();
  EXPECT_EQ(store_->Prepare(a).status().code(), StatusCode::kInvalidArgument);
  a = Claim();
  a.devices[0].cores_percent = 101;
  EXPECT_EQ(store_->Prepare(a).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink_.groups.empty());
}

TEST(AllocationLimits, SharesOfOneGpuAddUp) {
  Allocation a;
  a.devices = {DeviceShare{.uuid = kGpu0,
                           .pool = "",
                           .device = "",
                           .request = "",
                           .memory_bytes = kGiB,
                           .cores_percent = 60},
               DeviceShare{.uuid = kGpu0,
                           .pool = "",
                           .device = "",
                           .request = "",
                           .memory_bytes = kGiB,
                           .cores_percent = 60}};
  const GpuLimit l = LimitOn(LimitsOf(a), kGpu0);
  EXPECT_EQ(l.memory_bytes, 2 * kGiB);
  EXPECT_EQ(l.compute_percent, 100u);
}

// The registry adapter: limits land in the TenantRegistry as PUT /v1/groups
// would set them, and clearing forgets the memberless group.
class NoWatcher : public LivenessWatcher {
 public:
  Status Watch(pid_t, uint64_t) override { return Status::Ok(); }
  void Unwatch(pid_t) override {}
};

TEST(RegistryLimitSink, SetsAndClearsTheGroup) {
  SimulatedClock clock;
  NoWatcher watcher;
  TenantRegistry registry({}, clock, watcher, nullptr, nullptr);
  RegistryLimitSink sink(registry);
  Limits limits;
  limits[kGpu0] = GpuLimit{.memory_bytes = 4 * kGiB, .compute_percent = 30};
  ASSERT_TRUE(sink.SetLimits(kClaim, limits).ok());
  auto group = registry.GroupOf(kClaim);
  ASSERT_TRUE(group);
  EXPECT_EQ(LimitOn(group->limits, kGpu0).memory_bytes, 4 * kGiB);
  EXPECT_EQ(LimitOn(group->limits, kGpu0).compute_percent, 30u);
  ASSERT_TRUE(sink.ClearLimits(kClaim).ok());
  EXPECT_FALSE(registry.GroupOf(kClaim));
  EXPECT_TRUE(sink.ClearLimits(kClaim).ok());
}

// The kubelet unprepares a claim within the second before the daemon's
// liveness watcher sees its last tenant exit: the group loses its limits at
// once and goes when the watcher reports the exit (it used to stay, without
// limits, until an admin deleted it).
TEST(RegistryLimitSink, AClaimsGroupGoesWithItsLastTenantAfterUnprepare) {
  SimulatedClock clock;
  NoWatcher watcher;
  TenantRegistry registry({}, clock, watcher, nullptr, nullptr);
  RegistryLimitSink sink(registry);
  Limits limits;
  limits[kGpu0] = GpuLimit{.memory_bytes = 4 * kGiB, .compute_percent = 30};
  ASSERT_TRUE(sink.SetLimits(kClaim, limits).ok());
  Registration r;
  r.pid = getpid();  // alive, as a tenant whose exit is not seen yet
  r.group = kClaim;
  r.devices = {kGpu0};
  ASSERT_TRUE(registry.Register(r).ok());
  ASSERT_TRUE(sink.ClearLimits(kClaim).ok());
  auto group = registry.GroupOf(kClaim);
  ASSERT_TRUE(group);
  EXPECT_TRUE(group->limits.empty());
  registry.OnExited({getpid()});
  EXPECT_FALSE(registry.GroupOf(kClaim)) << "the group outlived its claim";
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
