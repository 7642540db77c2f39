// Compute limits with real processes on the simulated GPU: every launch form
// is paced to its group's limit, the processes of a group share one budget,
// a live limit change is followed within a second, and the controller role
// passes to a surviving member when its holder is killed.
//
// Shares come from the simulator's ground truth (busy time per process). The
// bands are wide enough for a loaded 2-core machine and narrow enough that a
// limiter that does nothing fails them: an unpaced workload takes ~100%.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "shm/group_segment.h"
#include "shm/raw_layout_testing.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using testing::BuildDir;
using testing::WaitFor;
using json = nlohmann::json;
using std::chrono::milliseconds;

class ComputeTest : public testing::SimProcessTest {
 protected:
  std::vector<std::string> Limited(const std::string& group, const std::string& compute) {
    return {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
            "GPUSLICE_GROUP=" + group, "GPUSLICE_COMPUTE_LIMIT=" + compute};
  }

  // Starts a workload of 2 ms kernels for `seconds` with `more` arguments.
  pid_t Tenant(int n, const std::vector<std::string>& env, int seconds,
               std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--kernel-us", "2000", "--duration-s", std::to_string(seconds),
                                     "--quiet"};
    args.insert(args.end(), more.begin(), more.end());
    return Start(n, args, env);
  }

  std::unique_ptr<GroupSegment> Segment(const std::string& group) {
    auto seg = GroupSegment::Open(shm_dir_, group, /*create=*/false);
    return seg.ok() ? std::move(seg).value() : nullptr;
  }
  // The slot of member `pid` in `seg` once the controller has published its
  // charge on device 0 (-1 if not within 10 s).
  int ChargedSlot(const GroupSegment& seg, pid_t pid) {
    int slot = -1;
    WaitFor(
        [&] {
          for (const GroupSegment::MemberRef& m : seg.Members()) {
            if (m.pid == pid && seg.usage().SlotCharge(m.slot, 0) > 0) slot = m.slot;
          }
          return slot >= 0;
        },
        std::chrono::seconds(10));
    return slot;
  }
};

TEST_F(ComputeTest, WithoutALimitNothingIsPaced) {
  const pid_t p = Tenant(0, Limited("free", "100"), 6);
  WaitRunning({p});
  EXPECT_GT(ShareOfDevice({p}, milliseconds(1500)), 80);
}

class LaunchFormTest : public ComputeTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(LaunchFormTest, ThirtyPercentLandsNearThirty) {
  const pid_t p = Tenant(0, Limited("g", "30"), 8, {"--launch", GetParam()});
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(1500));  // past the bootstrap
  const double share = ShareOfDevice({p}, milliseconds(3000));
  EXPECT_GE(share, 20);
  EXPECT_LE(share, 40);
}

INSTANTIATE_TEST_SUITE_P(EveryForm, LaunchFormTest,
                         ::testing::Values("plain", "ex", "cooperative", "graph"));

TEST_F(ComputeTest, ASynchronisingTenantIsPacedToo) {
  const pid_t p = Tenant(0, Limited("g", "30"), 8, {"--sync"});
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(1500));
  const double share = ShareOfDevice({p}, milliseconds(3000));
  EXPECT_GE(share, 20);
  EXPECT_LE(share, 40);
}

TEST_F(ComputeTest, TheProcessesOfAGroupShareOneBudget) {
  const pid_t a = Tenant(0, Limited("pod", "30"), 8);
  const pid_t b = Tenant(1, Limited("pod", "30"), 8);
  WaitRunning({a, b});
  std::this_thread::sleep_for(milliseconds(1500));
  const double share = ShareOfDevice({a, b}, milliseconds(3000));
  EXPECT_GE(share, 20);
  EXPECT_LE(share, 40);
}

