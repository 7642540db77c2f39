// The timing model on simulated time: every instant is chosen by the test.
#include "sim/core/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "sim/core/config.h"
#include "sim/core/mig_state.h"
#include "sim/core/sim_gpu.h"

namespace gpuslice::sim {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;

class SchedulerTest : public ::testing::Test {
 protected:
  // timeslice 1000 us, switch 100 us, sample window 10 ms unless a test changes them.
  void Init(int64_t timeslice = 1000 * kUs, int64_t switch_cost = 100 * kUs,
            int64_t sample = 10 * kMs) {
    SimConfig config = DefaultSimConfig();
    config.params.timeslice_ns = timeslice;
    config.params.switch_ns = switch_cost;
    config.params.sample_ns = sample;
    state_ = std::make_unique<SimState>();
    InitializeState(state_.get(), config, 0, 0);
  }

  // A context of a process with pid 1000 + n on device 0.
  int AddContext(int n) {
    SimState& s = *state_;
    s.processes[n] = {};
    s.processes[n].pid = 1000 + n;
    s.processes[n].status = kProcessAlive;
    ContextRecord& c = s.contexts[n];
    c.status = kContextActive;
    c.device = 0;
    c.process_slot = n;
    c.next_seq = 1;
    return n;
  }

  uint64_t Kernel(int ctx, int64_t ns, int64_t now) {
    AdvanceDevice(*state_, 0, now);
    return EnqueueOp(*state_, ctx, ns, -1, now);
  }

  // Makes context `ctx` an MPS client of server pid `server` at `percent`.
  void MakeMpsClient(int ctx, int32_t server, uint32_t percent) {
    ContextRecord& c = state_->contexts[ctx];
    c.flags |= kContextMpsClient;
    c.mps_server_pid = server;
    c.thread_percent = percent;
    c.report_slot = c.process_slot;
  }

  void AdvanceTo(int64_t t) { AdvanceDevice(*state_, 0, t); }
  const ContextRecord& Ctx(int i) { return state_->contexts[i]; }
  const DeviceState& Dev() { return state_->devices[0]; }

