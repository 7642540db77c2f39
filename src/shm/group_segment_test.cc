#include "shm/group_segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "shm/ledger_eviction_testing.h"
#include "shm/raw_layout_testing.h"

namespace gpuslice {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";

// Ledger lock deadlines: short, so that a test evicting a holder runs fast;
// long, for a locker that must never evict (far beyond any test's waits).
constexpr int64_t kShortDeadlineNs = 20'000'000;
constexpr int64_t kStoppedDeadlineNs = 50'000'000;
constexpr int64_t kLongDeadlineNs = 10'000'000'000;

// Waits until `done()` holds, at most `timeout_ns`; false if it never did.
template <typename F>
bool WaitUntil(F done, int64_t timeout_ns = 10'000'000'000) {
  const int64_t until = MonotonicNs() + timeout_ns;
  while (!done()) {
    if (MonotonicNs() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

uint64_t Shared(const uint64_t& field) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(field)).load();
}

// The slots' sum on `dev` (invariant 1: memory_used never below it).
uint64_t SlotsSum(const GroupSegment& seg, int dev) {
  uint64_t sum = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) sum += seg.SlotMemory(s, dev);
  return sum;
}

// A forked child, killed (whether stopped or running) and reaped unless the
// test reaped it itself (then it sets `pid` to -1).
struct Child {
  explicit Child(pid_t p) : pid(p) {}
  ~Child() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid;
};

class GroupSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> OpenGroup(const char* group = "g1") {
    auto seg = GroupSegment::Open(dir_, group, true);
    EXPECT_TRUE(seg.ok()) << seg.status().ToString();
    return seg.ok() ? std::move(seg).value() : nullptr;
  }

  // Runs `child` in a forked process that then dies with SIGKILL (no cleanup);
  // waits for it. `child` may signal readiness by writing to the pipe.
  template <typename F>
  void InChildThenKill(F child) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      child();
      raise(SIGKILL);
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
  }

  std::string dir_;
};

TEST_F(GroupSegmentTest, CreatesAValidSegmentAndListsIt) {
  auto seg = OpenGroup("pod-abc");
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(testing::RawLayout(*seg).header.magic, kGroupSegmentMagic);
  EXPECT_EQ(testing::RawLayout(*seg).header.size, sizeof(GroupSegmentLayout));
  EXPECT_STREQ(testing::RawLayout(*seg).group, "pod-abc");
  EXPECT_EQ(GroupSegment::ListGroups(dir_), std::vector<std::string>{"pod-abc"});
  EXPECT_EQ(GroupSegment::Open(dir_, "other", false).status().code(), StatusCode::kNotFound);
}

TEST_F(GroupSegmentTest, DevicesAreSharedByUuidAndLimitsOnlyLowerOnAttach) {
  auto a = OpenGroup();
  auto b = OpenGroup();
  auto da = a->AttachDevice(kUuid);
  ASSERT_TRUE(da.ok());
  auto other = a->AttachDevice("GPU-ffffffff-1111-2222-3333-444444444444");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *da);
  auto db = b->AttachDevice(kUuid);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*da, *db);
  EXPECT_EQ(a->MemoryLimit(*da), kUnlimitedBytes);
  a->LowerMemoryLimit(*da, 100 * kMiB);
  b->LowerMemoryLimit(*db, 200 * kMiB);  // higher: ignored
  EXPECT_EQ(b->MemoryLimit(*db), 100 * kMiB);
  b->SetMemoryLimit(*db, 300 * kMiB);  // an operator's explicit change may raise it
  EXPECT_EQ(a->MemoryLimit(*da), 300 * kMiB);
  EXPECT_FALSE(a->AttachDevice("").ok());
}

TEST_F(GroupSegmentTest, LaunchesArePacedAtTheLowerOfLimitAndGrant) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int e = *seg->AttachDevice("GPU-ffffffff-1111-2222-3333-444444444444");
  EXPECT_EQ(seg->PacedRateBp(d), kFullGrantBp);
  EXPECT_EQ(seg->ComputeLimitedMask(), 0u);

  seg->SetComputeGrant(d, 2500);  // the scheduler's share alone paces
  EXPECT_EQ(seg->PacedRateBp(d), 2500u);
  EXPECT_EQ(seg->ComputeLimitedMask(), 1u << d);
  seg->SetComputeLimit(d, 20);  // a limit below the grant wins
  EXPECT_EQ(seg->PacedRateBp(d), 2000u);
  seg->SetComputeGrant(d, 0);  // no grant: the limit alone
  EXPECT_EQ(seg->PacedRateBp(d), 2000u);
  seg->SetComputeLimit(d, kUnlimitedPercent);
  EXPECT_EQ(seg->ComputeLimitedMask(), 0u);

  seg->SetComputeGrant(e, kFullGrantBp + 5);  // clamped: the whole device is not paced
  EXPECT_EQ(seg->ComputeGrant(e), kFullGrantBp);
  EXPECT_EQ(seg->ComputeLimitedMask(), 0u);

  seg->SetComputeGrant(e, 100);
  seg->SetComputeBurst(e, 1'000'000);
  EXPECT_EQ(seg->Snapshot().devices[e].grant_bp, 100u);
  EXPECT_EQ(seg->Snapshot().devices[e].burst_ns, 1'000'000);
  seg->ClearSchedule();  // a member taking control back from the daemon
  EXPECT_EQ(seg->ComputeGrant(e), 0u);
  EXPECT_EQ(seg->ComputeBurst(e), 0);
  EXPECT_EQ(seg->ComputeLimitedMask(), 0u);
}

