#include "limiter/pool_charges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "limiter/ledger_fixture.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGranularity = 2 * kMiB;

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
  // A pool of the device capped at `span` bytes (CUmemPoolProps::maxSize)
  // asked for one byte: it grows by `probe_block`, or is refused when that
  // is larger than the span (`clip`: grows by the span instead).
  BlockProbe Probe(uint64_t span) {
    spans.push_back(span);
    if (probe_unknown) return {};
    if (probe_block > span && !clip) return {BlockProbe::kLarger, 0};
    const uint64_t grew = std::min(probe_block, span);
    peak = std::max(peak, Reserved() + grew);
    return {BlockProbe::kBlock, grew};
  }
  // Every pool's reserve plus `outside` (memory the process holds elsewhere).
  uint64_t Reserved() const {
    uint64_t total = outside;
    for (const auto& [h, p] : pools) total += p.reserved;
    return total;
  }
  void Synchronize(uint64_t pool) {
    Pool& p = pools[pool];
    p.reserved = RoundUp(p.used, p.block);
  }
  std::map<uint64_t, Pool> pools;
  int usage_calls = 0;
  uint64_t probe_block = 32 * kMiB;
  bool probe_unknown = false;
  bool clip = false;
  std::vector<uint64_t> spans;  // each probe's span
  uint64_t outside = 0;
  uint64_t peak = 0;  // the most Reserved() ever was, probes included
};

class PoolChargesTest : public LedgerFixture {
 protected:
  PoolChargesTest() : LedgerFixture(100 * kMiB) {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(LedgerFixture::SetUp());
    driver_.pools[1];  // two empty pools
    driver_.pools[2];
  }

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

  // The same with a block probe, as the hooks make it; the group's count
  // while the probe ran in used_at_probe_.
  CUresult AllocateProbed(uint64_t pool, uint64_t bytes) {
    auto rc = charges_.Allocate(
        pool, device_, bytes,
        [&] {
          used_at_call_ = Used();
          const CUresult r = driver_.Alloc(pool, bytes);
          driver_.peak = std::max(driver_.peak, driver_.Reserved());
          return r;
        },
        [&] {
          ++undone_;
          driver_.Free(pool, bytes);
        },
        [] { return uint64_t{0}; },
        [&](uint64_t span) {
          used_at_probe_ = Used();
          return driver_.Probe(span);
        });
    EXPECT_TRUE(rc.has_value());
    return rc.value_or(CUDA_ERROR_UNKNOWN);
  }
  // Charges `bytes` outside the pools (a context, say), on both sides.
  void Outside(uint64_t bytes) {
    ASSERT_TRUE(ledger_.Reserve(device_, bytes).has_value());
    driver_.outside += bytes;
  }

  FakeDriver driver_;
  PoolCharges charges_{ledger_, driver_, kGranularity};
  uint64_t used_at_call_ = 0;
  uint64_t used_at_probe_ = 0;
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

// The first growth of a pool whose block (64 MiB) is larger than the
// assumed one, with 40 MiB of room: the probe finds the block does not fit
// and the allocation is refused before the driver is called. Without the
// probe, 32 MiB were reserved ahead, the driver grew by 64 and the group's
// memory passed the cap until the growth was undone.
TEST_F(PoolChargesTest, AFirstGrowthLargerThanTheRoomIsRefusedBeforeTheDriverGrows) {
  segment_->SetMemoryLimit(device_, 100 * kMiB);
  Outside(60 * kMiB);
  driver_.pools[1].block = 64 * kMiB;
  driver_.probe_block = 64 * kMiB;
  used_at_call_ = 0;
  EXPECT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used_at_call_, 0u) << "the driver was called";
  EXPECT_EQ(undone_, 0);
  EXPECT_LE(driver_.peak, 100 * kMiB) << "the driver held more than the cap";
  EXPECT_EQ(driver_.spans, std::vector<uint64_t>{40 * kMiB});  // the whole room at once
  EXPECT_EQ(used_at_probe_, 100 * kMiB);                       // held while probing
  EXPECT_EQ(Used(), 60 * kMiB);                                // and given back
  EXPECT_EQ(charges_.device_block(device_), 0u);               // nothing learnt
}