  std::unique_ptr<SimState> state_;
};

TEST_F(SchedulerTest, AloneAContextRunsBackToBackWithoutSwitches) {
  Init();
  int a = AddContext(0);
  for (int i = 0; i < 10; ++i) Kernel(a, 100 * kUs, 0);
  AdvanceTo(5 * kMs);
  EXPECT_EQ(Ctx(a).kernels, 10u);
  EXPECT_EQ(Dev().busy_ns, 1 * kMs);
  EXPECT_EQ(Dev().switches, 0);
}

// MIG: contexts in different lanes (MIG devices) run side by side, each at
// full speed; contexts in one lane time-slice as on a whole GPU. Each NVML
// window credits what ran in it.
TEST_F(SchedulerTest, MigLanesRunSideBySide) {
  Init();
  state_->devices[0].mig_mode = kMigEnabled;  // lanes other than 0 are MIG devices
  const int a = AddContext(0), b = AddContext(1), c = AddContext(2);
  state_->contexts[a].lane = 1;
  state_->contexts[b].lane = 2;
  state_->contexts[c].lane = 2;
  for (int i = 0; i < 10; ++i) {
    Kernel(a, 2 * kMs, 0);
    Kernel(b, 1 * kMs, 0);
    Kernel(c, 1 * kMs, 0);
  }
  AdvanceTo(20 * kMs);
  // Lane 1 alone ran a's 20 ms; lane 2 time-sliced b and c (20 ms of
  // kernels and their switches), so a's kernels did not wait for theirs.
  EXPECT_EQ(Ctx(a).kernels, 10u);
  EXPECT_EQ(Ctx(a).busy_ns, 20 * kMs);
  EXPECT_LT(Ctx(b).kernels + Ctx(c).kernels, 20u) << "the switches take lane 2 past 20 ms";
  EXPECT_GT(Ctx(b).kernels, 5u);
  EXPECT_GT(Ctx(c).kernels, 5u);
  AdvanceTo(40 * kMs);
  EXPECT_EQ(Ctx(b).kernels + Ctx(c).kernels, 20u);
  // The two 10 ms windows of 0-20 ms each hold both lanes' busy time.
  const UtilWindow& first = Dev().windows[0];
  EXPECT_EQ(first.end_ns, 10 * kMs);
  EXPECT_EQ(first.process_count, 3u);
  EXPECT_EQ(Dev().busy_ns, Ctx(a).busy_ns + Ctx(b).busy_ns + Ctx(c).busy_ns);
  EXPECT_GT(Dev().switches, 10) << "lane 2 switched between b and c";
}

TEST_F(SchedulerTest, MpsClientsOfOneServerRunConcurrently) {
  Init();
  int a = AddContext(0), b = AddContext(1);
  MakeMpsClient(a, 77, 30);
  MakeMpsClient(b, 77, 60);
  uint64_t sa = Kernel(a, 400 * kUs, 0);
  uint64_t sb = Kernel(b, 300 * kUs, 0);
  // 30 + 60 <= 100: both at full speed, side by side, no switch.
  AdvanceTo(299 * kUs);
  EXPECT_LT(Ctx(b).completed_seq, sb);
  AdvanceTo(300 * kUs);
  EXPECT_EQ(Ctx(b).completed_seq, sb);
  AdvanceTo(400 * kUs);
  EXPECT_EQ(Ctx(a).completed_seq, sa);
  EXPECT_EQ(Dev().busy_ns, 400 * kUs);
  EXPECT_EQ(Ctx(a).busy_ns, 400 * kUs);
  EXPECT_EQ(Ctx(b).busy_ns, 300 * kUs);
  EXPECT_EQ(Dev().switches, 0);
}

TEST_F(SchedulerTest, OversubscribedMpsClientsSlowDownInProportion) {
  Init();
  int a = AddContext(0), b = AddContext(1);
  MakeMpsClient(a, 77, 100);
  MakeMpsClient(b, 77, 100);
  uint64_t sa = Kernel(a, 300 * kUs, 0);
  uint64_t sb = Kernel(b, 300 * kUs, 0);
  // 200% of the SMs asked for: each at half speed.
  AdvanceTo(599 * kUs);
  EXPECT_LT(Ctx(a).completed_seq, sa);
  AdvanceTo(600 * kUs);
  EXPECT_EQ(Ctx(a).completed_seq, sa);
  EXPECT_EQ(Ctx(b).completed_seq, sb);
  EXPECT_EQ(Dev().busy_ns, 600 * kUs);
}

TEST_F(SchedulerTest, AnMpsGroupIsTimeSlicedAgainstAPlainContext) {
  Init();
  int a = AddContext(0), b = AddContext(1), c = AddContext(2);
  MakeMpsClient(a, 77, 50);
  MakeMpsClient(c, 77, 50);
  Kernel(a, 2000 * kUs, 0);
  Kernel(c, 2000 * kUs, 0);
  Kernel(b, 2000 * kUs, 0);
  // Group {a, c} 0-1000, switch, b 1100-2100, switch, group 2200-3200.
  AdvanceTo(3200 * kUs);
  EXPECT_EQ(Ctx(a).kernels, 1u);
  EXPECT_EQ(Ctx(c).kernels, 1u);
  EXPECT_EQ(Ctx(b).busy_ns, 1000 * kUs);
  EXPECT_EQ(Dev().switches, 2);
}

TEST_F(SchedulerTest, LongKernelsArePreemptedAndResumedWithSwitchCost) {
  Init();
  int a = AddContext(0), b = AddContext(1);
  uint64_t sa = Kernel(a, 2500 * kUs, 0);
  uint64_t sb = Kernel(b, 2500 * kUs, 0);
  // A 0-1000, switch, B 1100-2100, switch, A 2200-3200, switch, B 3300-4300,
  // switch, A 4400-4900 (done, yields), switch, B 5000-5500 (done).
  AdvanceTo(4899 * kUs);
  EXPECT_LT(Ctx(a).completed_seq, sa);
  AdvanceTo(4900 * kUs);
  EXPECT_EQ(Ctx(a).completed_seq, sa);
  AdvanceTo(5499 * kUs);
  EXPECT_LT(Ctx(b).completed_seq, sb);
  AdvanceTo(5500 * kUs);
  EXPECT_EQ(Ctx(b).completed_seq, sb);
  EXPECT_EQ(Dev().busy_ns, 5000 * kUs);
  EXPECT_EQ(Dev().switches, 5);
}

TEST_F(SchedulerTest, AContextThatRunsDryYieldsEarly) {
  Init();
  int a = AddContext(0), b = AddContext(1);
  Kernel(a, 100 * kUs, 0);
  for (int i = 0; i < 100; ++i) Kernel(b, 50 * kUs, 0);
  AdvanceTo(100 * kUs);
  EXPECT_EQ(Ctx(a).kernels, 1u);
  // B starts after the switch, at 200 us, not at the end of A's slice.
  AdvanceTo(250 * kUs);
  EXPECT_EQ(Ctx(b).kernels, 1u);
}

TEST_F(SchedulerTest, SaturatingContextsSplitTheDeviceEvenlyWhateverTheirKernelLength) {
  // DESIGN.md section 7: 300 us and 700 us kernels must still split 50/50.
  Init(1024 * kUs, 50 * kUs);
  int a = AddContext(0), b = AddContext(1);
  int64_t t = 0;
  for (; t < 2000 * kMs; t += 1 * kMs) {
    while (Ctx(a).count < 64) Kernel(a, 300 * kUs, t);
    while (Ctx(b).count < 64) Kernel(b, 700 * kUs, t);
    AdvanceTo(t + 1 * kMs);
  }
  double share_a = static_cast<double>(Ctx(a).busy_ns) / static_cast<double>(Dev().busy_ns);
  EXPECT_NEAR(share_a, 0.5, 0.01);
  // Everything not spent switching was busy.
  EXPECT_EQ(Dev().busy_ns + Dev().switches * 50 * kUs, t);
}

TEST_F(SchedulerTest, ThreeContextsRoundRobin) {
  Init(500 * kUs, 0);
  int c[3] = {AddContext(0), AddContext(1), AddContext(2)};
  for (int ci : c) Kernel(ci, 10 * kMs, 0);
  AdvanceTo(3 * kMs);  // each had two 500 us slices, in order
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Ctx(c[i]).busy_ns, 1 * kMs) << i;
}