TEST_F(GroupSegmentTest, PausingPacesEveryDeviceAndResumingWakesWaiters) {
  auto seg = OpenGroup();
  auto other = OpenGroup();  // a member's own handle
  const int d = *seg->AttachDevice(kUuid);
  seg->SetPaused(true);
  EXPECT_TRUE(other->Paused());
  EXPECT_TRUE(other->Snapshot().paused);
  EXPECT_NE(other->ComputeLimitedMask() & (1u << d), 0u);

  // A launch waiting on the change word is woken by the resume, well before
  // its own timeout.
  std::atomic<bool> woke{false};
  const uint32_t seen = other->ChangeWord();
  std::thread waiter([&] {
    while (other->Paused()) other->WaitForChange(seen, 60'000'000'000);
    woke = true;
  });
  seg->SetPaused(false);
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(other->ComputeLimitedMask(), 0u);
  EXPECT_NE(other->ChangeWord(), seen);
}

TEST_F(GroupSegmentTest, CountersSayWhatTheSchedulerReads) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(seg->Counters(d).share_bp, -1);  // never measured
  DeviceCompute& c = testing::RawCompute(*seg, d);
  std::atomic_ref<uint64_t>(c.launches).store(7);
  std::atomic_ref<uint64_t>(c.waits).store(3);
  std::atomic_ref<uint64_t>(c.wait_ns).store(900);
  seg->PublishEstimate(d, {.charge_ns = 250, .share_bp = 4100, .measured_at_ns = 1});
  const GroupSegment::ComputeCounters got = seg->Counters(d);
  EXPECT_EQ(got.launches, 7u);
  EXPECT_EQ(got.waits, 3u);
  EXPECT_EQ(got.wait_ns, 900u);
  EXPECT_EQ(got.charge_ns, 250);
  EXPECT_EQ(got.share_bp, 4100);
  // A share alone keeps the charge (0: no word on it).
  seg->PublishEstimate(d, {.charge_ns = 0, .share_bp = 3900, .measured_at_ns = 2});
  EXPECT_EQ(seg->Counters(d).charge_ns, 250);
  EXPECT_EQ(seg->Counters(d).share_bp, 3900);
}

// The scheduler's turns: the device is on the paced path while a plan is
// set, a change wakes the waiting launches, the next plan takes effect at
// its epoch, and a member taking control back clears them.
TEST_F(GroupSegmentTest, TurnsPaceTheDeviceTakeEffectAtTheirEpochAndAreClearedWithTheSchedule) {
  auto seg = OpenGroup();
  auto other = OpenGroup();  // a member's own handle
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(other->TurnAt(d, 0).period_ns, 0);
  const uint32_t seen = other->ChangeWord();
  const TurnPlan now{.epoch_ns = 1000, .period_ns = 100, .begin_ns = 0, .length_ns = 40};
  const TurnPlan later{.epoch_ns = 5000, .period_ns = 200, .begin_ns = 50, .length_ns = 60};
  seg->SetTurns(d, now, later);
  EXPECT_NE(other->ChangeWord(), seen);
  EXPECT_EQ(other->ComputeLimitedMask(), 1u << d);
  EXPECT_EQ(other->TurnAt(d, 4999).period_ns, 100);
  EXPECT_EQ(other->TurnAt(d, 5000).period_ns, 200);
  EXPECT_EQ(other->TurnAt(d, 5000).begin_ns, 50);
  const auto [current, next] = other->Turns(d);
  EXPECT_EQ(current.length_ns, 40);
  EXPECT_EQ(next.epoch_ns, 5000);
  seg->SetQueueBound(d, 1'000'000);
  EXPECT_EQ(other->QueueBound(d), 1'000'000);
  seg->ClearSchedule();
  EXPECT_EQ(other->TurnAt(d, 6000).period_ns, 0);
  EXPECT_EQ(other->QueueBound(d), 0);
  EXPECT_EQ(other->ComputeLimitedMask(), 0u);
}

// A writer that died inside the turns' sequence lock leaves them odd: readers
// do not wait for it (they read no turns) and the next writer takes over.
TEST_F(GroupSegmentTest, ATurnWriterThatDiedInsideStopsNoReader) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->SetTurns(d, {.epoch_ns = 1, .period_ns = 100, .begin_ns = 0, .length_ns = 50}, {});
  std::atomic_ref<uint32_t>(testing::RawCompute(*seg, d).turn_seq).fetch_add(1);  // inside, forever
  EXPECT_EQ(seg->TurnAt(d, 10).period_ns, 0);
  seg->SetTurns(d, {.epoch_ns = 1, .period_ns = 300, .begin_ns = 0, .length_ns = 50}, {});
  EXPECT_EQ(seg->TurnAt(d, 10).period_ns, 300);
}