TEST_F(ComputeTest, ALiveLimitChangeIsFollowedWithinASecond) {
  const pid_t p = Tenant(0, Limited("live", "20"), 10);
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(1500));
  const double before = ShareOfDevice({p}, milliseconds(1500));
  EXPECT_GE(before, 12);
  EXPECT_LE(before, 28);

  auto seg = Segment("live");
  ASSERT_NE(seg, nullptr);
  seg->SetComputeLimit(0, 60);
  std::this_thread::sleep_for(milliseconds(1000));
  const double after = ShareOfDevice({p}, milliseconds(1500));
  EXPECT_GE(after, 48);
  EXPECT_LE(after, 72);
}

TEST_F(ComputeTest, AnotherMemberTakesOverWhenTheControllerIsKilled) {
  const pid_t a = Tenant(0, Limited("lead", "30"), 12);
  WaitRunning({a});
  const pid_t b = Tenant(1, Limited("lead", "30"), 12);
  WaitRunning({b});
  auto seg = Segment("lead");
  ASSERT_NE(seg, nullptr);
  auto controller = [&] {
    return std::atomic_ref<int32_t>(testing::RawLayout(*seg).controller_pid).load();
  };
  ASSERT_TRUE(
      WaitFor([&] { return controller() == a || controller() == b; }, std::chrono::seconds(5)));
  const pid_t leader = controller();
  const pid_t survivor = leader == a ? b : a;
  kill(leader, SIGKILL);
  Join(leader);

  ASSERT_TRUE(WaitFor([&] { return controller() == survivor; }, std::chrono::seconds(5)));
  // The new controller keeps estimating...
  DeviceCompute& c = testing::RawCompute(*seg, 0);
  const int64_t seen = std::atomic_ref<int64_t>(c.measured_at_ns).load();
  EXPECT_TRUE(WaitFor([&] { return std::atomic_ref<int64_t>(c.measured_at_ns).load() > seen; },
                      std::chrono::seconds(3)));
  // ...and the survivor stays paced.
  std::this_thread::sleep_for(milliseconds(1000));
  const double share = ShareOfDevice({survivor}, milliseconds(2500));
  EXPECT_GE(share, 20);
  EXPECT_LE(share, 40);
}

// Workload changes (issue 14; bench/share_accuracy --suite workload-change
// has the full set): a cap holds when single launches give way to graphs of
// ten kernels (the group-average charge of the landed code ran at ~95 % for
// two seconds, 62 % in this test's window), and once a member with 250x
// longer kernels has joined.
TEST_F(ComputeTest, ACapHoldsWhenGraphsReplaceSingleLaunches) {
  const pid_t p =
      Start(0, {"--kernel-us", "200", "--duration-s", "10", "--phase", "3:200:graph10", "--quiet"},
            Limited("graphs", "30"));
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(4000));  // the switch, then its first second
  const double share = ShareOfDevice({p}, milliseconds(2000));
  EXPECT_GE(share, 15);
  EXPECT_LE(share, 45);
}

// At 70 % the stream keeps about 14 ms of 200 us kernels queued; when they
// become 20 ms kernels, launches go on being admitted at the old charge
// until the first long one has started. The backlog watch's markers
// (shm/progress_watch.h) catch it within milliseconds, so the backlog is
// about the first second's; with one marker per allowance (27 ms) about 2 s
// of work queued and the second after the change ran at 100 %. A loaded
// machine slows the tenant down (shares lower, never higher).
TEST_F(ComputeTest, ACapHoldsWhenKernelsBecomeAHundredTimesLongerUnderAHighCap) {
  const pid_t p =
      Start(0, {"--kernel-us", "200", "--duration-s", "12", "--phase", "3:20000", "--quiet"},
            Limited("longer", "70"));
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(4500));  // the change, then its first second
  const double second = ShareOfDevice({p}, milliseconds(1000));
  EXPECT_LE(second, 85) << "the second that follows the change's first";
  const double after = ShareOfDevice({p}, milliseconds(2000));
  EXPECT_LE(after, 80);
  EXPECT_GE(after, 35);
}