TEST_F(SchedulerTest, MarkersCompleteWithThePrecedingKernel) {
  Init();
  int a = AddContext(0);
  uint64_t first = EnqueueOp(*state_, a, 0, 7, 0);  // empty queue: completes at once
  EXPECT_EQ(Ctx(a).completed_seq, first);
  EXPECT_EQ(Ctx(a).event_time_ns[7], 0);
  Kernel(a, 300 * kUs, 10 * kUs);
  uint64_t marker = EnqueueOp(*state_, a, 0, 8, 10 * kUs);
  AdvanceTo(200 * kUs);
  EXPECT_LT(Ctx(a).completed_seq, marker);
  AdvanceTo(1 * kMs);
  EXPECT_EQ(Ctx(a).completed_seq, marker);
  EXPECT_EQ(Ctx(a).event_time_ns[8], 310 * kUs);
  EXPECT_EQ(Ctx(a).count, 0u);
}

TEST_F(SchedulerTest, UtilizationWindowsRecordBusyShareAndProcesses) {
  Init(1000 * kUs, 0, 10 * kMs);
  int a = AddContext(0), b = AddContext(1);
  Kernel(a, 3 * kMs, 0);
  Kernel(b, 2 * kMs, 0);
  AdvanceTo(25 * kMs);
  ASSERT_EQ(Dev().windows_closed, 2u);
  const UtilWindow& w0 = Dev().windows[0];
  EXPECT_EQ(w0.gpu_percent, 50u);
  ASSERT_EQ(w0.process_count, 2u);
  EXPECT_EQ(w0.processes[0].pid + w0.processes[1].pid, 1000 + 1001);
  EXPECT_EQ(w0.processes[0].sm_percent + w0.processes[1].sm_percent, 50u);
  EXPECT_EQ(Dev().windows[1].gpu_percent, 0u);
  EXPECT_EQ(Dev().windows[1].process_count, 0u);
}