// What a member's launch gate measured adds up in its slot, and a new owner
// of the slot starts from nothing.
TEST_F(GroupSegmentTest, ASlotsMeasuredBusyTimeAddsUpAndGoesWithTheSlot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->Budget(d, slot);
  budget.AddBusy(3000, 3);
  budget.AddBusy(500, 1);
  budget.AddBusy(-5, 1);  // nothing measured
  EXPECT_EQ(seg->SlotBusyOf(slot, d).busy_ns, 3500u);
  EXPECT_EQ(seg->SlotBusyOf(slot, d).launches, 4u);
  seg->Leave(slot);
  EXPECT_EQ(seg->SlotBusyOf(slot, d).busy_ns, 0u);
}

// A member's wait is seen while it lasts (not only once it ends), and a
// member that leaves (or dies) mid-wait leaves no wait behind.
TEST_F(GroupSegmentTest, AWaitUnderWayIsCountedUntilItEndsOrItsMemberGoes) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->Budget(d, slot);
  EXPECT_EQ(seg->Counters(d).waiting, 0u);
  budget.BeginWait();
  budget.BeginWait();                       // two threads of the member
  EXPECT_EQ(seg->Counters(d).waiting, 1u);  // members, not threads
  EXPECT_EQ(seg->Counters(d).waits, 0u);    // nothing has ended yet
  budget.EndWait();
  EXPECT_EQ(seg->Counters(d).waiting, 1u);
  budget.EndWait();
  EXPECT_EQ(seg->Counters(d).waiting, 0u);
  budget.BeginWait();
  seg->Leave(slot);
  EXPECT_EQ(seg->Counters(d).waiting, 0u);
}

TEST_F(GroupSegmentTest, EachMemberHasItsOwnComputeAndANewOwnerStartsAfresh) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->Budget(d, slot);
  budget.CountLaunch();
  budget.RecordProbe(3000);
  seg->PublishSlotCharge(slot, d, 2000);
  EXPECT_EQ(seg->SlotLaunches(slot, d), 1u);
  EXPECT_EQ(seg->Launches(d), 1u);
  EXPECT_EQ(budget.charge_ns(), 2000);
  EXPECT_EQ(budget.probe_ns(), 3000);
  const std::vector<GroupSegment::MemberRef> members = seg->Members();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].slot, slot);
  EXPECT_EQ(members[0].pid, getpid());
  EXPECT_GT(members[0].joined_ns, 0);
  // A value another member wrote out of range is bounded when read.
  std::atomic_ref<int64_t>(testing::RawLayout(*seg).slot_compute[slot][d].charge_ns).store(-1);
  EXPECT_EQ(seg->SlotCharge(slot, d), 0);
  seg->PublishSlotCharge(slot, d, INT64_MAX);
  EXPECT_EQ(seg->SlotCharge(slot, d), kMaxChargeNs);
  // Leaving clears the slot's compute: its next owner measures its own.
  seg->Leave(slot);
  EXPECT_EQ(*seg->Join(getpid(), 1, "me"), slot);
  EXPECT_EQ(seg->SlotLaunches(slot, d), 0u);
  EXPECT_EQ(seg->SlotCharge(slot, d), 0);
  EXPECT_EQ(seg->Budget(d, slot).probe_ns(), 0);
  EXPECT_EQ(seg->Launches(d), 1u);  // the group's count stays
}

// A budget run ahead at an older, lower rate (a 1 % grant) is pulled back
// to what the current rate allows; one within it is left alone.
TEST_F(GroupSegmentTest, ABudgetRunAheadIsPulledBackToTheCurrentRate) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->Budget(d, slot);
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
TEST_F(GroupSegmentTest, MaxMemberChargeIsTheLargestOfTheLiveMembers) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  EXPECT_EQ(seg->MaxMemberCharge(d), 0);
  const int a = *seg->Join(getpid(), 1, "a");
  seg->Budget(d, a).RecordProbe(9000);
  EXPECT_EQ(seg->MaxMemberCharge(d), 9000);  // measured, no charge yet
  seg->PublishSlotCharge(a, d, 2000);
  EXPECT_EQ(seg->MaxMemberCharge(d), 2000);  // refined
  auto other = OpenGroup();                  // a second member
  const int b = *other->Join(getpid(), 2, "b");
  other->Budget(d, b).RecordProbe(5000);
  EXPECT_EQ(seg->MaxMemberCharge(d), 5000);  // b's measurement, larger than a's charge
  other->PublishSlotCharge(b, d, 7000);
  EXPECT_EQ(seg->MaxMemberCharge(d), 7000);  // a charge refined up counts as well
  other->Leave(b);
  seg->Leave(a);  // no live member: nothing
  EXPECT_EQ(seg->MaxMemberCharge(d), 0);
}