// The same change under 30 %: the backlog watch's first drain after it ends
// before the controller has learned the new cost from NVML (two or three
// windows), and the gate went on at the old charge: the budget, idle during
// the drain, admitted a whole burst (30-35 launches, 0.7 s of 20 ms kernels)
// before the next marker was due, and the first second after the change ran
// at 82-92 % (bench/share_accuracy, main before issue 14's fix). Charged what
// the drain measured (ChargeFloor), it runs at 36-42 %. A loaded machine
// slows the tenant down (shares lower, never higher).
TEST_F(ComputeTest, NoSecondBacklogWhenKernelsBecomeAHundredTimesLonger) {
  const pid_t p =
      Start(0, {"--kernel-us", "200", "--duration-s", "8", "--phase", "3:20000", "--quiet"},
            Limited("longer30", "30"));
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(3000));  // the change
  const double first = ShareOfDevice({p}, milliseconds(1000));
  EXPECT_LE(first, 65) << "the first second after the change";
}

// Kernels 1.43x shorter (2 ms -> 1.4 ms) under a 50 % cap: within the
// estimator's shift factor, so its estimate comes down over its 2 s horizon,
// and meanwhile the group, held back by its budget at the old charge, runs
// under its cap (in the plant 37 % then 45 %; here 38.8 and 38.9 % over
// this test's 1.5 s with main's library, whose loop only ever slowed a
// group down). Measured under its rate while its launches wait for budget,
// the group's charges are lowered (ShareCorrection) within half a second:
// 46.5-47.1 %. A loaded machine lowers shares, so the bound sits between.
TEST_F(ComputeTest, ACapIsReachedWhenKernelsBecomeALittleShorter) {
  const pid_t p =
      Start(0, {"--kernel-us", "2000", "--duration-s", "10", "--phase", "3:1400", "--quiet"},
            Limited("shorter", "50"));
  WaitRunning({p});
  std::this_thread::sleep_for(milliseconds(3000));  // the change (a little less)
  const double share = ShareOfDevice({p}, milliseconds(1500));
  EXPECT_GE(share, 43) << "the 1.5 s after the change";
  EXPECT_LE(share, 58);
}

