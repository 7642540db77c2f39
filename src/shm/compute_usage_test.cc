#include "shm/compute_usage.h"

#include "shm/group_segment_test_fixture.h"

namespace gpuslice::segment_test {
namespace {

class ComputeUsageTest : public SegmentTest {};

TEST_F(ComputeUsageTest, ASlotsMeasuredBusyTimeAddsUpAndGoesWithTheSlot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->usage().Budget(d, slot);
  budget.AddBusy(3000, 3);
  budget.AddBusy(500, 1);
  budget.AddBusy(-5, 1);  // nothing measured
  EXPECT_EQ(seg->usage().SlotBusyOf(slot, d).busy_ns, 3500u);
  EXPECT_EQ(seg->usage().SlotBusyOf(slot, d).launches, 4u);
  seg->Leave(slot);
  EXPECT_EQ(seg->usage().SlotBusyOf(slot, d).busy_ns, 0u);
}

// A member's wait is seen while it lasts (not only once it ends), and a
// member that leaves (or dies) mid-wait leaves no wait behind.

TEST_F(ComputeUsageTest, AWaitUnderWayIsCountedUntilItEndsOrItsMemberGoes) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->usage().Budget(d, slot);
  EXPECT_EQ(seg->schedule().Counters(d).waiting, 0u);
  budget.BeginWait();
  budget.BeginWait();                                  // two threads of the member
  EXPECT_EQ(seg->schedule().Counters(d).waiting, 1u);  // members, not threads
  EXPECT_EQ(seg->schedule().Counters(d).waits, 0u);    // nothing has ended yet
  budget.EndWait();
  EXPECT_EQ(seg->schedule().Counters(d).waiting, 1u);
  budget.EndWait();
  EXPECT_EQ(seg->schedule().Counters(d).waiting, 0u);
  budget.BeginWait();
  seg->Leave(slot);
  EXPECT_EQ(seg->schedule().Counters(d).waiting, 0u);
}

TEST_F(ComputeUsageTest, EachMemberHasItsOwnComputeAndANewOwnerStartsAfresh) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->usage().Budget(d, slot);
  budget.CountLaunch();
  budget.RecordProbe(3000);
  seg->usage().PublishSlotCharge(slot, d, 2000);
  EXPECT_EQ(seg->usage().SlotLaunches(slot, d), 1u);
  EXPECT_EQ(seg->usage().Launches(d), 1u);
  EXPECT_EQ(budget.charge_ns(), 2000);
  EXPECT_EQ(budget.probe_ns(), 3000);
  const std::vector<GroupSegment::MemberRef> members = seg->Members();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].slot, slot);
  EXPECT_EQ(members[0].pid, getpid());
  EXPECT_GT(members[0].joined_ns, 0);
  // A value another member wrote out of range is bounded when read.
  std::atomic_ref<int64_t>(testing::RawLayout(*seg).slot_compute[slot][d].charge_ns).store(-1);
  EXPECT_EQ(seg->usage().SlotCharge(slot, d), 0);
  seg->usage().PublishSlotCharge(slot, d, INT64_MAX);
  EXPECT_EQ(seg->usage().SlotCharge(slot, d), kMaxChargeNs);
  // Leaving clears the slot's compute: its next owner measures its own.
  seg->Leave(slot);
  EXPECT_EQ(*seg->Join(getpid(), 1, "me"), slot);
  EXPECT_EQ(seg->usage().SlotLaunches(slot, d), 0u);
  EXPECT_EQ(seg->usage().SlotCharge(slot, d), 0);
  EXPECT_EQ(seg->usage().Budget(d, slot).probe_ns(), 0);
  EXPECT_EQ(seg->usage().Launches(d), 1u);  // the group's count stays
}

// A budget run ahead at an older, lower rate (a 1 % grant) is pulled back
// to what the current rate allows; one within it is left alone.

