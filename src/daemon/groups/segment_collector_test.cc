#include "daemon/groups/segment_collector.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "shm/group_segment.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kS = 1'000'000'000;

class SegmentCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-collector-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A segment for `group` whose last member has just left; its last sign of
  // life is returned.
  int64_t Abandoned(const char* group) {
    auto member = GroupSegment::Open(dir_, group, true);
    EXPECT_TRUE(member.ok());
    return member.ok() ? (*member)->LastAliveNs() : 0;
  }

  std::string dir_;
};

TEST_F(SegmentCollectorTest, RemovesIdleGroupsAfterTheGraceAndKeepsAttachedOnes) {
  const int64_t idle_since = Abandoned("idle");
  auto attached = GroupSegment::Open(dir_, "attached", true);
  ASSERT_TRUE(attached.ok());
  SimulatedClock clock(idle_since + 599 * kS);
  SegmentCollector collector(dir_, 600 * kS, 10 * kS, clock);

  SegmentCollector::Sweep first = collector.MaybeSweep();
  EXPECT_TRUE(first.removed.empty());
  EXPECT_TRUE(first.errors.empty());

  clock.Advance(5 * kS);  // past the grace, but within the sweep period
  EXPECT_TRUE(collector.MaybeSweep().removed.empty());
  EXPECT_EQ(GroupSegment::ListGroups(dir_), (std::vector<std::string>{"attached", "idle"}));

  clock.Advance(5 * kS);
  EXPECT_EQ(collector.MaybeSweep().removed, std::vector<std::string>{"idle"});
  EXPECT_EQ(GroupSegment::ListGroups(dir_), std::vector<std::string>{"attached"});

  clock.Advance(3600 * kS);
  EXPECT_TRUE(collector.SweepNow().removed.empty());  // still attached
}

TEST_F(SegmentCollectorTest, CollectsInClaimDirectoriesToo) {
  ASSERT_TRUE(MakeClaimSegmentDir(dir_, "claim-a").ok());
  const std::string claim = ClaimSegmentDir(dir_, "claim-a");
  int64_t idle_since = 0;
  {
    auto member = GroupSegment::Open(claim, "claim-a", true);
    ASSERT_TRUE(member.ok());
    idle_since = (*member)->LastAliveNs();
  }
  SimulatedClock clock(idle_since + 601 * kS);
  SegmentCollector collector(dir_, 600 * kS, 10 * kS, clock);
  EXPECT_EQ(collector.SweepNow().removed, std::vector<std::string>{"claim-a"});
  EXPECT_TRUE(GroupSegment::ListGroups(claim).empty());
}

TEST_F(SegmentCollectorTest, AMissingDirectoryIsNothingToCollect) {
  SimulatedClock clock(0);
  SegmentCollector collector(dir_ + "/absent", 0, 0, clock);
  SegmentCollector::Sweep sweep = collector.SweepNow();
  EXPECT_TRUE(sweep.removed.empty());
  EXPECT_TRUE(sweep.errors.empty());
}

}  // namespace
}  // namespace gpuslice::daemon