TEST_F(ComputeTest, ACapHoldsWhenAMemberWithMuchLongerKernelsJoins) {
  const pid_t a =
      Start(0, {"--kernel-us", "20", "--duration-s", "24", "--quiet"}, Limited("mixed", "40"));
  WaitRunning({a});
  std::this_thread::sleep_for(milliseconds(2000));
  const pid_t b =
      Start(1, {"--kernel-us", "5000", "--duration-s", "20", "--quiet"}, Limited("mixed", "40"));
  WaitRunning({b});
  // Each launch is charged its own member's cost: the joiner starts on its
  // own bootstrap measurement (an upper bound of its kernels' time), so no
  // window after the join runs over the cap. Charged the group's average
  // (the landed code), the group ran near 100 % for seconds after the join;
  // charged half a percent of each NVML window the first member won before
  // the joiner won one (they are unknown for it, compute_controller.h), the
  // first window ran at 85 % (when the draw gave the first member the
  // windows after the join: MixedMembersTest drives that case).
  // A loaded machine slows the members down (shares lower, never higher),
  // so the bound from above holds however loaded it is.
  std::vector<double> windows = {ShareOfDevice({a, b}, milliseconds(2000)),
                                 ShareOfDevice({a, b}, milliseconds(2000)),
                                 ShareOfDevice({a, b}, milliseconds(2000))};
  EXPECT_LE(*std::max_element(windows.begin(), windows.end()), 52)
      << "the group's share in each 2 s window after the join: "
      << ::testing::PrintToString(windows);
  // And the group is paced, not starved: a window reaches the band (a
  // loaded machine may take longer, hence the deadline).
  const bool reached = WaitFor(
      [&] {
        windows.push_back(ShareOfDevice({a, b}, milliseconds(2000)));
        return windows.back() >= 25;
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(reached) << "the group's share in each 2 s window after the join: "
                       << ::testing::PrintToString(windows);
}

// Kernels captured into a graph run when the graph does: only the graph's
// launches are admitted (paced, counted, charged), never the captured
// kernels one by one, although the group is paced while they are captured
// (the capture hooks count the open captures; stream_captures.h).
TEST_F(ComputeTest, CapturedKernelsAreNotAdmittedOneByOne) {
  const pid_t p = Start(0,
                        {"--kernel-us", "100", "--launch", "graph", "--graph-kernels", "100",
                         "--kernels", "5", "--quiet"},
                        Limited("captured", "50"));
  ASSERT_EQ(Join(p), 0) << Read("err0");
  auto seg = Segment("captured");
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->usage().Launches(0), 5u);
}

// gpusliced's scheduler writes grants and pauses into the segment
// (include/gpuslice/group_segment.h); the launch path follows them. Here the
// test writes them, as the daemon would.
TEST_F(ComputeTest, AGrantPacesAnUnlimitedGroup) {
  const pid_t p = Tenant(0, Limited("granted", "100"), 12);
  WaitRunning({p});
  auto seg = Segment("granted");
  ASSERT_NE(seg, nullptr);
  // The member's keeper clears every grant when it takes the group (its
  // first step): the grant is written once it has (a heartbeat after now).
  const int64_t now_ns = MonotonicNs();
  ASSERT_TRUE(WaitFor([&] { return seg->LastAliveNs() > now_ns; }, std::chrono::seconds(10)));
  seg->schedule().SetComputeGrant(0, 3000);
  // Work queued before pacing began drains first (about 2 s of the
  // simulator's queue), then the bootstrap.
  std::this_thread::sleep_for(milliseconds(3000));
  const double share = ShareOfDevice({p}, milliseconds(3000));
  EXPECT_GE(share, 20);
  EXPECT_LE(share, 40);
}

// Turns (gpusliced's batch groups, shm/launch_pacer.h TurnAt): a group
// launches only within its turn of each cycle, and every cycle in which the
// turn's end held a launch back is counted (the scheduler's evidence that
// the group wants more). Beside a latency group the scheduler also bounds
// the queue (1 ms, less than one 2 ms kernel): the stream then drains
// before each launch, and the cut-off is counted all the same (it was not,
// once the drain had begun the wait: the scheduler took the group to want
// nothing more, bench/scheduler's latency case gave it 10 % of 27).
class TurnsTest : public ComputeTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(TurnsTest, ATurnConfinesLaunchesAndEachCutOffIsCounted) {
  const pid_t p = Tenant(0, Limited("turns", "100"), 12);
  WaitRunning({p});
  auto seg = Segment("turns");
  ASSERT_NE(seg, nullptr);
  const int64_t now_ns = MonotonicNs();
  ASSERT_TRUE(WaitFor([&] { return seg->LastAliveNs() > now_ns; }, std::chrono::seconds(10)));
  // The first cycle starts after the queue the member built has drained.
  constexpr int64_t kPeriodNs = 100'000'000;
  const TurnPlan plan{.epoch_ns = MonotonicNs() + 3'000'000'000,
                      .period_ns = kPeriodNs,
                      .begin_ns = 0,
                      .length_ns = 30'000'000};
  seg->schedule().SetQueueBound(0, GetParam());
  seg->schedule().SetComputeGrant(0, 3000);
  seg->schedule().SetTurns(0, plan, plan);
  std::this_thread::sleep_for(milliseconds(3500));
  const uint64_t cut0 = seg->schedule().Counters(0).cut_off;
  const double share = ShareOfDevice({p}, milliseconds(2000));
  const uint64_t cut = seg->schedule().Counters(0).cut_off - cut0;
  // 30 ms of each 100: whole 2 ms kernels that end within it, less the
  // drains' gaps where the queue is bounded.
  EXPECT_GE(share, 18);
  EXPECT_LE(share, 32);
  EXPECT_GE(cut, 10u) << "of about 20 cycles";
  EXPECT_LE(cut, 60u);  // once per launch held back, not once per look (every ~1 ms)
}

INSTANTIATE_TEST_SUITE_P(QueueBound, TurnsTest, ::testing::Values(0, 1'000'000),
                         [](const ::testing::TestParamInfo<int64_t>& bound) {
                           return bound.param == 0 ? std::string("none") : std::string("1ms");
                         });

TEST_F(ComputeTest, APausedGroupLaunchesNothingUntilResumed) {
  const pid_t p = Tenant(0, Limited("pausable", "100"), 20);
  WaitRunning({p});
  auto seg = Segment("pausable");
  ASSERT_NE(seg, nullptr);
  seg->schedule().SetPaused(true);
  // Launches already admitted drain; after that the kernel count stays put.
  auto kernels = [&] { return Process(Stats(), p)["devices"][0]["kernels"].get<uint64_t>(); };
  uint64_t settled = kernels();
  ASSERT_TRUE(WaitFor(
      [&] {
        const uint64_t before = kernels();
        std::this_thread::sleep_for(milliseconds(200));
        settled = kernels();
        return settled == before;
      },
      std::chrono::seconds(10)));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(kernels(), settled) << "a paused group launched";

  // Resuming wakes the waiting launch at once (the bar is 100 ms; the
  // deadline here is wide for a loaded machine).
  seg->schedule().SetPaused(false);
  EXPECT_TRUE(WaitFor([&] { return kernels() > settled; }, std::chrono::seconds(5)));
}

// "The limiter never takes the host program down": a launch admitted while
// gpusliced's scheduler granted the group a tiny share runs the budget far
// ahead (2 ms at 0.01 % is 20 s). When the grant goes (gpusliced stopping
// cleans its schedule), the next launches are paced by the limit alone, not
// held for what the old grant charged. Before the fix every member of the
// group waited out the old charge (bench/soak: tenants stuck in futex waits
// at each clean daemon stop).
TEST_F(ComputeTest, ALaunchAdmittedAtAnOldTinyGrantDoesNotHoldTheProgramOnceItIsCleared) {
  const pid_t p = Tenant(0, Limited("granted", "30"), 4);
  WaitRunning({p});
  auto seg = GroupSegment::Open(shm_dir_, "granted", /*create=*/false);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  // As gpusliced's scheduler would: a tiny grant, until a launch has been
  // admitted under it...
  (*seg)->schedule().SetComputeGrant(0, 1);
  auto ahead_ns = [&] {
    return std::atomic_ref<int64_t>(testing::RawCompute(**seg, 0).next_free_ns).load() -
           MonotonicNs();
  };
  ASSERT_TRUE(WaitFor([&] { return ahead_ns() > 10'000'000'000; }, std::chrono::seconds(10)))
      << ahead_ns() << "\n"
      << Read("err0");
  // ...then gone (gpusliced stopped: GroupControllers::Stop clears it).
  (*seg)->schedule().ClearSchedule();
  const bool exited = WaitFor(
      [&] {
        int status = 0;
        return waitpid(p, &status, WNOHANG) == p;
      },
      std::chrono::seconds(15));
  if (exited) std::erase(children_, p);
  EXPECT_TRUE(exited) << "still waiting for the old grant's charge\n" << Read("err0");
}

// Issue 13's 5 s stall (bench/scheduler --suite scale, docs/scheduling.md): a
// member's bootstrap probe measured its kernel's wall time beside many
// contexts (here staged: 400 ms for a 2 ms kernel) and was charged at a 4 %
// grant, which ran the budget 10 s ahead. Once the member's charge is known
// the gate pulls the budget back to its refined charge and launches go on;
// before the fix the pull-back was bounded by the stale measurement and the
// program waited out the 10 s.
TEST_F(ComputeTest, ABudgetRunAheadOnAnInflatedProbeIsPulledBackOnceTheChargeIsKnown) {
  const pid_t p = Tenant(0, Limited("probed", "30"), 8);
  WaitRunning({p});
  auto seg = GroupSegment::Open(shm_dir_, "probed", /*create=*/false);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  const int slot = ChargedSlot(**seg, p);
  ASSERT_GE(slot, 0) << Read("err0");
  // As gpusliced's scheduler would once the cost is known: a small grant...
  constexpr uint32_t kGrantBp = 400;
  (*seg)->schedule().SetComputeGrant(0, kGrantBp);
  // ...and the probe's measurement charged at it (Probe's ChargeAfter).
  constexpr int64_t kMeasured = 400'000'000;
  std::atomic_ref<int64_t>(testing::RawLayout(**seg).slot_compute[slot][0].probe_ns)
      .store(kMeasured);
  const int64_t now = MonotonicNs();
  (*seg)->usage().Budget(0, slot).ChargeAfter(now, PacedIntervalBpNs(kMeasured, kGrantBp));
  // The member goes on launching: 2 ms at 4 % is one launch every 50 ms.
  const uint64_t before = (*seg)->usage().Launches(0);
  EXPECT_TRUE(
      WaitFor([&] { return (*seg)->usage().Launches(0) >= before + 5; }, std::chrono::seconds(4)))
      << "launches " << (*seg)->usage().Launches(0) - before << ", budget ahead by "
      << std::atomic_ref<int64_t>(testing::RawCompute(**seg, 0).next_free_ns).load() - now
      << " ns\n"
      << Read("err0");
}

// The same stall when the inflated charge is the member's own: a launch
// charged 400 ms (the measurement, used until the controller publishes a
// charge; staged here by publishing it) at a 4 % grant runs the budget 10 s
// ahead, and the next launch waits with that charge in hand. The controller
// then publishes the real one (2 ms); the waiting launch naps at most
// kMaxPacerNapNs, re-reads it and pulls the budget back. Before the fix it
// slept out the 10 s unless the segment's change word moved.
TEST_F(ComputeTest, ALaunchWaitingOnAnInflatedChargeFollowsItsRefinement) {
  const pid_t p = Tenant(0, Limited("refined", "30"), 8);
  WaitRunning({p});
  auto seg = GroupSegment::Open(shm_dir_, "refined", /*create=*/false);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  const int slot = ChargedSlot(**seg, p);
  ASSERT_GE(slot, 0) << Read("err0");
  const int64_t real_charge = (*seg)->usage().SlotCharge(slot, 0);
  (*seg)->schedule().SetComputeGrant(0, 400);
  auto ahead_ns = [&] {
    return std::atomic_ref<int64_t>(testing::RawCompute(**seg, 0).next_free_ns).load() -
           MonotonicNs();
  };
  // Until a launch has been admitted at the inflated charge (the controller
  // overwrites it every tick meanwhile).
  ASSERT_TRUE(WaitFor(
      [&] {
        (*seg)->usage().PublishSlotCharge(slot, 0, 400'000'000);
        return ahead_ns() > 5'000'000'000;
      },
      std::chrono::seconds(10)))
      << ahead_ns() << "\n"
      << Read("err0");
  const uint64_t before = (*seg)->usage().Launches(0);
  EXPECT_TRUE(
      WaitFor([&] { return (*seg)->usage().Launches(0) >= before + 5; }, std::chrono::seconds(4)))
      << "launches " << (*seg)->usage().Launches(0) - before << ", budget ahead by " << ahead_ns()
      << " ns, charge " << (*seg)->usage().SlotCharge(slot, 0) << " (was " << real_charge << ")\n"
      << Read("err0");
}

}  // namespace
}  // namespace gpuslice
