#include "sim/core/pool_model.h"

#include <gtest/gtest.h>

namespace gpuslice::sim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(PoolModel, GrowsByWholeBlocksAndReusesItsFreeReserve) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  EXPECT_EQ(pool.GrowthFor(kMiB), 32 * kMiB);
  pool.Allocated(kMiB, 32 * kMiB);
  EXPECT_EQ(pool.reserved(), 32 * kMiB);
  EXPECT_EQ(pool.used(), 2 * kMiB);  // in use rounded to the granularity
  // 30 MiB are still free in the block: no growth until they are used up.
  for (int i = 0; i < 15; ++i) {
    ASSERT_EQ(pool.GrowthFor(2 * kMiB), 0u) << i;
    pool.Allocated(2 * kMiB, 0);
  }
  EXPECT_EQ(pool.used(), 32 * kMiB);
  EXPECT_EQ(pool.GrowthFor(2 * kMiB), 32 * kMiB);
  // A large allocation grows by its shortfall rounded to a block.
  EXPECT_EQ(pool.GrowthFor(70 * kMiB), 96 * kMiB);
}

TEST(PoolModel, AnAllocationLargerThanTheFreeReserveGrowsOnlyByTheShortfall) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  pool.Allocated(20 * kMiB, 32 * kMiB);             // 12 free
  EXPECT_EQ(pool.GrowthFor(40 * kMiB), 32 * kMiB);  // short by 28
  EXPECT_EQ(pool.GrowthFor(12 * kMiB), 0u);
}

TEST(PoolModel, FreedMemoryStaysReservedUntilASynchronize) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  pool.Allocated(64 * kMiB, 64 * kMiB);
  pool.Allocated(2 * kMiB, 32 * kMiB);
  pool.Freed(64 * kMiB);
  EXPECT_EQ(pool.used(), 2 * kMiB);
  EXPECT_EQ(pool.reserved(), 96 * kMiB);
  // Threshold 0 (the default): everything but the block in use goes back.
  EXPECT_EQ(pool.ReleaseAtSync(), 64 * kMiB);
  EXPECT_EQ(pool.reserved(), 32 * kMiB);
  EXPECT_EQ(pool.ReleaseAtSync(), 0u);
  pool.Freed(2 * kMiB);
  EXPECT_EQ(pool.ReleaseAtSync(), 32 * kMiB);
  EXPECT_EQ(pool.reserved(), 0u);
}

TEST(PoolModel, TheReleaseThresholdKeepsFreedMemoryAcrossSynchronizes) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  pool.set_release_threshold(80 * kMiB);
  pool.Allocated(128 * kMiB, 128 * kMiB);
  pool.Freed(128 * kMiB);
  // Above the threshold: back down to it, in whole blocks (64 <= 80).
  EXPECT_EQ(pool.ReleaseAtSync(), 64 * kMiB);
  EXPECT_EQ(pool.reserved(), 64 * kMiB);
  EXPECT_EQ(pool.ReleaseAtSync(), 0u);  // at or under the threshold: kept
  pool.set_release_threshold(UINT64_MAX);
  pool.Allocated(256 * kMiB, 192 * kMiB);
  pool.Freed(256 * kMiB);
  EXPECT_EQ(pool.ReleaseAtSync(), 0u);  // never released
  EXPECT_EQ(pool.reserved(), 256 * kMiB);
}

TEST(PoolModel, TrimKeepsAtLeastWhatItIsAskedToAndNothingInUse) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  pool.set_release_threshold(UINT64_MAX);
  pool.Allocated(128 * kMiB, 128 * kMiB);
  pool.Allocated(2 * kMiB, 32 * kMiB);
  pool.Freed(128 * kMiB);
  EXPECT_EQ(pool.TrimTo(200 * kMiB), 0u);  // less than that reserved: no-op
  EXPECT_EQ(pool.TrimTo(40 * kMiB), 96 * kMiB);
  EXPECT_EQ(pool.reserved(), 64 * kMiB);  // at least 40, in whole blocks
  EXPECT_EQ(pool.TrimTo(0), 32 * kMiB);
  EXPECT_EQ(pool.reserved(), 32 * kMiB);  // the block in use stays
  EXPECT_EQ(pool.ReleaseAll(), 32 * kMiB);
}

TEST(PoolModel, HighWatermarksFollowAndResetToTheCurrentValue) {
  PoolModel pool(2 * kMiB, 2 * kMiB);
  pool.Allocated(10 * kMiB, 10 * kMiB);
  pool.Freed(10 * kMiB);
  EXPECT_EQ(pool.ReleaseAtSync(), 10 * kMiB);
  EXPECT_EQ(pool.reserved_high(), 10 * kMiB);
  EXPECT_EQ(pool.used_high(), 10 * kMiB);
  pool.ResetReservedHigh();
  pool.ResetUsedHigh();
  EXPECT_EQ(pool.reserved_high(), 0u);
  EXPECT_EQ(pool.used_high(), 0u);
}

TEST(PoolModel, AGranularBlockReservesExactlyWhatIsAllocated) {
  PoolModel pool(2 * kMiB, 2 * kMiB);
  EXPECT_EQ(pool.GrowthFor(3 * kMiB), 4 * kMiB);
  pool.Allocated(3 * kMiB, 4 * kMiB);
  EXPECT_EQ(pool.reserved(), pool.used());
}

TEST(PoolModel, APoolWithAMaximumSizeNeverGrowsPastIt) {
  PoolModel pool(2 * kMiB, 32 * kMiB);
  pool.set_max_size(48 * kMiB);
  ASSERT_TRUE(pool.Fits(pool.GrowthFor(kMiB)));  // one 32 MiB block
  pool.Allocated(kMiB, pool.GrowthFor(kMiB));
  for (int i = 0; i < 15; ++i) pool.Allocated(2 * kMiB, pool.GrowthFor(2 * kMiB));
  EXPECT_EQ(pool.reserved(), 32 * kMiB);
  // The next block would reserve 64 MiB: it does not fit, not even in part.
  EXPECT_EQ(pool.GrowthFor(2 * kMiB), 32 * kMiB);
  EXPECT_FALSE(pool.Fits(pool.GrowthFor(2 * kMiB)));
  EXPECT_FALSE(pool.Fits(UINT64_MAX));
  pool.set_max_size(0);  // no maximum
  EXPECT_TRUE(pool.Fits(pool.GrowthFor(2 * kMiB)));
}

}  // namespace
}  // namespace gpuslice::sim