// Issue 13's 5 s stall (bench/scheduler --suite scale,
// bench/results/2026-11-26-scheduler-before-turns.md): a 20 ms kernel's bootstrap probe measured
// its wall time beside 20 contexts, 400 ms, and that measurement, charged at the new 4 % grant (the
// probe's ChargeAfter, or a launch charged the measurement until the controller published the
// member's charge), ran the budget 10 s ahead. Once the charge (20 ms) is known, the gate's
// pull-back (compute_gate.cc Admit: burst plus one launch of the largest member charge at the
// current rate) leaves at most one 20 ms launch at 4 % (0.5 s) to wait, not the measurement's 10 s.
TEST_F(GroupSegmentTest, ABudgetRunAheadOnABootstrapMeasurementIsPulledBackToTheRefinedCharge) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int slot = *seg->Join(getpid(), 1, "me");
  ComputeBudget budget = seg->Budget(d, slot);
  constexpr uint32_t kGrantBp = 400;
  constexpr int64_t kMeasured = 400'000'000;
  constexpr int64_t kCharge = 20'000'000;
  const int64_t start = 1'000'000'000;
  budget.RecordProbe(kMeasured);
  budget.ChargeAfter(start, PacedIntervalBpNs(kMeasured, kGrantBp));
  seg->PublishSlotCharge(slot, d, kCharge);
  const int64_t now = start + kMeasured;
  const int64_t interval = PacedIntervalBpNs(budget.charge_ns(), kGrantBp);
  ASSERT_GT(budget.AheadBy(now), kPacerBurstNs + interval);
  // What Admit does on its rare path.
  const int64_t known = std::max(budget.charge_ns(), seg->MaxMemberCharge(d));
  budget.ClampAhead(now, kPacerBurstNs + PacedIntervalBpNs(known, kGrantBp));
  EXPECT_LE(budget.AheadBy(now), kPacerBurstNs + interval);
  EXPECT_LE(budget.TryAdmit(now, interval, kPacerBurstNs), interval);
}

TEST_F(GroupSegmentTest, ASegmentOfAnotherLayoutVersionIsRefused) {
  { auto seg = OpenGroup(); }
  {
    auto seg = GroupSegment::Open(dir_, "g1", false);
    ASSERT_TRUE(seg.ok());
    testing::RawLayout(**seg).header.version =
        kGroupSegmentVersion - 1;  // v5: no count of queued launches
  }
  EXPECT_EQ(GroupSegment::Open(dir_, "g1", false).status().code(), StatusCode::kFailedPrecondition);
  auto rebuilt = OpenGroup();  // a member re-initialises it
  EXPECT_EQ(testing::RawLayout(*rebuilt).header.version, kGroupSegmentVersion);
  EXPECT_EQ(testing::RawLayout(*rebuilt).header.size, sizeof(GroupSegmentLayout));
}

TEST_F(GroupSegmentTest, MembersAndTheDaemonAreAskedForNotRead) {
  auto seg = OpenGroup();
  EXPECT_FALSE(seg->IsLiveMember(getpid()));
  ASSERT_TRUE(seg->Join(getpid(), 1, "me").ok());
  EXPECT_TRUE(seg->IsLiveMember(getpid()));
  EXPECT_FALSE(seg->IsLiveMember(0));
  EXPECT_FALSE(seg->IsLiveMember(getpid() + 100000));
  EXPECT_EQ(seg->DaemonPid(), 0);
  seg->BeatAsDaemon(4321, 10);
  EXPECT_EQ(seg->DaemonPid(), 4321);
  seg->EndDaemonClaim(4321);
  EXPECT_EQ(seg->DaemonPid(), 0);
}

TEST_F(GroupSegmentTest, ReserveIsAllOrNothingAgainstTheLimit) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  EXPECT_TRUE(seg->Reserve(s, d, 60 * kMiB));
  EXPECT_FALSE(seg->Reserve(s, d, 41 * kMiB));
  EXPECT_EQ(seg->MemoryUsed(d), 60 * kMiB);
  EXPECT_TRUE(seg->Reserve(s, d, 40 * kMiB));
  EXPECT_EQ(seg->MemoryUsed(d), 100 * kMiB);
  EXPECT_FALSE(seg->Reserve(s, d, 1));
  seg->Release(s, d, 30 * kMiB);
  EXPECT_EQ(seg->MemoryUsed(d), 70 * kMiB);
  EXPECT_EQ(seg->SlotMemory(s, d), 70 * kMiB);
  seg->Release(s, d, 1000 * kMiB);  // never below zero
  EXPECT_EQ(seg->MemoryUsed(d), 0u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].alloc_failures, 2u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].memory_peak, 100 * kMiB);
}

// The two steps apart (the limiter's ledger orders its own slot's changes):
// the device's count is all-or-nothing against the limit and leaves the slot
// alone; the slot's count never goes below zero.
TEST_F(GroupSegmentTest, TheDeviceAndSlotStepsApartKeepTheirContracts) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  EXPECT_TRUE(seg->ReserveDevice(d, 60 * kMiB));
  EXPECT_FALSE(seg->ReserveDevice(d, 41 * kMiB));
  EXPECT_EQ(seg->MemoryUsed(d), 60 * kMiB);
  EXPECT_EQ(seg->SlotMemory(s, d), 0u);
  seg->AddToOwnSlot(s, d, 60 * kMiB);
  EXPECT_EQ(seg->SlotMemory(s, d), 60 * kMiB);
  seg->ChargeDevice(d, 50 * kMiB);  // whatever the limit
  EXPECT_EQ(seg->MemoryUsed(d), 110 * kMiB);
  EXPECT_EQ(seg->TakeFromOwnSlot(s, d, 20 * kMiB), 20 * kMiB);
  EXPECT_EQ(seg->TakeFromOwnSlot(s, d, 1000 * kMiB), 40 * kMiB);  // never below zero
  EXPECT_EQ(seg->SlotMemory(s, d), 0u);
  seg->ReleaseDevice(d, 1000 * kMiB);
  EXPECT_EQ(seg->MemoryUsed(d), 0u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].alloc_failures, 1u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].memory_peak, 110 * kMiB);
}

