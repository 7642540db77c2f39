#include "shm/compute_schedule.h"

#include "shm/group_segment_test_fixture.h"

namespace gpuslice::segment_test {
namespace {

class ComputeScheduleTest : public SegmentTest {};

TEST_F(ComputeScheduleTest, LaunchesArePacedAtTheLowerOfLimitAndGrant) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int e = *seg->AttachDevice("GPU-ffffffff-1111-2222-3333-444444444444");
  EXPECT_EQ(seg->schedule().PacedRateBp(d), kFullGrantBp);
  EXPECT_EQ(seg->schedule().ComputeLimitedMask(), 0u);

  seg->schedule().SetComputeGrant(d, 2500);  // the scheduler's share alone paces
  EXPECT_EQ(seg->schedule().PacedRateBp(d), 2500u);
  EXPECT_EQ(seg->schedule().ComputeLimitedMask(), 1u << d);
  seg->SetComputeLimit(d, 20);  // a limit below the grant wins
  EXPECT_EQ(seg->schedule().PacedRateBp(d), 2000u);
  seg->schedule().SetComputeGrant(d, 0);  // no grant: the limit alone
  EXPECT_EQ(seg->schedule().PacedRateBp(d), 2000u);
  seg->SetComputeLimit(d, kUnlimitedPercent);
  EXPECT_EQ(seg->schedule().ComputeLimitedMask(), 0u);

  seg->schedule().SetComputeGrant(e, kFullGrantBp + 5);  // clamped: the whole device is not paced
  EXPECT_EQ(seg->schedule().ComputeGrant(e), kFullGrantBp);
  EXPECT_EQ(seg->schedule().ComputeLimitedMask(), 0u);

  seg->schedule().SetComputeGrant(e, 100);
  seg->schedule().SetComputeBurst(e, 1'000'000);
  EXPECT_EQ(seg->Snapshot().devices[e].grant_bp, 100u);
  EXPECT_EQ(seg->Snapshot().devices[e].burst_ns, 1'000'000);
  seg->schedule().ClearSchedule();  // a member taking control back from the daemon
  EXPECT_EQ(seg->schedule().ComputeGrant(e), 0u);
  EXPECT_EQ(seg->schedule().ComputeBurst(e), 0);
  EXPECT_EQ(seg->schedule().ComputeLimitedMask(), 0u);
}

TEST_F(ComputeScheduleTest, PausingPacesEveryDeviceAndResumingWakesWaiters) {
  auto seg = OpenGroup();
  auto other = OpenGroup();  // a member's own handle
  const int d = *seg->AttachDevice(kUuid);
  seg->schedule().SetPaused(true);
  EXPECT_TRUE(other->schedule().Paused());
  EXPECT_TRUE(other->Snapshot().paused);
  EXPECT_NE(other->schedule().ComputeLimitedMask() & (1u << d), 0u);

  // A launch waiting on the change word is woken by the resume, well before
  // its own timeout.
  std::atomic<bool> woke{false};
  const uint32_t seen = other->ChangeWord();
  std::thread waiter([&] {
    while (other->schedule().Paused()) other->WaitForChange(seen, 60'000'000'000);
    woke = true;
  });
  seg->schedule().SetPaused(false);
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(other->schedule().ComputeLimitedMask(), 0u);
  EXPECT_NE(other->ChangeWord(), seen);
}

TEST_F(ComputeScheduleTest, CountersSayWhatTheSchedulerReads) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(seg->schedule().Counters(d).share_bp, -1);  // never measured
  DeviceCompute& c = testing::RawCompute(*seg, d);
  std::atomic_ref<uint64_t>(c.launches).store(7);
  std::atomic_ref<uint64_t>(c.waits).store(3);
  std::atomic_ref<uint64_t>(c.wait_ns).store(900);
  seg->usage().PublishEstimate(d, {.charge_ns = 250, .share_bp = 4100, .measured_at_ns = 1});
  const ComputeCounters got = seg->schedule().Counters(d);
  EXPECT_EQ(got.launches, 7u);
  EXPECT_EQ(got.waits, 3u);
  EXPECT_EQ(got.wait_ns, 900u);
  EXPECT_EQ(got.charge_ns, 250);
  EXPECT_EQ(got.share_bp, 4100);
  // A share alone keeps the charge (0: no word on it).
  seg->usage().PublishEstimate(d, {.charge_ns = 0, .share_bp = 3900, .measured_at_ns = 2});
  EXPECT_EQ(seg->schedule().Counters(d).charge_ns, 250);
  EXPECT_EQ(seg->schedule().Counters(d).share_bp, 3900);
}

// The scheduler's turns: the device is on the paced path while a plan is
// set, a change wakes the waiting launches, the next plan takes effect at
// its epoch, and a member taking control back clears them.

TEST_F(ComputeScheduleTest, TurnsPaceTheDeviceTakeEffectAtTheirEpochAndAreClearedWithTheSchedule) {
  auto seg = OpenGroup();
  auto other = OpenGroup();  // a member's own handle
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(other->schedule().TurnAt(d, 0).period_ns, 0);
  const uint32_t seen = other->ChangeWord();
  const TurnPlan now{.epoch_ns = 1000, .period_ns = 100, .begin_ns = 0, .length_ns = 40};
  const TurnPlan later{.epoch_ns = 5000, .period_ns = 200, .begin_ns = 50, .length_ns = 60};
  seg->schedule().SetTurns(d, now, later);
  EXPECT_NE(other->ChangeWord(), seen);
  EXPECT_EQ(other->schedule().ComputeLimitedMask(), 1u << d);
  EXPECT_EQ(other->schedule().TurnAt(d, 4999).period_ns, 100);
  EXPECT_EQ(other->schedule().TurnAt(d, 5000).period_ns, 200);
  EXPECT_EQ(other->schedule().TurnAt(d, 5000).begin_ns, 50);
  const auto [current, next] = other->schedule().Turns(d);
  EXPECT_EQ(current.length_ns, 40);
  EXPECT_EQ(next.epoch_ns, 5000);
  seg->schedule().SetQueueBound(d, 1'000'000);
  EXPECT_EQ(other->schedule().QueueBound(d), 1'000'000);
  seg->schedule().ClearSchedule();
  EXPECT_EQ(other->schedule().TurnAt(d, 6000).period_ns, 0);
  EXPECT_EQ(other->schedule().QueueBound(d), 0);
  EXPECT_EQ(other->schedule().ComputeLimitedMask(), 0u);
}

// A writer that died inside the turns' sequence lock leaves them odd: readers
// do not wait for it (they read no turns) and the next writer takes over.

TEST_F(ComputeScheduleTest, ATurnWriterThatDiedInsideStopsNoReader) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->schedule().SetTurns(d, {.epoch_ns = 1, .period_ns = 100, .begin_ns = 0, .length_ns = 50},
                           {});
  std::atomic_ref<uint32_t>(testing::RawCompute(*seg, d).turn_seq).fetch_add(1);  // inside, forever
  EXPECT_EQ(seg->schedule().TurnAt(d, 10).period_ns, 0);
  seg->schedule().SetTurns(d, {.epoch_ns = 1, .period_ns = 300, .begin_ns = 0, .length_ns = 50},
                           {});
  EXPECT_EQ(seg->schedule().TurnAt(d, 10).period_ns, 300);
}

// What a member's launch gate measured adds up in its slot, and a new owner
// of the slot starts from nothing.

}  // namespace
}  // namespace gpuslice::segment_test
