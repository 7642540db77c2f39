#include "control/capacity_estimator.h"

#include <gtest/gtest.h>

namespace gpuslice::control {
namespace {

TEST(CapacityEstimator, WhileGroupsWantMoreItFollowsWhatTheDeviceRan) {
  CapacityEstimator c;
  EXPECT_EQ(c.capacity_bp(), CapacityEstimator::kMaxBp);
  for (int i = 0; i < 40; ++i) c.Tick(9300, /*wanting=*/true);
  EXPECT_NEAR(c.capacity_bp(), 9300 + CapacityEstimator::kMarginBp, 5);
}

TEST(CapacityEstimator, ItComesBackToTheWholeDeviceWhenNobodyWantsMore) {
  CapacityEstimator c;
  for (int i = 0; i < 40; ++i) c.Tick(6000, true);
  ASSERT_LT(c.capacity_bp(), 6100u);
  for (int i = 0; i < 100; ++i) c.Tick(6000, false);
  EXPECT_GE(c.capacity_bp(), 9900u);
}

TEST(CapacityEstimator, NeverBelowItsFloorAndUnknownBusyChangesNothing) {
  CapacityEstimator c;
  for (int i = 0; i < 100; ++i) c.Tick(100, true);
  EXPECT_EQ(c.capacity_bp(), CapacityEstimator::kMinBp);
  c.Tick(-1, true);
  EXPECT_EQ(c.capacity_bp(), CapacityEstimator::kMinBp);
}

}  // namespace
}  // namespace gpuslice::control
