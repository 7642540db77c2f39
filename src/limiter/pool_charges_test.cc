#include "limiter/pool_charges.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "shm/group_segment.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGranularity = 2 * kMiB;
constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";

uint64_t RoundUp(uint64_t bytes, uint64_t unit) { return (bytes + unit - 1) / unit * unit; }

// A driver whose pools grow in blocks, keep freed memory until a
// synchronize, and trim as documented (the simulator's model in small).
class FakeDriver : public PoolDriver {
 public:
  struct Pool {
    uint64_t reserved = 0;
    uint64_t used = 0;
    uint64_t block = 32 * kMiB;
    bool known = true;
  };
  std::optional<PoolUsage> Usage(uint64_t pool) override {
    ++usage_calls;
    auto it = pools.find(pool);
    if (it == pools.end() || !it->second.known) return std::nullopt;
    return PoolUsage{it->second.reserved, it->second.used};
  }
  void TrimTo(uint64_t pool, uint64_t keep) override {
    Pool& p = pools[pool];
    if (p.reserved < keep) return;
    p.reserved = std::min(p.reserved, std::max(RoundUp(p.used, p.block), RoundUp(keep, p.block)));
  }
  CUresult Alloc(uint64_t pool, uint64_t bytes) {
    Pool& p = pools[pool];
    const uint64_t need = RoundUp(bytes, kGranularity);
    const uint64_t free = p.reserved - p.used;
    if (need > free) p.reserved += RoundUp(need - free, p.block);
    p.used += need;
    return CUDA_SUCCESS;
  }
  void Free(uint64_t pool, uint64_t bytes) { pools[pool].used -= RoundUp(bytes, kGranularity); }
  void Synchronize(uint64_t pool) {
    Pool& p = pools[pool];
    p.reserved = RoundUp(p.used, p.block);
  }
  std::map<uint64_t, Pool> pools;
  int usage_calls = 0;
};

class PoolChargesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-pool-charges-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto seg = GroupSegment::Open(dir_, "g", true);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    segment_ = std::move(seg).value();
    device_ = *segment_->AttachDevice(kUuid);
    segment_->SetMemoryLimit(device_, 100 * kMiB);
    ledger_.Bind(segment_.get());
    driver_.pools[1];  // two empty pools
    driver_.pools[2];
  }
  void TearDown() override {
    segment_.reset();
    std::filesystem::remove_all(dir_);
  }
  uint64_t Used() const { return segment_->MemoryUsed(device_); }

  // One allocation of `bytes` from `pool` through the charges, as the hooks
  // do; the driver gives it address `ptr` (0: not remembered).
  CUresult Allocate(uint64_t pool, uint64_t bytes, uint64_t ptr = 0) {
    auto rc = charges_.Allocate(
        pool, device_, bytes,
        [&] {
          used_at_call_ = Used();
          return driver_.Alloc(pool, bytes);
        },
        [&] {
          ++undone_;
          driver_.Free(pool, bytes);
        },
        [ptr] { return ptr; });
    EXPECT_TRUE(rc.has_value());
    return rc.value_or(CUDA_ERROR_UNKNOWN);
  }

  std::string dir_;
  std::unique_ptr<GroupSegment> segment_;
  int device_ = 0;
  Ledger ledger_;
  FakeDriver driver_;
  PoolCharges charges_{ledger_, driver_, kGranularity};
  uint64_t used_at_call_ = 0;
  int undone_ = 0;
};

TEST_F(PoolChargesTest, ThePoolIsChargedItsReserveNotItsAllocations) {
  ASSERT_EQ(Allocate(1, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 32 * kMiB);  // the block the driver reserved, not 2 MiB
  for (int i = 0; i < 15; ++i) ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 32 * kMiB);  // all within the first block
  EXPECT_EQ(driver_.pools[1].used, 32 * kMiB);
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 64 * kMiB);
  EXPECT_EQ(charges_.charged(1), 64 * kMiB);
}

TEST_F(PoolChargesTest, TheLearntBlockIsReservedBeforeTheDriverIsCalled) {
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);        // learns: 2 MiB short, grew 32
  EXPECT_EQ(used_at_call_, PoolCharges::kAssumedBlock);  // before that, the assumed block
  for (int i = 0; i < 15; ++i) ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(used_at_call_, 64 * kMiB);  // the whole block, held while the driver grows
}

