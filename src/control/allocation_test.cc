#include "control/allocation.h"

#include <gtest/gtest.h>

#include <numeric>

namespace gpuslice::control {
namespace {

AllocationInput Wanting(uint32_t request, uint32_t limit_bp = 10000, uint32_t weight = 1) {
  return {.request_percent = request, .limit_bp = limit_bp, .weight = weight, .wanting = true};
}

uint32_t Sum(const std::vector<uint32_t>& v) { return std::accumulate(v.begin(), v.end(), 0u); }

TEST(Allocate, SaturatingGroupsGetTheirRequestsOfTheCapacity) {
  const std::vector<uint32_t> g =
      Allocate({Wanting(10), Wanting(20), Wanting(30), Wanting(40)}, 9800);
  // Requests are of the capacity: 10 % of 98 % is 9.8 %, and so on.
  EXPECT_EQ(g, (std::vector<uint32_t>{980, 1960, 2940, 3920}));
}

TEST(Allocate, TheSurplusGoesByWeightWithinLimits) {
  // A request of 50, a group capped at 30 with weight 6, another of weight 1.
  const std::vector<uint32_t> g = Allocate({Wanting(50), Wanting(0, 3000, 6), Wanting(0)}, 10000);
  EXPECT_EQ(g[1], 3000u);  // capped: 6/8 of the 50 left would be 37.5
  EXPECT_EQ(g[0], 50u * 100 + 1000);
  EXPECT_EQ(g[2], 1000u);
  EXPECT_EQ(Sum(g), 10000u);
}

TEST(Allocate, AGroupThatDoesNotWantMoreGetsWhatItRanPlusHeadroom) {
  AllocationInput modest{.request_percent = 40, .used_bp = 1000, .used_fast_bp = 800};
  const std::vector<uint32_t> g = Allocate({modest, Wanting(0)}, 10000);
  // Its unused request is lent: it keeps 10 % x 1.1 + 1 point.
  EXPECT_EQ(g[0], static_cast<uint32_t>(1000 * kUseHeadroom + kMarginBp));
  EXPECT_EQ(g[1], 10000u - g[0]);
}

TEST(Allocate, ANewGroupStandsOnItsRequestBeforeItIsHeldBack) {
  AllocationInput fresh{.request_percent = 30, .wanting = true, .standing = true};
  const std::vector<uint32_t> g = Allocate({fresh, Wanting(0)}, 10000);
  EXPECT_EQ(g[0], 3000u);  // its request (and what it ran, nothing yet, is no cap)
  EXPECT_EQ(g[1], 7000u);
}

TEST(Allocate, PausedGetsNothingAndIdleKeepsALittleOutsideTheCapacity) {
  AllocationInput paused = Wanting(50);
  paused.paused = true;
  AllocationInput idle{.request_percent = 20, .idle = true};
  const std::vector<uint32_t> g = Allocate({paused, idle, Wanting(0)}, 9000);
  EXPECT_EQ(g[0], 0u);
  EXPECT_EQ(g[1], kIdleGrantBp);
  EXPECT_EQ(g[2], 9000u);  // all of the capacity: the paused and the idle requests are lent
}

TEST(Allocate, RequestsBeyondTheCapacityAreScaledDownAndLimitsNeverPassed) {
  const std::vector<uint32_t> g = Allocate({Wanting(60, 2000), Wanting(60), Wanting(60)}, 10000);
  EXPECT_LE(g[0], 2000u);
  EXPECT_EQ(g[1], g[2]);
  EXPECT_LE(Sum(g), 10000u);
  EXPECT_GE(Sum(g), 9990u);
}

TEST(WaterFill, NeverGivesMoreThanRoomOrAmount) {
  const std::vector<double> got = WaterFill({10, 50, 1000}, {1, 1, 2}, 500);
  EXPECT_DOUBLE_EQ(got[0], 10);
  EXPECT_DOUBLE_EQ(got[1], 50);
  EXPECT_DOUBLE_EQ(got[2], 440);
}

}  // namespace
}  // namespace gpuslice::control