TEST_F(SchedulerTest, LongIdleKeepsOnlyTheNewestWindows) {
  Init(1000 * kUs, 0, 1 * kMs);
  AdvanceTo(100'000 * kMs);  // 100k windows of idle: must not loop 100k times
  EXPECT_EQ(Dev().windows_closed, 100'000u);
  EXPECT_EQ(Dev().window_start_ns, 100'000 * kMs);
}

TEST_F(SchedulerTest, EnergyIntegratesIdleAndBusyPowerUnderTheLimit) {
  Init();
  int a = AddContext(0);
  AdvanceTo(1000 * kMs);  // idle for 1 s at 70 W
  EXPECT_NEAR(Dev().energy_mj, 70'000, 1);
  state_->devices[0].power_limit_mw = 300'000;  // busy power 690 W capped at 300 W
  Kernel(a, 1000 * kMs, 1000 * kMs);
  AdvanceTo(2000 * kMs);
  EXPECT_NEAR(Dev().energy_mj, 370'000, 1);
}

TEST_F(SchedulerTest, DroppedWorkLeavesTheDeviceToOthers) {
  Init();
  int a = AddContext(0), b = AddContext(1);
  Kernel(a, 50 * kMs, 0);
  uint64_t marker = EnqueueOp(*state_, a, 0, 3, 0);
  Kernel(b, 1 * kMs, 0);
  AdvanceTo(500 * kUs);
  DropQueuedWork(*state_, a, 500 * kUs);
  EXPECT_EQ(Ctx(a).completed_seq, marker);
  EXPECT_EQ(Ctx(a).count, 0u);
  AdvanceTo(1700 * kUs);  // switch 100 us, then B's 1 ms kernel
  EXPECT_EQ(Ctx(b).kernels, 1u);
}

TEST_F(SchedulerTest, CompletionLowerBoundNeverExceedsTheTruth) {
  Init(1000 * kUs, 100 * kUs);
  int b = AddContext(0), a = AddContext(1);  // B is first in round-robin order
  Kernel(b, 5 * kMs, 0);
  uint64_t s1 = Kernel(a, 2 * kMs, 0);
  uint64_t s2 = Kernel(a, 1 * kMs, 0);
  AdvanceTo(300 * kUs);
  int64_t bound = CompletionLowerBoundNs(*state_, a, s2);
  EXPECT_EQ(bound, 3 * kMs + 100 * kUs);  // own work + a switch (B is running)
  int64_t t = 300 * kUs;
  while (Ctx(a).completed_seq < s2) AdvanceTo(t += 10 * kUs);
  EXPECT_GE(t - 300 * kUs, bound);
  EXPECT_EQ(CompletionLowerBoundNs(*state_, a, s1), 0);
}

// Random interleavings: conservation of time and of kernels.
TEST_F(SchedulerTest, RandomWorkloadsConserveTimeAndKernels) {
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    Init(std::uniform_int_distribution<int64_t>(100, 3000)(rng) * kUs,
         std::uniform_int_distribution<int64_t>(0, 500)(rng) * kUs, 7 * kMs);
    const int n = 1 + seed % 4;
    uint64_t enqueued = 0;
    int64_t t = 0;
    for (int i = 0; i < n; ++i) AddContext(i);
    for (int step = 0; step < 2000; ++step) {
      t += std::uniform_int_distribution<int64_t>(1, 2000)(rng) * kUs / 10;
      int c = std::uniform_int_distribution<int>(0, n - 1)(rng);
      if (Ctx(c).count < 100 && rng() % 2) {
        Kernel(c, std::uniform_int_distribution<int64_t>(1, 4000)(rng) * kUs, t);
        ++enqueued;
      } else {
        AdvanceTo(t);
      }
    }
    AdvanceTo(t + 1000'000 * kMs);  // drain everything
    uint64_t kernels = 0;
    int64_t busy = 0;
    for (int i = 0; i < n; ++i) {
      kernels += Ctx(i).kernels;
      busy += Ctx(i).busy_ns;
      EXPECT_EQ(Ctx(i).count, 0u);
      EXPECT_EQ(Ctx(i).busy_ns, state_->processes[i].devices[0].busy_ns);
    }
    EXPECT_EQ(kernels, enqueued) << "seed " << seed;
    EXPECT_EQ(Dev().kernels, enqueued);
    EXPECT_EQ(busy, Dev().busy_ns);
    EXPECT_EQ(Dev().lanes[0].running_ctx, -1);
  }
}

}  // namespace
}  // namespace gpuslice::sim