TEST_F(GroupSegmentTest, LoweringBelowUsageRefusesNewAllocationsUntilUsageFalls) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int s = *seg->Join(getpid(), 1, "test");
  ASSERT_TRUE(seg->Reserve(s, d, 80 * kMiB));
  seg->SetMemoryLimit(d, 50 * kMiB);
  EXPECT_FALSE(seg->Reserve(s, d, 1));
  seg->Release(s, d, 40 * kMiB);
  EXPECT_TRUE(seg->Reserve(s, d, 10 * kMiB));
}

TEST_F(GroupSegmentTest, ConcurrentReservationsNeverOvershoot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 1000 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (seg->Reserve(s, d, 3 * kMiB)) {
          granted.fetch_add(1);
          if (i % 3 == 0) {
            seg->Release(s, d, 3 * kMiB);
            granted.fetch_sub(1);
          }
        }
        EXPECT_LE(seg->MemoryUsed(d), 1000 * kMiB);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seg->MemoryUsed(d), uint64_t{3} * granted.load() * kMiB);
  EXPECT_LE(seg->MemoryUsed(d), 1000 * kMiB);
  EXPECT_GT(seg->MemoryUsed(d), 1000 * kMiB - 3 * kMiB);  // the quota did fill
}

TEST_F(GroupSegmentTest, ADeadMembersMemoryIsReclaimed) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->Reserve(mine, d, 10 * kMiB));
  InChildThenKill([&] {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->Reserve(*s, d, 80 * kMiB)) _exit(1);
  });
  EXPECT_EQ(seg->MemoryUsed(d), 90 * kMiB);
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(seg->MemoryUsed(d), 10 * kMiB);
  EXPECT_EQ(seg->ReapDead(), 0);
  EXPECT_EQ(seg->SlotMemory(mine, d), 10 * kMiB);  // the live member keeps its own
}

TEST_F(GroupSegmentTest, AFailingReservationReclaimsTheDeadFirst) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  InChildThenKill([&] {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->Reserve(*s, d, 90 * kMiB)) _exit(1);
  });
  const int mine = *seg->Join(getpid(), 1, "parent");
  EXPECT_TRUE(seg->Reserve(mine, d, 50 * kMiB));
  EXPECT_EQ(seg->MemoryUsed(d), 50 * kMiB);
}

TEST_F(GroupSegmentTest, LiveMembersInOtherProcessesAreNotReaped) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->Reserve(*s, d, 5 * kMiB)) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    if (read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(seg->ReapDead(), 0);
  EXPECT_EQ(seg->MemoryUsed(d), 5 * kMiB);
  int live = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) live += seg->SlotLive(s) ? 1 : 0;
  EXPECT_EQ(live, 1);
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(seg->MemoryUsed(d), 0u);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
}

TEST_F(GroupSegmentTest, AHolderKilledInsideTheLedgerLockDoesNotWedgeTheGroup) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kShortDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->Reserve(mine, d, 10 * kMiB));
  InChildThenKill([&] {
    // Dies holding the lock, having left the slots' sum above the group's
    // count (which the ledger's own steps never do: invariant 1).
    const testing::LedgerLock::Hold hold(*seg);
    testing::RawLayout(*seg).slots[mine].memory[d] += 7 * kMiB;
    raise(SIGKILL);  // inside the hold
  });
  // Reservations take no lock: not wedged.
  EXPECT_TRUE(seg->Reserve(mine, d, 1 * kMiB));
  EXPECT_EQ(seg->MemoryUsed(d), 11 * kMiB);
  // The next locker (here: a new device) evicts the dead holder once the
  // deadline has passed, and repairs the ledger first.
  ASSERT_TRUE(seg->AttachDevice("GPU-00000000-1111-2222-3333-555555555555").ok());
  EXPECT_EQ(seg->MemoryUsed(d), 18 * kMiB);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
}

// Fault: a tenant (its own process and mapping) is killed while it holds the
// ledger lock, half way through leaving: its slot's bytes are gone but the
// group's count still holds them. The next locker evicts the dead holder
// once the deadline has passed instead of hanging; the dead member's slot is
// reclaimed; and the orphaned charge, which no live member may lower while
// charges can be in flight, is dropped once no member is left, so the next
// tenant gets the whole limit.
TEST_F(GroupSegmentTest, ATenantKilledHoldingTheLockIsRecoveredAndItsChargeRepaired) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kShortDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  seg->SetMemoryLimit(d, 64 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->Reserve(mine, d, 10 * kMiB));
  int tenant_slot[2];
  ASSERT_EQ(pipe(tenant_slot), 0);
  InChildThenKill([&] {
    auto own = GroupSegment::Open(dir_, "g1", true);
    if (!own.ok()) _exit(1);
    const int dev = *(*own)->AttachDevice(kUuid);
    const int slot = *(*own)->Join(getpid(), 2, "tenant");
    if (!(*own)->Reserve(slot, dev, 20 * kMiB)) _exit(1);
    (void)!write(tenant_slot[1], &slot, sizeof slot);
    // ClearSlotLocked's first step (the slot's bytes), under the lock, then death.
    const testing::LedgerLock::Hold hold(**own);
    testing::RawLayout(**own).slots[slot].memory[dev] = 0;
    raise(SIGKILL);  // here, with the segment still mapped (not after `own` unmaps it)
  });
  int slot = -1;
  ASSERT_EQ(read(tenant_slot[0], &slot, sizeof slot), static_cast<ssize_t>(sizeof slot));
  close(tenant_slot[0]);
  close(tenant_slot[1]);
  EXPECT_EQ(seg->MemoryUsed(d), 30 * kMiB);
  // The dead holder is reaped under the lock taken from it (this would hang
  // on a lock no one can take back); its 20 MiB stay counted while a member
  // lives.
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(testing::RawLayout(*seg).slots[slot].owner_pid, 0);
  EXPECT_EQ(seg->MemoryUsed(d), 30 * kMiB);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  {
    const testing::LedgerLock::Hold again(*seg);  // free again: taken at once
    EXPECT_TRUE(again.held());
  }
  EXPECT_EQ(testing::RawLayout(*seg).ledger_lock, 0u);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  // The last member leaves: the orphaned charge goes with it.
  seg->Release(mine, d, 10 * kMiB);
  seg->Leave(mine);
  EXPECT_EQ(seg->MemoryUsed(d), 0u);
  const int next = *seg->Join(getpid(), 3, "next");
  EXPECT_TRUE(seg->Reserve(next, d, 64 * kMiB));
}

