#include "control/launch_cost_meter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

namespace gpuslice::control {
namespace {

constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr int64_t kMs = 1'000'000;

// A real segment with members whose launch gates' counters the test writes
// as the gates would: launches made and completed, and what the timing
// markers measured.
class LaunchCostMeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-cost-meter-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto seg = GroupSegment::Open(dir_, "g", true);
    ASSERT_TRUE(seg.ok());
    segment_ = std::move(seg).value();
    ASSERT_EQ(*segment_->AttachDevice(kUuid), 0);
    segment_->SetComputeLimit(0, 50);  // paced
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A member: a handle of its own (a slot is one handle's), joined.
  int Join(int n) {
    auto seg = GroupSegment::Open(dir_, "g", true);
    EXPECT_TRUE(seg.ok());
    members_.push_back(std::move(seg).value());
    auto slot = members_.back()->Join(getpid() + n, 1000 + static_cast<uint64_t>(n), "m");
    EXPECT_TRUE(slot.ok());
    handle_[*slot] = members_.back().get();
    return *slot;
  }
  void Leave(int slot) { handle_.at(slot)->Leave(slot); }
  // The member in `slot` ran `launches` launches of `kernel_ns` each, of
  // which `measured` were in measured intervals; `queued` are still queued.
  void Run(int slot, uint64_t launches, int64_t kernel_ns, uint64_t measured, uint32_t queued = 0) {
    ComputeBudget b = handle_.at(slot)->usage().Budget(0, slot);
    for (uint64_t i = 0; i < launches; ++i) b.CountLaunch();
    b.Queued(queued);
    b.AddBusy(kernel_ns * static_cast<int64_t>(measured), measured);
  }
  void Tick(LaunchCostMeter& meter, int ticks = 1) {
    for (int i = 0; i < ticks; ++i) {
      clock_.Advance(50 * kMs);
      meter.Tick();
    }
  }

  std::string dir_;
  std::unique_ptr<GroupSegment> segment_;  // the controller's
  std::vector<std::unique_ptr<GroupSegment>> members_;
  std::map<int, GroupSegment*> handle_;  // each slot's member
  SimulatedClock clock_{MonotonicNs() + 1000 * kMs};
};

TEST_F(LaunchCostMeterTest, EachMemberIsChargedWhatItsMarkersMeasured) {
  LaunchCostMeter meter(*segment_, clock_);
  const int a = Join(1);
  const int b = Join(2);
  meter.Tick();
  for (int i = 0; i < 10; ++i) {
    Run(a, 50, 200'000, 40);  // most of its launches in measured intervals
    Run(b, 1, 20 * kMs, 1);
    Tick(meter);
  }
  EXPECT_EQ(segment_->usage().SlotCharge(a, 0), 200'000);
  EXPECT_EQ(segment_->usage().SlotCharge(b, 0), 20 * kMs);
  // The group's mean is launch-weighted.
  const double mean = (500.0 * 200'000 + 10.0 * 20 * kMs) / 510.0;
  EXPECT_NEAR(static_cast<double>(meter.GroupCharge(0)), mean, mean * 0.01);
  EXPECT_EQ(meter.CompletedLaunches(0), 510u);
}

TEST_F(LaunchCostMeterTest, KernelsThatBecomeLongerAreChargedTheNewCostWithinAFewTicks) {
  LaunchCostMeter meter(*segment_, clock_);
  const int a = Join(1);
  for (int i = 0; i < 40; ++i) {
    Run(a, 20, 1 * kMs, 20);
    Tick(meter);
  }
  ASSERT_EQ(segment_->usage().SlotCharge(a, 0), 1 * kMs);
  for (int i = 0; i < 8; ++i) {  // 400 ms of the new workload
    Run(a, 2, 10 * kMs, 2);
    Tick(meter);
  }
  EXPECT_NEAR(static_cast<double>(segment_->usage().SlotCharge(a, 0)), 10.0 * kMs, 0.5 * kMs);
}

// A member with long kernels and a small share launches rarely; its first
// measurements, taken while other groups still ran beside its turn, were
// stretched. Two launches measured right are enough to drop them.
TEST_F(LaunchCostMeterTest, AFewLaunchesWellBelowStretchedOnesAreItsChargeAtOnce) {
  LaunchCostMeter meter(*segment_, clock_);
  const int a = Join(1);
  meter.Tick();
  for (int64_t stretched : {100 * kMs, 90 * kMs, 80 * kMs, 60 * kMs}) {
    Run(a, 1, stretched, 1);
    Tick(meter, 10);
  }
  ASSERT_GT(segment_->usage().SlotCharge(a, 0), 60 * kMs);
  Run(a, 1, 20 * kMs, 1);
  Tick(meter, 20);
  Run(a, 1, 20 * kMs, 1);
  Tick(meter);
  EXPECT_EQ(segment_->usage().SlotCharge(a, 0), 20 * kMs);
}

TEST_F(LaunchCostMeterTest, AMemberWithoutEvidenceIsChargedTheFallbackElseTheGroupsMean) {
  LaunchCostMeter meter(*segment_, clock_);
  const int measured = Join(1);
  const int waited = Join(2);  // each launch waited for: no measured interval
  for (int i = 0; i < 10; ++i) {
    Run(measured, 10, 2 * kMs, 10);
    Run(waited, 10, 50'000, 0);
    Tick(meter);
  }
  EXPECT_EQ(segment_->usage().SlotCharge(waited, 0), 2 * kMs);  // the group's mean
  meter.SetFallbackCharge(0, 50'000);                           // the device's residual says
  Tick(meter);
  EXPECT_EQ(segment_->usage().SlotCharge(waited, 0), 50'000);
  EXPECT_EQ(segment_->usage().SlotCharge(measured, 0), 2 * kMs);
}

TEST_F(LaunchCostMeterTest, CompletedLaunchesLeaveOutTheQueuedAndKeepWhatLeaversRan) {
  LaunchCostMeter meter(*segment_, clock_);
  const int a = Join(1);
  const int b = Join(2);
  Run(a, 30, kMs, 30, /*queued=*/5);
  Run(b, 10, kMs, 10);
  Tick(meter);
  EXPECT_EQ(meter.CompletedLaunches(0), 35u);
  Leave(b);
  Tick(meter);
  EXPECT_EQ(meter.CompletedLaunches(0), 35u);  // b's ten stay counted
  handle_.at(a)->usage().Budget(0, a).Completed(5);
  Tick(meter);
  EXPECT_EQ(meter.CompletedLaunches(0), 40u);
}

TEST_F(LaunchCostMeterTest, TooLittleEvidenceIsNoCharge) {
  LaunchCostMeter meter(*segment_, clock_);
  const int a = Join(1);
  Run(a, 2, 1 * kMs, 2);  // two launches: below kMinLaunches
  Tick(meter, 3);
  EXPECT_EQ(segment_->usage().SlotCharge(a, 0), 0);
  EXPECT_EQ(meter.GroupCharge(0), 0);
  EXPECT_TRUE(meter.Tick());  // the device is paced
}

}  // namespace
}  // namespace gpuslice::control