// Before its block is learnt, a pool's growth is reserved as a whole 32 MiB:
// a first growth never passes the cap (the allocation-sized reservation let
// the driver grow by 32 MiB and then had to undo it).
TEST_F(PoolChargesTest, AnUnlearntPoolIsRefusedBeforeTheDriverGrowsPastTheLimit) {
  segment_->SetMemoryLimit(device_, 60 * kMiB);
  ASSERT_EQ(Allocate(1, 32 * kMiB), CUDA_SUCCESS);  // grows by its shortfall: no block learnt
  EXPECT_EQ(Used(), 32 * kMiB);
  used_at_call_ = 0;
  EXPECT_EQ(Allocate(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);  // 28 MiB left, 32 assumed
  EXPECT_EQ(used_at_call_, 0u) << "the driver was called";
  EXPECT_EQ(undone_, 0);
  EXPECT_EQ(driver_.pools[1].reserved, 32 * kMiB);
  EXPECT_EQ(Used(), 32 * kMiB);
}

// A pool that grows in blocks larger than the assumed one: the growth past
// the group's room is undone, and the driver ends within the cap.
TEST_F(PoolChargesTest, AGrowthPastTheLimitIsUndoneAndTheDriverEndsWithinIt) {
  segment_->SetMemoryLimit(device_, 60 * kMiB);
  driver_.pools[1].block = 64 * kMiB;
  // 32 MiB reserved ahead; the driver grows by 64: undone, trimmed back, refused.
  EXPECT_EQ(Allocate(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(undone_, 1);
  EXPECT_EQ(driver_.pools[1].reserved, 0u);  // trimmed back
  EXPECT_EQ(driver_.pools[1].used, 0u);
  EXPECT_EQ(Used(), 0u);
  // Now the block is known: refused before the driver is called.
  used_at_call_ = 1;
  EXPECT_EQ(Allocate(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(undone_, 1);
  EXPECT_EQ(used_at_call_, 1u) << "the driver was called";
}

// A pool whose growth equals a small shortfall grows by the allocation: it
// is reserved by the granularity from then on.
TEST_F(PoolChargesTest, APoolThatGrowsByTheAllocationIsLearntAsSuch) {
  segment_->SetMemoryLimit(device_, 40 * kMiB);
  driver_.pools[1].block = kGranularity;
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);  // 32 assumed, grew 2: learnt
  EXPECT_EQ(Used(), 2 * kMiB);
  for (int i = 0; i < 19; ++i) ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 40 * kMiB);  // to the cap exactly
  EXPECT_EQ(Allocate(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(undone_, 0);
}

TEST_F(PoolChargesTest, AKnownBlockThatDoesNotFitIsRefusedBeforeTheDriverGrows) {
  segment_->SetMemoryLimit(device_, 40 * kMiB);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 32 * kMiB);
  used_at_call_ = 0;
  // 8 MiB left: the next block (32) does not fit.
  EXPECT_EQ(Allocate(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used_at_call_, 0u) << "the driver was called";
  EXPECT_EQ(undone_, 0);
  EXPECT_EQ(driver_.pools[1].reserved, 32 * kMiB);
  EXPECT_EQ(Used(), 32 * kMiB);
}

TEST_F(PoolChargesTest, NoRoomForTheShortfallRefusesWithoutCallingTheDriver) {
  segment_->SetMemoryLimit(device_, 40 * kMiB);
  ASSERT_EQ(Allocate(1, 32 * kMiB), CUDA_SUCCESS);
  used_at_call_ = 0;
  EXPECT_EQ(Allocate(1, 10 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);  // 10 short, 8 left
  EXPECT_EQ(used_at_call_, 0u) << "the driver was called";
  EXPECT_EQ(Used(), 32 * kMiB);
}

TEST_F(PoolChargesTest, ReusedFreeMemoryCostsNothingAndARefreshFollowsASynchronize) {
  ASSERT_EQ(Allocate(1, 64 * kMiB), CUDA_SUCCESS);
  driver_.Free(1, 64 * kMiB);
  EXPECT_EQ(Used(), 64 * kMiB);                     // freed memory stays in the pool: still charged
  ASSERT_EQ(Allocate(1, 60 * kMiB), CUDA_SUCCESS);  // reuses it
  EXPECT_EQ(Used(), 64 * kMiB);
  driver_.Free(1, 60 * kMiB);
  driver_.Synchronize(1);
  EXPECT_TRUE(charges_.RefreshAll());
  EXPECT_EQ(Used(), 0u);
  EXPECT_FALSE(charges_.any_charged());
}

TEST_F(PoolChargesTest, ARefusalLooksAtOtherPoolsBeforeRefusing) {
  ASSERT_EQ(Allocate(1, 64 * kMiB), CUDA_SUCCESS);
  driver_.Free(1, 64 * kMiB);
  driver_.Synchronize(1);  // the limiter has not seen the release yet
  EXPECT_EQ(Used(), 64 * kMiB);
  ASSERT_EQ(Allocate(2, 64 * kMiB), CUDA_SUCCESS);  // fits once pool 1 is refreshed
  EXPECT_EQ(Used(), 64 * kMiB);
  EXPECT_EQ(charges_.charged(1), 0u);
}

TEST_F(PoolChargesTest, GrowthTheLimiterDidNotSeeIsChargedAtTheNextLook) {
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  driver_.Alloc(1, 40 * kMiB);  // e.g. a graph's allocation node
  charges_.Refresh(1);
  EXPECT_EQ(Used(), driver_.pools[1].reserved);
}

TEST_F(PoolChargesTest, APoolTheDriverCannotReportIsLeftToTheCaller) {
  driver_.pools[7].known = false;
  bool called = false;
  auto rc = charges_.Allocate(
      7, device_, kMiB,
      [&] {
        called = true;
        return CUDA_SUCCESS;
      },
      [] {});
  EXPECT_FALSE(rc.has_value());
  EXPECT_FALSE(called);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(PoolChargesTest, ADriverRefusalGivesBackWhatWasReservedAhead) {
  auto rc = charges_.Allocate(
      1, device_, 8 * kMiB, [] { return CUDA_ERROR_OUT_OF_MEMORY; }, [] {});
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(PoolChargesTest, ADestroyedPoolGivesItsChargeBackUnlessAllocationsAreOutstanding) {
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(Allocate(2, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 64 * kMiB);
  charges_.Destroyed(1, /*outstanding=*/false);
  EXPECT_EQ(Used(), 32 * kMiB);
  charges_.Destroyed(2, /*outstanding=*/true);
  driver_.pools.erase(2);
  EXPECT_FALSE(charges_.RefreshAll());
  EXPECT_EQ(Used(), 32 * kMiB);  // kept: the driver frees it only with its last allocation
}

// The driver releases a pool destroyed with allocations outstanding with the
// last of them: so does the group's charge.
TEST_F(PoolChargesTest, APoolDestroyedWithAllocationsOutstandingIsGivenBackWithTheLast) {
  ASSERT_EQ(Allocate(1, 2 * kMiB, 0x1000), CUDA_SUCCESS);
  ASSERT_EQ(Allocate(1, 2 * kMiB, 0x2000), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 32 * kMiB);
  charges_.Destroyed(1, /*outstanding=*/true, driver_.pools[1].used);
  driver_.pools.erase(1);  // the driver no longer answers for it
  charges_.Freed(0x1000);
  EXPECT_EQ(Used(), 32 * kMiB);  // one allocation still outstanding
  charges_.Freed(0x2000);
  EXPECT_EQ(Used(), 0u);
  EXPECT_FALSE(charges_.DeviceOf(1).has_value());
  // A pool with an allocation the charges never saw stays charged.
  ASSERT_EQ(Allocate(2, 2 * kMiB, 0x3000), CUDA_SUCCESS);
  driver_.Alloc(2, 2 * kMiB);  // behind the charges' back
  charges_.Destroyed(2, /*outstanding=*/true, driver_.pools[2].used);
  driver_.pools.erase(2);
  charges_.Freed(0x3000);
  EXPECT_EQ(Used(), 32 * kMiB);
}

TEST_F(PoolChargesTest, APoolTheDriverForgotIsGivenBack) {
  ASSERT_EQ(Allocate(1, 2 * kMiB), CUDA_SUCCESS);
  driver_.pools.erase(1);  // e.g. its context was destroyed
  EXPECT_TRUE(charges_.RefreshAll());
  EXPECT_EQ(Used(), 0u);
  EXPECT_FALSE(charges_.DeviceOf(1).has_value());
}

TEST_F(PoolChargesTest, AddedPoolsKnowTheirDevice) {
  charges_.Add(5, device_);
  charges_.Add(6, -1);
  EXPECT_EQ(charges_.DeviceOf(5), device_);
  EXPECT_EQ(charges_.DeviceOf(6), -1);
  EXPECT_FALSE(charges_.DeviceOf(9).has_value());
}

}  // namespace
}  // namespace gpuslice::limiter