TEST_F(ComputeUsageTest, ABudgetRunAheadIsPulledBackToTheCurrentRate) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->usage().Budget(d, slot);
  const int64_t now = 1'000'000'000;
  // 20 ms of device time at 1 %: 2 s of wall time.
  ASSERT_EQ(budget.TryAdmit(now, PacedIntervalBpNs(20'000'000, 100), kPacerBurstNs), 0);
  const int64_t at_30 = PacedIntervalBpNs(20'000'000, 3000);
  EXPECT_GT(budget.TryAdmit(now, at_30, kPacerBurstNs), at_30);  // held for the old charge
  EXPECT_TRUE(budget.ClampAhead(now, kPacerBurstNs + at_30));
  EXPECT_EQ(std::atomic_ref<int64_t>(testing::RawCompute(*seg, d).next_free_ns).load(),
            now + kPacerBurstNs + at_30);
  EXPECT_FALSE(budget.ClampAhead(now, kPacerBurstNs + at_30));       // nothing beyond: unchanged
  EXPECT_EQ(budget.TryAdmit(now + at_30, at_30, kPacerBurstNs), 0);  // the current rate's wait
  EXPECT_EQ(budget.AheadBy(now + at_30), kPacerBurstNs + at_30);
}

// The bound of that pull-back: the largest charge of a live member, or its
// bootstrap measurement while it has no charge (a member with longer
// launches keeps its debt). A measurement is an upper bound that the charge
// refines: once the charge is known it no longer counts.

TEST_F(ComputeUsageTest, MaxMemberChargeIsTheLargestOfTheLiveMembers) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 0);
  const int a = *seg->Join(getpid(), 1, "a");
  seg->usage().Budget(d, a).RecordProbe(9000);
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 9000);  // measured, no charge yet
  seg->usage().PublishSlotCharge(a, d, 2000);
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 2000);  // refined
  auto other = OpenGroup();                          // a second member
  const int b = *other->Join(getpid(), 2, "b");
  other->usage().Budget(d, b).RecordProbe(5000);
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 5000);  // b's measurement, larger than a's charge
  other->usage().PublishSlotCharge(b, d, 7000);
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 7000);  // a charge refined up counts as well
  other->Leave(b);
  seg->Leave(a);  // no live member: nothing
  EXPECT_EQ(seg->usage().MaxMemberCharge(d), 0);
}

// Issue 13's 5 s stall (bench/scheduler --suite scale,
// bench/results/2026-11-26-scheduler-before-turns.md): a 20 ms kernel's bootstrap probe measured
// its wall time beside 20 contexts, 400 ms, and that measurement, charged at the new 4 % grant (the
// probe's ChargeAfter, or a launch charged the measurement until the controller published the
// member's charge), ran the budget 10 s ahead. Once the charge (20 ms) is known, the gate's
// pull-back (compute_gate.cc Admit: burst plus one launch of the largest member charge at the
// current rate) leaves at most one 20 ms launch at 4 % (0.5 s) to wait, not the measurement's 10 s.

TEST_F(ComputeUsageTest, ABudgetRunAheadOnABootstrapMeasurementIsPulledBackToTheRefinedCharge) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->usage().Budget(d, slot);
  constexpr uint32_t kGrantBp = 400;
  constexpr int64_t kMeasured = 400'000'000;
  constexpr int64_t kCharge = 20'000'000;
  const int64_t start = 1'000'000'000;
  budget.RecordProbe(kMeasured);
  budget.ChargeAfter(start, PacedIntervalBpNs(kMeasured, kGrantBp));
  seg->usage().PublishSlotCharge(slot, d, kCharge);
  const int64_t now = start + kMeasured;
  const int64_t interval = PacedIntervalBpNs(budget.charge_ns(), kGrantBp);
  ASSERT_GT(budget.AheadBy(now), kPacerBurstNs + interval);
  // What Admit does on its rare path.
  const int64_t known = std::max(budget.charge_ns(), seg->usage().MaxMemberCharge(d));
  budget.ClampAhead(now, kPacerBurstNs + PacedIntervalBpNs(known, kGrantBp));
  EXPECT_LE(budget.AheadBy(now), kPacerBurstNs + interval);
  EXPECT_LE(budget.TryAdmit(now, interval, kPacerBurstNs), interval);
}

}  // namespace
}  // namespace gpuslice::segment_test
