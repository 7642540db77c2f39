#include "daemon/groups/group_controllers.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace gpuslice::daemon {
namespace {

constexpr pid_t kDaemonPid = 4242;  // not this process: claims are told apart from members'
constexpr int64_t kMs = 1'000'000;

class NoSamples final : public control::UtilizationSource {
 public:
  StatusOr<std::vector<control::UtilizationSample>> SamplesSince(std::string_view,
                                                                 uint64_t) override {
    return std::vector<control::UtilizationSample>{};
  }
};

class GroupControllersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-groupctl-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> Member(const char* group) {
    auto seg = GroupSegment::Open(dir_, group, true);
    EXPECT_TRUE(seg.ok());
    return seg.ok() ? std::move(seg).value() : nullptr;
  }
  std::unique_ptr<GroupControllers> Controllers() {
    return std::make_unique<GroupControllers>(
        GroupControllers::Options{.shm_dir = dir_, .self = kDaemonPid, .rescan_ns = 0}, source_,
        nullptr, limits_of_, GroupControllers::Clocks{clock_, clock_});
  }

  std::string dir_;
  NoSamples source_;
  GroupControllers::LimitsOf limits_of_;
  SimulatedClock clock_{MonotonicNs() + 1000 * kMs};  // the segments' time base, after creation
};

TEST_F(GroupControllersTest, ClaimsAGroupAndControlsItOnceTheMemberYields) {
  auto member = Member("g");
  ASSERT_TRUE(member->TryBecomeController());  // a member keeps it, as before the daemon came
  auto controllers = Controllers();

  controllers->Tick();
  EXPECT_TRUE(member->DaemonClaims(clock_.NowNs()));
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  EXPECT_FALSE(controllers->Snapshot()[0].controlling);  // the member still holds the role

  member->ResignController();  // what a member's keeper does when it sees the claim
  clock_.Advance(50 * kMs);
  controllers->Tick();
  EXPECT_TRUE(controllers->Snapshot()[0].controlling);
  EXPECT_FALSE(member->TryBecomeController());
  EXPECT_EQ(member->LastAliveNs(), clock_.NowNs());  // the daemon's keeper beats
}

TEST_F(GroupControllersTest, LeavesIdleGroupsAloneAndReleasesGroupsThatGoIdle) {
  { auto gone = Member("idle"); }
  auto member = Member("busy");
  auto controllers = Controllers();
  controllers->Tick();
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  EXPECT_EQ(controllers->Snapshot()[0].group, "busy");

  member.reset();  // its last process detaches
  clock_.Advance(50 * kMs);
  controllers->Tick();
  EXPECT_TRUE(controllers->Snapshot().empty());
  auto observer = GroupSegment::Open(dir_, "busy", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_FALSE((*observer)->DaemonClaims(clock_.NowNs()));  // nothing keeps it looking alive
}

TEST_F(GroupControllersTest, HoldsAGroupToTheDaemonsLimitsAndSetsBackAMembersChange) {
  constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";
  limits_of_ = [&](const std::string& group,
                   const std::string& uuid) -> std::optional<GroupControllers::DeviceLimit> {
    if (group != "ruled" || uuid != kUuid) return std::nullopt;
    return GroupControllers::DeviceLimit{.memory_bytes = 1u << 30, .compute_percent = {}};
  };
  auto ruled = Member("ruled");
  auto free = Member("free");
  ASSERT_TRUE(ruled->AttachDevice(kUuid).ok());
  ASSERT_TRUE(free->AttachDevice(kUuid).ok());
  free->SetMemoryLimit(0, 3ull << 30);
  ruled->SetComputeLimit(0, 40);  // a member's own word, where the daemon has none
  auto controllers = Controllers();
  controllers->Tick();
  EXPECT_EQ(ruled->MemoryLimit(0), 1u << 30);
  EXPECT_EQ(ruled->ComputeLimit(0), 40u);
  EXPECT_EQ(free->MemoryLimit(0), 3ull << 30);  // no word on it: its own limits stand

  ruled->SetMemoryLimit(0, kUnlimitedBytes);  // a member raises its group's limit
  clock_.Advance(1000 * kMs);
  controllers->Tick();
  EXPECT_EQ(ruled->MemoryLimit(0), 1u << 30);
}

TEST_F(GroupControllersTest, StopHandsEveryGroupBackAtOnce) {
  auto member = Member("g");
  auto controllers = Controllers();
  controllers->Tick();
  ASSERT_TRUE(controllers->Snapshot()[0].controlling);
  controllers->Stop();
  EXPECT_FALSE(member->DaemonClaims(clock_.NowNs()));
  EXPECT_TRUE(member->TryBecomeController());
}

TEST_F(GroupControllersTest, AClaimGoesStaleWhenTheDaemonStopsBeating) {
  auto member = Member("g");
  auto controllers = Controllers();
  controllers->Tick();
  EXPECT_TRUE(member->DaemonClaims(clock_.NowNs() + kDaemonStaleNs - 1));
  EXPECT_FALSE(member->DaemonClaims(clock_.NowNs() + kDaemonStaleNs));
}

}  // namespace
}  // namespace gpuslice::daemon