// With room for it, the probed block (not the assumed 32 MiB) is reserved
// ahead of the first growth, and every other pool of the device starts from
// it without a probe of its own.
TEST_F(PoolChargesTest, TheProbedBlockIsReservedAheadOfEveryPoolsFirstGrowth) {
  segment_->SetMemoryLimit(device_, 1024 * kMiB);
  for (uint64_t pool : {1, 2}) driver_.pools[pool].block = 64 * kMiB;
  driver_.probe_block = 64 * kMiB;
  ASSERT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_.spans, std::vector<uint64_t>{PoolCharges::kProbeSpan});
  EXPECT_EQ(used_at_probe_, PoolCharges::kProbeSpan);
  EXPECT_EQ(used_at_call_, 64 * kMiB);  // the block, held while the driver grows
  EXPECT_EQ(Used(), 64 * kMiB);
  EXPECT_EQ(charges_.device_block(device_), 64 * kMiB);
  ASSERT_EQ(AllocateProbed(2, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_.spans.size(), 1u) << "probed again";
  EXPECT_EQ(used_at_call_, 128 * kMiB);
  EXPECT_EQ(undone_, 0);
}

// A block as large as the first span is not told from a growth clipped to it:
// the probe runs again over the whole room.
TEST_F(PoolChargesTest, ABlockNotSmallerThanTheFirstSpanIsProbedAgainOverTheRoom) {
  segment_->SetMemoryLimit(device_, 1000 * kMiB);
  driver_.pools[1].block = 256 * kMiB;
  driver_.probe_block = 256 * kMiB;
  ASSERT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(driver_.spans, (std::vector<uint64_t>{PoolCharges::kProbeSpan, 1000 * kMiB}));
  EXPECT_EQ(used_at_call_, 256 * kMiB);
  EXPECT_EQ(charges_.device_block(device_), 256 * kMiB);
  EXPECT_LE(driver_.peak, 1000 * kMiB);
}

// A driver that grew a capped probe pool by all it was allowed (it may clip
// its growth to maxSize) tells nothing: treated as a refusal.
TEST_F(PoolChargesTest, AProbeGrownByItsWholeSpanIsNotTrusted) {
  segment_->SetMemoryLimit(device_, 100 * kMiB);
  Outside(60 * kMiB);
  driver_.pools[1].block = 64 * kMiB;
  driver_.probe_block = 64 * kMiB;
  driver_.clip = true;
  used_at_call_ = 0;
  EXPECT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used_at_call_, 0u) << "the driver was called";
  EXPECT_EQ(charges_.device_block(device_), 0u);
}

// Where the probe cannot tell (an older driver), the assumed block stands and
// a larger growth is undone, as before.
TEST_F(PoolChargesTest, AProbeThatCannotTellLeavesTheAssumedBlock) {
  segment_->SetMemoryLimit(device_, 60 * kMiB);
  driver_.pools[1].block = 64 * kMiB;
  driver_.probe_unknown = true;
  EXPECT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(driver_.spans.size(), 1u);
  EXPECT_EQ(undone_, 1);
  EXPECT_EQ(driver_.pools[1].reserved, 0u);
  EXPECT_EQ(Used(), 0u);
}

// A device without a memory limit has no cap to pass: no probe.
TEST_F(PoolChargesTest, NoProbeWithoutALimit) {
  segment_->SetMemoryLimit(device_, kUnlimitedBytes);
  ASSERT_EQ(AllocateProbed(1, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_TRUE(driver_.spans.empty());
  EXPECT_EQ(Used(), 32 * kMiB);
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
