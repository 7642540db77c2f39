#include "limiter/core/context_charges.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "limiter/ledger_fixture.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The driver's count as a test sets it; nullopt: unknown.
class ScriptedDriver final : public ContextDriver {
 public:
  std::optional<uint64_t> ProcessBytes(int /*device*/) override {
    ++asked;
    return bytes;
  }
  std::optional<uint64_t> bytes;
  int asked = 0;
};

class ContextChargesTest : public LedgerFixture {
 protected:
  explicit ContextChargesTest(uint64_t limit = 1024 * kMiB) : LedgerFixture(limit) {}
  void Bind(bool fixed = false) {
    contexts_.Bind(segment_.get(), {.estimate_bytes = 300 * kMiB, .fixed = fixed}, &driver_);
  }
  // What the context hook does before the context exists: its estimate
  // charged and tracked as context `id`.
  void Create(uint64_t id) {
    const std::optional<Charge> c = ledger_.Reserve(device_, contexts_.Estimate(device_));
    ASSERT_TRUE(c.has_value());
    ledger_.Track(Resource::kContext, id, *c);
  }
  uint64_t Tracked(uint64_t id) {
    std::optional<Charge> c = ledger_.Untrack(Resource::kContext, id);
    if (!c) return 0;
    ledger_.Track(Resource::kContext, id, *c);
    return c->bytes;
  }

  ScriptedDriver driver_;
  ContextCharges contexts_{ledger_, /*granularity=*/2 * kMiB};
};

TEST_F(ContextChargesTest, AContextSettlesOnTheDriversCountAndTheNextIsEstimatedSo) {
  Bind();
  EXPECT_EQ(contexts_.Estimate(device_), 300 * kMiB);
  Create(1);
  driver_.bytes = 518 * kMiB;  // the H100's context, docs/gpu-tier.md
  EXPECT_TRUE(contexts_.SettleContext(1));
  EXPECT_EQ(Tracked(1), 518 * kMiB);
  EXPECT_EQ(Used(), 518 * kMiB);
  EXPECT_EQ(contexts_.Estimate(device_), 518 * kMiB);
}

TEST_F(ContextChargesTest, ASmallerContextGivesTheDifferenceBack) {
  Bind();
  Create(1);
  driver_.bytes = 200 * kMiB;
  EXPECT_TRUE(contexts_.SettleContext(1));
  EXPECT_EQ(Tracked(1), 200 * kMiB);
  EXPECT_EQ(Used(), 200 * kMiB);
}

TEST_F(ContextChargesTest, AnUnknownCountOrAFixedEstimateLeavesTheEstimate) {
  Bind();
  Create(1);
  EXPECT_TRUE(contexts_.SettleContext(1));  // the driver does not know
  EXPECT_EQ(Tracked(1), 300 * kMiB);
  EXPECT_EQ(contexts_.Estimate(device_), 300 * kMiB);

  Bind(/*fixed=*/true);  // GPUSLICE_CONTEXT_BYTES given
  driver_.bytes = 518 * kMiB;
  driver_.asked = 0;
  Create(2);
  EXPECT_TRUE(contexts_.SettleContext(2));
  EXPECT_EQ(Tracked(2), 300 * kMiB);
  EXPECT_EQ(driver_.asked, 0);
}

TEST_F(ContextChargesTest, AnUntrackedContextIsNothingToSettle) {
  Bind();
  driver_.bytes = 518 * kMiB;
  EXPECT_TRUE(contexts_.SettleContext(7));
  EXPECT_EQ(Used(), 0u);
  EXPECT_TRUE(contexts_.SettlePrimary(device_));  // not retained
  EXPECT_EQ(Used(), 0u);
}

TEST_F(ContextChargesTest, APrimaryContextSettlesItsCharge) {
  Bind();
  ASSERT_TRUE(ledger_.PrimaryNeedsCharge(device_));
  const std::optional<Charge> c = ledger_.Reserve(device_, contexts_.Estimate(device_));
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE(ledger_.PrimaryRetainDone(device_, /*ctx=*/0x1000, c));
  driver_.bytes = 518 * kMiB;
  EXPECT_TRUE(contexts_.SettlePrimary(device_));
  EXPECT_EQ(ledger_.PrimaryCharge(device_)->bytes, 518 * kMiB);
  EXPECT_EQ(Used(), 518 * kMiB);
  ledger_.PrimaryRelease(device_, /*reset=*/false);  // the last release gives it all back
  EXPECT_EQ(Used(), 0u);
}

// A group with no room for the driver's larger figure: nothing changes and
// the caller refuses the context.
class TightContextChargesTest : public ContextChargesTest {
 protected:
  TightContextChargesTest() : ContextChargesTest(400 * kMiB) {}
};

TEST_F(TightContextChargesTest, NoRoomForTheDifferenceChangesNothing) {
  Bind();
  Create(1);
  driver_.bytes = 518 * kMiB;
  EXPECT_FALSE(contexts_.SettleContext(1));
  EXPECT_EQ(Tracked(1), 300 * kMiB);
  EXPECT_EQ(Used(), 300 * kMiB);
  EXPECT_EQ(contexts_.Estimate(device_), 300 * kMiB) << "a refused size is not the estimate";
}

// Where the device has no memory limit the estimate is never corrected (the
// driver is not even asked).
class UnlimitedContextChargesTest : public ContextChargesTest {
 protected:
  UnlimitedContextChargesTest() : ContextChargesTest(kUnlimitedBytes) {}
};

TEST_F(UnlimitedContextChargesTest, NoLimitNoSettling) {
  Bind();
  Create(1);
  driver_.bytes = 518 * kMiB;
  EXPECT_TRUE(contexts_.SettleContext(1));
  EXPECT_EQ(Tracked(1), 300 * kMiB);
  EXPECT_EQ(driver_.asked, 0);
}

}  // namespace
}  // namespace gpuslice::limiter