// A member stopped (SIGSTOP: hostile, or under a debugger) while it holds
// the ledger lock: what an allocation does when it needs the lock (reaping a
// dead member to make room), a join and a device attach all complete once
// the deadline has passed; the holder is evicted once and the ledger is
// consistent. When the stopped member resumes, its release frees nothing: a
// hold taken after the eviction stays held, and a locker waiting for that
// hold keeps waiting for it.
TEST_F(GroupSegmentTest, AMemberStoppedHoldingTheLedgerLockIsEvictedAndItsLateReleaseFreesNothing) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kStoppedDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  seg->SetMemoryLimit(d, 64 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->Reserve(mine, d, 10 * kMiB));
  int joined[2], go[2];
  ASSERT_EQ(pipe(joined), 0);
  ASSERT_EQ(pipe(go), 0);
  Child child(fork());
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {
    auto own = GroupSegment::Open(dir_, "g1", true);
    if (!own.ok()) _exit(1);
    const auto dev = (*own)->AttachDevice(kUuid);
    const auto slot = (*own)->Join(getpid(), 3, "stopped");
    if (!dev.ok() || !slot.ok() || !(*own)->Reserve(*slot, *dev, 20 * kMiB)) _exit(2);
    char c = 1;
    if (write(joined[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    int code = 0;
    {
      const testing::LedgerLock::Hold hold(**own);
      raise(SIGSTOP);
      code = hold.held() ? 3 : 0;  // 3: not evicted while stopped
    }                              // its late release
    _exit(code);
  }
  char c = 0;
  ASSERT_EQ(read(joined[0], &c, 1), 1);
  InChildThenKill([&] {  // a dead member whose 30 MiB only reaping gives back
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "dead");
    if (!s.ok() || !seg->Reserve(*s, d, 30 * kMiB)) _exit(1);
  });
  ASSERT_EQ(write(go[1], &c, 1), 1);
  for (int fd : {joined[0], joined[1], go[0], go[1]}) close(fd);
  int status = 0;
  ASSERT_EQ(waitpid(child.pid, &status, WUNTRACED), child.pid);
  if (!WIFSTOPPED(status)) child.pid = -1;  // it ended (and is reaped) before it stopped
  ASSERT_TRUE(WIFSTOPPED(status)) << "the child failed first: status " << status;
  EXPECT_EQ(seg->MemoryUsed(d), 60 * kMiB);

  // Over the limit: the reservation reaps the dead member, under the lock it
  // takes from the stopped one.
  EXPECT_TRUE(seg->Reserve(mine, d, 30 * kMiB));
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  auto joiner = OpenGroup();
  testing::LedgerLock::SetDeadline(*joiner, kStoppedDeadlineNs);
  EXPECT_TRUE(joiner->Join(getpid(), 4, "joiner").ok());
  EXPECT_TRUE(seg->AttachDevice("GPU-00000000-1111-2222-3333-555555555555").ok());
  EXPECT_EQ(seg->ReapDead(), 0);  // a stopped member is alive
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  EXPECT_EQ(seg->MemoryUsed(d), 60 * kMiB);  // 40 of the parent's, 20 of the stopped member's
  EXPECT_EQ(seg->MemoryUsed(d), SlotsSum(*seg, d));

  // The parent holds the lock; a third locker (a thread with a handle of its
  // own and a deadline far off) waits for it; then the stopped member resumes
  // and releases.
  auto third = OpenGroup();
  testing::LedgerLock::SetDeadline(*third, kLongDeadlineNs);
  std::atomic<bool> third_holds{false};
  std::jthread waiter;  // declared before the hold: joined after it is released
  std::optional<testing::LedgerLock::Hold> held(std::in_place, *seg);
  ASSERT_TRUE(held->held());
  const uint64_t tickets = Shared(testing::RawLayout(*seg).ledger_tickets);
  waiter = std::jthread([&] {
    const testing::LedgerLock::Hold hold(*third);
    third_holds = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return Shared(testing::RawLayout(*seg).ledger_tickets) > tickets; }));
  ASSERT_EQ(kill(child.pid, SIGCONT), 0);
  ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
  child.pid = -1;
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1, 2: its setup failed; 3: it was not evicted";
  EXPECT_TRUE(held->held());  // the stopped member's release did not free it
  EXPECT_FALSE(third_holds.load());
  held.reset();
  waiter.join();
  EXPECT_TRUE(third_holds.load());
  EXPECT_EQ(Shared(testing::RawLayout(*seg).ledger_lock), 0u);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
}

