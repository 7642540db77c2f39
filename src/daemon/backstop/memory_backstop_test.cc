#include "daemon/backstop/memory_backstop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace gpuslice::daemon {
namespace {

using Kind = MemoryBackstop::FindingKind;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
const std::string kUuid = "GPU-fake-0";

class MemoryBackstopTest : public ::testing::Test {
 protected:
  MemoryBackstop Make(MemoryBackstop::Action action = MemoryBackstop::Action::kReport) {
    return MemoryBackstop({.action = action},
                          {.group_of = [this](uint32_t pid) -> std::optional<std::string> {
                             auto it = group_of_.find(pid);
                             return it == group_of_.end() ? std::nullopt
                                                          : std::optional(it->second);
                           },
                           .limit_of = [this](const std::string& group,
                                              const std::string&) -> std::optional<uint64_t> {
                             auto it = limits_.find(group);
                             return it == limits_.end() ? std::nullopt : std::optional(it->second);
                           }},
                          [this](pid_t pid) {
                            killed_.push_back(pid);
                            return true;
                          });
  }
  static GpuProcess P(uint32_t pid, uint64_t bytes) { return {pid, bytes}; }

  std::map<uint32_t, std::string> group_of_ = {{100, "a"}, {101, "a"}, {200, "b"}};
  std::map<std::string, uint64_t> limits_ = {{"a", 4 * kGiB}};
  std::vector<pid_t> killed_;
};

TEST_F(MemoryBackstopTest, WithinTheLimitIsQuiet) {
  MemoryBackstop b = Make();
  EXPECT_TRUE(b.Check(0, kUuid, {P(100, 2 * kGiB), P(101, 2 * kGiB), P(200, 70 * kGiB)}).empty());
  // One granule per process of slack: the limiter's count and the driver's may differ by that.
  EXPECT_TRUE(
      b.Check(0, kUuid, {P(100, 2 * kGiB + 2 * kMiB), P(101, 2 * kGiB + 2 * kMiB)}).empty());
}

TEST_F(MemoryBackstopTest, OverTheLimitIsReportedOnceAndBackUnderToo) {
  MemoryBackstop b = Make();
  auto f = b.Check(0, kUuid, {P(100, 3 * kGiB), P(101, 2 * kGiB)});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kOverLimit);
  EXPECT_EQ(f[0].group, "a");
  EXPECT_EQ(f[0].used_bytes, 5 * kGiB);
  EXPECT_EQ(f[0].limit_bytes, 4 * kGiB);
  EXPECT_THAT(f[0].pids, ::testing::UnorderedElementsAre(100u, 101u));
  EXPECT_TRUE(b.Check(0, kUuid, {P(100, 3 * kGiB), P(101, 2 * kGiB)}).empty());  // still over
  EXPECT_EQ(b.over().size(), 1u);
  f = b.Check(0, kUuid, {P(100, 3 * kGiB)});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kBackUnder);
  EXPECT_TRUE(b.over().empty());
  EXPECT_TRUE(killed_.empty()) << "report only: nothing is killed";
}

TEST_F(MemoryBackstopTest, AGroupWhoseProcessesLeftIsBackUnder) {
  MemoryBackstop b = Make();
  ASSERT_EQ(b.Check(0, kUuid, {P(100, 5 * kGiB)}).size(), 1u);
  auto f = b.Check(0, kUuid, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kBackUnder);
  EXPECT_EQ(f[0].group, "a");
}

TEST_F(MemoryBackstopTest, UnregisteredProcessesAreReportedOncePerPid) {
  MemoryBackstop b = Make();
  auto f = b.Check(0, kUuid, {P(999, kGiB)});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kUnregistered);
  EXPECT_THAT(f[0].pids, ::testing::ElementsAre(999u));
  EXPECT_TRUE(b.Check(0, kUuid, {P(999, kGiB)}).empty());
  EXPECT_TRUE(b.Check(0, kUuid, {}).empty());
  EXPECT_EQ(b.Check(0, kUuid, {P(999, kGiB)}).size(), 1u) << "a pid seen again is a new process";
  EXPECT_EQ(b.Check(0, "GPU-fake-1", {P(999, kGiB)}).size(), 1u) << "per GPU";
}

TEST_F(MemoryBackstopTest, GroupsWithoutALimitAreNeverOver) {
  MemoryBackstop b = Make();
  EXPECT_TRUE(b.Check(0, kUuid, {P(200, 79 * kGiB)}).empty());
}

TEST_F(MemoryBackstopTest, KillActionEndsTheLargestProcessOfTheGroupEachSample) {
  MemoryBackstop b = Make(MemoryBackstop::Action::kKill);
  auto f = b.Check(0, kUuid, {P(100, 1 * kGiB), P(101, 5 * kGiB), P(200, 10 * kGiB)});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, Kind::kOverLimit);
  EXPECT_EQ(f[1].kind, Kind::kKilled);
  EXPECT_THAT(f[1].pids, ::testing::ElementsAre(101u));
  EXPECT_THAT(killed_, ::testing::ElementsAre(101));
  // The victim is gone; the rest is within the limit.
  f = b.Check(0, kUuid, {P(100, 1 * kGiB), P(200, 10 * kGiB)});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kBackUnder);
  EXPECT_EQ(killed_.size(), 1u) << "group b has no limit and group a is back under";
}

TEST_F(MemoryBackstopTest, MemoryTheDriverWithholdsCountsAsNone) {
  MemoryBackstop b = Make();
  EXPECT_TRUE(b.Check(0, kUuid, {GpuProcess{100, std::nullopt}}).empty());
}

}  // namespace
}  // namespace gpuslice::daemon
