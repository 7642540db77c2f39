#include "limiter/core/context_footprint.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGranularity = 2 * kMiB;

TEST(SettledContextBytesTest, AMatchingEstimateStays) {
  EXPECT_EQ(SettledContextBytes(300 * kMiB, 300 * kMiB, 300 * kMiB, kGranularity), 300 * kMiB);
}

TEST(SettledContextBytesTest, TheDriversLargerContextIsChargedInFull) {
  // The H100 case: the driver counts 518 MiB for a context estimated at 300.
  EXPECT_EQ(SettledContextBytes(518 * kMiB, 300 * kMiB, 300 * kMiB, kGranularity), 518 * kMiB);
}

TEST(SettledContextBytesTest, OtherChargesOfTheProcessAreNotTheContexts) {
  // 1 GiB allocated in an earlier context (charged 300 MiB, really 400): the
  // new context carries what the driver counts beyond every charge.
  const uint64_t charged = 1024 * kMiB + 300 * kMiB + 300 * kMiB;
  const uint64_t driver = 1024 * kMiB + 400 * kMiB + 400 * kMiB;
  EXPECT_EQ(SettledContextBytes(driver, charged, 300 * kMiB, kGranularity), 500 * kMiB);
}

TEST(SettledContextBytesTest, ASmallerContextGivesBackTheDifference) {
  EXPECT_EQ(SettledContextBytes(200 * kMiB, 300 * kMiB, 300 * kMiB, kGranularity), 200 * kMiB);
}

TEST(SettledContextBytesTest, NeverBelowZero) {
  EXPECT_EQ(SettledContextBytes(0, 900 * kMiB, 300 * kMiB, kGranularity), 0u);
}

TEST(SettledContextBytesTest, RoundsUpToTheGranularity) {
  EXPECT_EQ(SettledContextBytes(301 * kMiB, 300 * kMiB, 300 * kMiB, kGranularity), 302 * kMiB);
  EXPECT_EQ(SettledContextBytes(301 * kMiB, 300 * kMiB, 300 * kMiB, 0), 301 * kMiB);
}

TEST(SettledContextBytesTest, SaturatesInsteadOfWrapping) {
  EXPECT_EQ(SettledContextBytes(UINT64_MAX, 0, 300 * kMiB, kGranularity),
            UINT64_MAX - UINT64_MAX % kGranularity);
}

}  // namespace
}  // namespace gpuslice::limiter