// Within its deadline a holder is waited for, not evicted: a locker that
// waits behind it gets the lock when it is released, and nothing is counted.
// The holder keeps the lock for twice the default deadline (which a locker
// that ignored its own, far longer, one would have evicted it after).
TEST_F(GroupSegmentTest, ALockerWaitsForAHolderWithinTheDeadlineAndEvictsNoOne) {
  auto seg = OpenGroup();
  auto other = OpenGroup();
  testing::LedgerLock::SetDeadline(*other, kLongDeadlineNs);
  std::atomic<bool> waiter_holds{false};
  std::jthread waiter;  // declared before the hold: joined after it is released
  std::optional<testing::LedgerLock::Hold> held(std::in_place, *seg);
  const uint64_t tickets = Shared(testing::RawLayout(*seg).ledger_tickets);
  waiter = std::jthread([&] {
    const testing::LedgerLock::Hold hold(*other);
    waiter_holds = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return Shared(testing::RawLayout(*seg).ledger_tickets) > tickets; }));
  const int64_t until = MonotonicNs() + 2 * kLedgerLockDeadlineNs;
  while (MonotonicNs() < until) {
    ASSERT_TRUE(held->held());
    ASSERT_FALSE(waiter_holds.load());
    ASSERT_EQ(seg->Snapshot().ledger_evictions, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  held.reset();
  waiter.join();
  EXPECT_TRUE(waiter_holds.load());
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 0u);
  EXPECT_EQ(Shared(testing::RawLayout(*seg).ledger_lock), 0u);
}

// Several processes of several threads fill the group to its limit and free
// again, on the lock-free path: the count never passes the limit (its peak
// says so), the quota does fill, and every byte comes back.
TEST_F(GroupSegmentTest, ProcessesAndThreadsRacingAtTheLimitNeverOvershoot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  constexpr int kProcesses = 3;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      bool ok = seg->ReopenAfterFork().ok();
      auto s = seg->Join(getpid(), 10 + p, "racer");
      ok = ok && s.ok();
      std::atomic<bool> good{ok};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4 && ok; ++t) {
        threads.emplace_back([&] {
          for (int round = 0; round < 200; ++round) {
            int held = 0;
            while (held < 50 && seg->Reserve(*s, d, 7 * kMiB)) ++held;
            if (seg->MemoryUsed(d) > 100 * kMiB) good = false;
            for (int i = 0; i < held; ++i) seg->Release(*s, d, 7 * kMiB);
          }
        });
      }
      for (auto& th : threads) th.join();
      _exit(good && seg->SlotMemory(*s, d) == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const GroupSnapshot snap = seg->Snapshot();
  EXPECT_LE(snap.devices[0].memory_peak, 100 * kMiB);
  EXPECT_GE(snap.devices[0].memory_peak, 100 * kMiB - 7 * kMiB);  // the quota did fill
  EXPECT_EQ(seg->MemoryUsed(d), 0u);
}

TEST_F(GroupSegmentTest, ACorruptSegmentIsReinitialisedNotTrusted) {
  {
    auto seg = OpenGroup();
    const int d = *seg->AttachDevice(kUuid);
    seg->LowerMemoryLimit(d, 5 * kMiB);
    testing::RawLayout(*seg).header.magic = 0xdeadbeef;
  }
  auto seg = OpenGroup();
  EXPECT_EQ(testing::RawLayout(*seg).header.magic, kGroupSegmentMagic);
  EXPECT_EQ(seg->device_count(), 0);
  // A file of the wrong size is rebuilt too, and refused to readers.
  const std::string path = GroupSegment::PathFor(dir_, "g2");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "garbage", 7), 7);
  close(fd);
  EXPECT_EQ(GroupSegment::Open(dir_, "g2", false).status().code(), StatusCode::kFailedPrecondition);
  auto rebuilt = GroupSegment::Open(dir_, "g2", true);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_STREQ(testing::RawLayout(**rebuilt).group, "g2");
}

TEST_F(GroupSegmentTest, TheControllerRolePassesWhenItsHolderDies) {
  auto seg = OpenGroup();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok() || !seg->TryBecomeController()) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_FALSE(seg->TryBecomeController());
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(seg->WaitToBecomeController().ok());  // returns at once: the lock is free
  EXPECT_EQ(testing::RawLayout(*seg).controller_pid, getpid());
  close(ready[0]);
  close(ready[1]);
}

TEST_F(GroupSegmentTest, SlotsRunOutClearly) {
  auto seg = OpenGroup();
  // Every slot held by other open file descriptions of this process.
  std::vector<std::unique_ptr<GroupSegment>> members;
  for (int i = 0; i < kGroupMaxSlots; ++i) {
    members.push_back(OpenGroup());
    ASSERT_TRUE(members.back()->Join(getpid(), 1, "m").ok());
  }
  auto s = seg->Join(getpid(), 1, "late");
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("no free process slot"), std::string::npos);
  members.pop_back();  // one member leaves (its handle closes)
  EXPECT_TRUE(seg->Join(getpid(), 1, "late").ok());
}

