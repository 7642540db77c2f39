#include "control/group_keeper.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "control/compute_controller.h"

namespace gpuslice::control {
namespace {

constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr int64_t kMs = 1'000'000;
constexpr uint64_t kMiB = 1 << 20;

class NoSamples final : public UtilizationSource {
 public:
  StatusOr<std::vector<UtilizationSample>> SamplesSince(std::string_view, uint64_t) override {
    return std::vector<UtilizationSample>{};
  }
};

class GroupKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-keeper-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    segment_ = Open();
    ASSERT_NE(segment_, nullptr);
    ASSERT_EQ(*segment_->AttachDevice(kUuid), 0);
    compute_ = std::make_unique<ComputeController>(
        *segment_, source_, [] { return std::vector<int32_t>{}; },
        ComputeController::Clocks{clock_, clock_});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> Open() {
    auto seg = GroupSegment::Open(dir_, "g", true);
    return seg.ok() ? std::move(seg).value() : nullptr;
  }

  std::string dir_;
  std::unique_ptr<GroupSegment> segment_;
  NoSamples source_;
  SimulatedClock clock_{MonotonicNs() + 1000 * kMs};  // the segment's time base, after its creation
  std::unique_ptr<ComputeController> compute_;
};

TEST_F(GroupKeeperTest, ReclaimsDepartedMembersAndBeatsOncePerPeriod) {
  {
    // A member that holds memory and goes away without leaving (its handle,
    // and with it its slot lock, is gone: as if it had been killed).
    auto member = Open();
    ASSERT_NE(member, nullptr);
    const int slot = *member->Join(4242, 1, "victim");
    ASSERT_TRUE(member->ledger().Reserve(slot, 0, 64 * kMiB));
  }
  ASSERT_EQ(segment_->ledger().MemoryUsed(0), 64 * kMiB);
  GroupKeeper keeper(*segment_, *compute_, clock_);

  EXPECT_EQ(keeper.Step(), 200 * kMs);
  EXPECT_EQ(segment_->ledger().MemoryUsed(0), 0u);
  EXPECT_EQ(segment_->LastAliveNs(), clock_.NowNs());
  const int64_t beat = clock_.NowNs();

  clock_.Advance(120 * kMs);
  EXPECT_EQ(keeper.Step(), 80 * kMs);  // not due yet: no beat
  EXPECT_EQ(segment_->LastAliveNs(), beat);

  clock_.Advance(80 * kMs);
  EXPECT_EQ(keeper.Step(), 200 * kMs);
  EXPECT_EQ(segment_->LastAliveNs(), beat + 200 * kMs);
}

TEST_F(GroupKeeperTest, StepsEveryControllerPeriodWhileADeviceIsLimited) {
  GroupKeeper keeper(*segment_, *compute_, clock_);
  EXPECT_EQ(keeper.Step(), 200 * kMs);
  segment_->SetComputeLimit(0, 25);
  EXPECT_EQ(keeper.Step(), 50 * kMs);
  clock_.Advance(190 * kMs);
  EXPECT_EQ(keeper.Step(), 10 * kMs);  // the next beat comes first
}

TEST_F(GroupKeeperTest, MemberPacesProvisionallyWhileADaemonIsExpected) {
  // A member taking the role while gpusliced is expected (about to adopt the
  // group) paces it just below the whole device, so that its first launches
  // are paced (counted, with a shallow queue) rather than unpaced.
  bool expected = true;
  GroupKeeper keeper(*segment_, *compute_, clock_);
  keeper.set_daemon_expected([&] { return expected; });
  keeper.MemberStep();
  EXPECT_TRUE(segment_->control().is_controller());
  EXPECT_EQ(segment_->schedule().ComputeGrant(0), GroupKeeper::kProvisionalGrantBp);
  EXPECT_LT(segment_->schedule().PacedRateBp(0), kFullGrantBp);
  EXPECT_NE(segment_->schedule().ComputeLimitedMask() & 1u, 0u);  // the launch gate's slow path

  // A grant the daemon wrote is not overwritten.
  segment_->schedule().SetComputeGrant(0, 2500);
  GroupKeeper::GrantProvisionally(*segment_);
  EXPECT_EQ(segment_->schedule().ComputeGrant(0), 2500u);
}

TEST_F(GroupKeeperTest, MemberPacesByItsLimitsAloneWithoutADaemon) {
  segment_->schedule().SetComputeGrant(0, 2500);  // a departed daemon's
  GroupKeeper keeper(*segment_, *compute_, clock_);
  keeper.set_daemon_expected([] { return false; });
  keeper.MemberStep();
  EXPECT_TRUE(segment_->control().is_controller());
  EXPECT_EQ(segment_->schedule().ComputeGrant(0), 0u);
  EXPECT_EQ(segment_->schedule().PacedRateBp(0), kFullGrantBp);
}

}  // namespace
}  // namespace gpuslice::control