TEST_F(GroupSegmentTest, AnAttachedGroupIsNeverCollected) {
  auto member = OpenGroup();
  const int64_t alive = member->LastAliveNs();
  // Far past any grace period, but a process (this one) is attached.
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, alive + 3'600'000'000'000);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_FALSE(*removed);
  EXPECT_EQ(GroupSegment::ListGroups(dir_), std::vector<std::string>{"g1"});
  // Observers do not attach: they keep nothing alive and see the member.
  auto observer = GroupSegment::Open(dir_, "g1", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_TRUE((*observer)->HasAttachedProcess());
}

TEST_F(GroupSegmentTest, AnAbandonedGroupIsCollectedOnlyAfterItsGrace) {
  int64_t last_alive = 0;
  {
    auto member = OpenGroup();
    member->Beat(member->LastAliveNs() + 5'000'000'000);  // a controller beat 5 s in
    last_alive = member->LastAliveNs();
  }  // the member exits
  auto observer = GroupSegment::Open(dir_, "g1", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_FALSE((*observer)->HasAttachedProcess());
  EXPECT_EQ((*observer)->LastAliveNs(), last_alive);
  constexpr int64_t kGrace = 600'000'000'000;
  auto kept = GroupSegment::RemoveIfAbandoned(dir_, "g1", kGrace, last_alive + kGrace - 1);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(*kept);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", kGrace, last_alive + kGrace);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_TRUE(GroupSegment::ListGroups(dir_).empty());
  auto again = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, last_alive + kGrace);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);  // already gone
}

TEST_F(GroupSegmentTest, AMemberKilledBySigkillNoLongerKeepsItsGroup) {
  InChildThenKill([&] {
    auto seg = GroupSegment::Open(dir_, "g1", true);
    if (!seg.ok() || !(*seg)->Join(getpid(), 1, "child").ok()) _exit(1);
  });
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
}

TEST_F(GroupSegmentTest, AForkedMemberKeepsTheGroupAfterItsParentLeaves) {
  auto seg = OpenGroup();
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  seg.reset();  // the parent's handle closes; the child's stays attached
  auto kept = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(*kept);
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
}

TEST_F(GroupSegmentTest, AttachersRacingTheCollectorNeverShareAnUnlinkedFile) {
  // Members come and go while a collector with no grace sweeps: every member
  // must end up in the file the path names (never in an unlinked one). An
  // opener the collector beats eight times in a row (a loaded machine
  // deschedules it between creating and attaching) is told Unavailable and
  // tries again: that is the contract, not a shared unlinked file.
  std::jthread collector([&](const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      (void)GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int attached = 0;
  while (attached < 300) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << attached << " of 300 attached";
    auto opened = GroupSegment::Open(dir_, "g1", true);
    if (!opened.ok()) {
      ASSERT_EQ(opened.status().code(), StatusCode::kUnavailable) << opened.status().ToString();
      continue;
    }
    ++attached;
    std::unique_ptr<GroupSegment> seg = std::move(opened).value();
    struct stat by_path {
    }, by_handle{};
    ASSERT_EQ(stat(seg->path().c_str(), &by_path), 0) << "attached segment was removed";
    const int fd = open(seg->path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fstat(fd, &by_handle), 0);
    close(fd);
    EXPECT_EQ(by_path.st_ino, by_handle.st_ino);
    EXPECT_TRUE(seg->Join(getpid(), 1, "m").ok());
  }
}

TEST_F(GroupSegmentTest, AFileThatIsNotASegmentIsCollectedAtOnce) {
  const std::string path = GroupSegment::PathFor(dir_, "junk");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "garbage", 7), 7);
  close(fd);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "junk", 600'000'000'000, 0);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
}

TEST_F(GroupSegmentTest, ASegmentIsForItsCreatorsUidAndGidOnly) {
  auto seg = OpenGroup();
  ASSERT_NE(seg, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(seg->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(GroupSegmentTest, AnotherUserCanNeitherOpenAGroupNorSquatItsName) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as uid 65534";
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  auto seg = OpenGroup("owned");
  ASSERT_NE(seg, nullptr);
  // uid 65534 cannot open it, to read or to join.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto r = GroupSegment::Open(dir_, "owned", false);
    auto w = GroupSegment::Open(dir_, "owned", true);
    const bool refused = r.status().code() == StatusCode::kPermissionDenied &&
                         w.status().code() == StatusCode::kPermissionDenied &&
                         r.status().message().find("uid 0") != std::string::npos;
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // A file another user left, writable by anyone, is not joined.
  const std::string squat = GroupSegment::PathFor(dir_, "squatted");
  int fd = open(squat.c_str(), O_CREAT | O_WRONLY, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  ASSERT_EQ(fchown(fd, 65534, 65534), 0);
  close(fd);
  auto joined = GroupSegment::Open(dir_, "squatted", true);
  EXPECT_EQ(joined.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(joined.status().message().find("anyone may write"), std::string::npos)
      << joined.status().message();
}

}  // namespace
}  // namespace gpuslice
