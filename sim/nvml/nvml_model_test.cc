#include "sim/nvml/nvml_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "sim/core/config.h"
#include "sim/core/scheduler.h"
#include "sim/core/sim_gpu.h"
#include "sim/nvml/nvml_fill.h"

namespace gpuslice::sim::nvml {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kOffsetNs = 1'700'000'000'000'000'000;  // realtime - monotonic

class NvmlModelTest : public ::testing::Test {
 protected:
  NvmlModelTest() : state_(std::make_unique<SimState>()) {
    state_->header.realtime_offset_ns = kOffsetNs;
    state_->device_count = 1;
    DeviceState& d = dev();
    d.info.power_idle_mw = 70'000;
    d.info.power_busy_mw = 690'000;
    d.info.power_max_mw = 700'000;
    d.power_limit_mw = 700'000;
    d.info.max_sm_clock_mhz = 1980;
    d.info.max_mem_clock_mhz = 2619;
    d.info.temperature_c = 34;
  }

  DeviceState& dev() { return state_->devices[0]; }

  // Closes a window [start, start + len) with the given per-process shares.
  void Close(int64_t start_ms, int64_t len_ms, uint32_t gpu,
             std::initializer_list<std::pair<int, uint32_t>> procs) {
    UtilWindow& w = dev().windows[dev().windows_closed % kUtilWindows];
    w = UtilWindow{};
    w.start_ns = start_ms * kMs;
    w.end_ns = (start_ms + len_ms) * kMs;
    w.gpu_percent = gpu;
    for (auto [pid, pct] : procs) {
      w.processes[w.process_count].pid = pid;
      w.processes[w.process_count].sm_percent = pct;
      ++w.process_count;
    }
    ++dev().windows_closed;
  }

  uint64_t EndUs(int64_t end_ms) { return static_cast<uint64_t>(end_ms * kMs + kOffsetNs) / 1000; }

  std::unique_ptr<SimState> state_;
};

TEST_F(NvmlModelTest, NoWindowsMeansIdleAndNoSamples) {
  EXPECT_EQ(LatestWindow(dev()), nullptr);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 0u);
  EXPECT_EQ(PowerUsageMw(dev()), 70'000u);
  EXPECT_TRUE(ProcessUtilization(*state_, 0, 0).empty());
}

TEST_F(NvmlModelTest, UtilizationIsTheLatestWindow) {
  Close(0, 100, 20, {{10, 20}});
  Close(100, 100, 80, {{10, 80}});
  EXPECT_EQ(GpuUtilizationPercent(dev()), 80u);
  EXPECT_EQ(MemoryUtilizationPercent(dev()), 40u);
  EXPECT_EQ(TemperatureC(dev()), 34u + 20u);
}

TEST_F(NvmlModelTest, PowerMixesIdleAndBusyAndIsCappedByTheLimit) {
  Close(0, 100, 50, {});
  EXPECT_EQ(PowerUsageMw(dev()), 380'000u);  // (70 + 690) / 2 W
  Close(100, 100, 100, {});
  EXPECT_EQ(PowerUsageMw(dev()), 690'000u);
  dev().power_limit_mw = 300'000;
  EXPECT_EQ(PowerUsageMw(dev()), 300'000u);
}

TEST_F(NvmlModelTest, ClocksFollowLocks) {
  EXPECT_EQ(CurrentSmClockMhz(dev()), 1980u);
  dev().locked_sm_min_mhz = 1000;
  dev().locked_sm_max_mhz = 1200;
  EXPECT_EQ(CurrentSmClockMhz(dev()), 1200u);
  EXPECT_EQ(CurrentMemClockMhz(dev()), 2619u);
  dev().locked_mem_max_mhz = 1593;
  EXPECT_EQ(CurrentMemClockMhz(dev()), 1593u);
}

TEST_F(NvmlModelTest, ProcessSamplesAverageOverWindowsNewerThanLastSeen) {
  Close(0, 100, 100, {{10, 100}});
  Close(100, 100, 50, {{10, 25}, {11, 25}});
  Close(200, 100, 0, {});
  Close(300, 100, 60, {{11, 60}});

  auto all = ProcessUtilization(*state_, 0, 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].pid, 10);
  EXPECT_EQ(all[0].sm_percent, 31u);  // (100 + 25) / 4 = 31.25
  EXPECT_EQ(all[0].timestamp_us, EndUs(200));
  EXPECT_EQ(all[1].pid, 11);
  EXPECT_EQ(all[1].sm_percent, 21u);  // (25 + 60) / 4 = 21.25
  EXPECT_EQ(all[1].timestamp_us, EndUs(400));

  // Only windows ending after lastSeen count: the last two.
  auto recent = ProcessUtilization(*state_, 0, EndUs(200));
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].pid, 11);
  EXPECT_EQ(recent[0].sm_percent, 30u);  // (0 + 60) / 2

  EXPECT_TRUE(ProcessUtilization(*state_, 0, EndUs(400)).empty());
  EXPECT_TRUE(ProcessUtilization(*state_, 1, 0).empty());  // no such device
}

TEST_F(NvmlModelTest, OnlyTheRingsWindowsAreKept) {
  for (int i = 0; i < kUtilWindows + 6; ++i)
    Close(int64_t{i} * 10, 10, 100, {{i < 6 ? 1 : 2, 100}});
  auto samples = ProcessUtilization(*state_, 0, 0);
  ASSERT_EQ(samples.size(), 1u);  // pid 1's windows were overwritten
  EXPECT_EQ(samples[0].pid, 2);
  EXPECT_EQ(samples[0].sm_percent, 100u);
}

// ---- "process_util": "window" (an H100 on r580, docs/sim.md) ----

TEST_F(NvmlModelTest, WindowModeGivesOneSamplePerBusyWindowWithTheDeviceBusy) {
  state_->params.process_util = kProcessUtilWindow;
  Close(0, 100, 100, {{10, 100}});
  Close(100, 100, 80, {{10, 30}, {11, 50}});
  Close(200, 100, 0, {});  // idle: no sample
  Close(300, 100, 60, {{11, 60}});

  auto all = ProcessUtilization(*state_, 0, 0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].pid, 10);
  EXPECT_EQ(all[0].sm_percent, 100u);
  EXPECT_EQ(all[0].timestamp_us, EndUs(100));
  EXPECT_TRUE(all[1].pid == 10 || all[1].pid == 11) << all[1].pid;
  EXPECT_EQ(all[1].sm_percent, 80u);  // the whole window's busy, not 30 or 50
  EXPECT_EQ(all[1].mem_percent, 40u);
  EXPECT_EQ(all[1].timestamp_us, EndUs(200));
  EXPECT_EQ(all[2].pid, 11);
  EXPECT_EQ(all[2].sm_percent, 60u);
  EXPECT_EQ(all[2].timestamp_us, EndUs(400));

  auto recent = ProcessUtilization(*state_, 0, EndUs(200));
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].timestamp_us, EndUs(400));
  EXPECT_TRUE(ProcessUtilization(*state_, 0, EndUs(400)).empty());
  EXPECT_TRUE(ProcessUtilization(*state_, 1, 0).empty());  // no such device
}

TEST_F(NvmlModelTest, WindowModeDrawsInProportionToWhatEachRan) {
  state_->params.process_util = kProcessUtilWindow;
  // Many windows shared 70 / 20 / 10: over all of them each process's summed
  // samples approach its busy share (the draw is not split, but fair).
  constexpr int kWindows = 2000;
  std::map<int32_t, double> busy;
  int samples = 0;
  for (int i = 0; i < kWindows; ++i) {
    Close(int64_t{i} * 10, 10, 100, {{1, 70}, {2, 20}, {3, 10}});
    for (const ProcessSample& p : ProcessUtilization(*state_, 0, EndUs(int64_t{i} * 10))) {
      busy[p.pid] += p.sm_percent;
      ++samples;
    }
  }
  ASSERT_EQ(samples, kWindows);  // exactly one sample per window
  EXPECT_NEAR(busy[1] / kWindows, 70.0, 4.0);
  EXPECT_NEAR(busy[2] / kWindows, 20.0, 3.0);
  EXPECT_NEAR(busy[3] / kWindows, 10.0, 2.5);
}

TEST_F(NvmlModelTest, WindowModeIsDeterministicAndDependsOnTheDevice) {
  state_->params.process_util = kProcessUtilWindow;
  state_->device_count = 2;
  for (int i = 0; i < 40; ++i) Close(int64_t{i} * 10, 10, 100, {{1, 50}, {2, 50}});
  state_->devices[1] = dev();  // the same windows on a second device
  std::vector<int32_t> first, again, other;
  for (const ProcessSample& p : ProcessUtilization(*state_, 0, 0)) first.push_back(p.pid);
  for (const ProcessSample& p : ProcessUtilization(*state_, 0, 0)) again.push_back(p.pid);
  for (const ProcessSample& p : ProcessUtilization(*state_, 1, 0)) other.push_back(p.pid);
  ASSERT_EQ(first.size(), 40u);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);  // 2^-40 to collide by chance
  // A later poll sees the same draw for the same window.
  auto tail = ProcessUtilization(*state_, 0, EndUs(390));
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].pid, first.back());
  EXPECT_EQ(std::count(first.begin(), first.end(), 1) + std::count(first.begin(), first.end(), 2),
            40);
}

// nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES): the device's own busy
// per window, idle windows included, whatever the per-process attribution.
TEST_F(NvmlModelTest, GpuUtilizationSamplesAreEachWindowsDeviceBusy) {
  state_->params.process_util = kProcessUtilWindow;
  {
    Close(0, 100, 90, {{10, 40}, {11, 50}});
    Close(100, 100, 0, {});
    Close(200, 100, 55, {{11, 55}});
    const std::vector<DeviceSample> all = GpuUtilizationSamples(*state_, 0, 0);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].percent, 90u);
    EXPECT_EQ(all[0].timestamp_us, EndUs(100));
    EXPECT_EQ(all[1].percent, 0u);
    EXPECT_EQ(all[2].percent, 55u);
    const std::vector<DeviceSample> newer = GpuUtilizationSamples(*state_, 0, EndUs(100));
    ASSERT_EQ(newer.size(), 2u);
    EXPECT_EQ(newer[0].timestamp_us, EndUs(200));
    EXPECT_TRUE(GpuUtilizationSamples(*state_, 0, EndUs(300)).empty());
    EXPECT_TRUE(GpuUtilizationSamples(*state_, 1, 0).empty());  // no such device
  }
}

TEST_F(NvmlModelTest, RunningProcessesAreLiveOnesWithMemoryOnTheDevice) {
  auto& p = state_->processes;
  p[0] = ProcessRecord{};
  p[0].pid = 100;
  p[0].status = kProcessAlive;
  p[0].devices[0].memory_bytes = 1 << 20;
  p[1] = p[0];
  p[1].pid = 101;
  p[1].status = kProcessExited;
  p[2] = p[0];
  p[2].pid = 102;
  p[2].devices[0].memory_bytes = 0;
  auto procs = RunningComputeProcesses(*state_, 0);
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].pid, 100);
  EXPECT_EQ(procs[0].used_bytes, 1u << 20);
}

TEST(NvmlModelClocks, LockedRangeMustLieWithinTheSupportedRange) {
  EXPECT_TRUE(LockedRangeSupported(kMinClockMhz, 1980, 1980));
  EXPECT_TRUE(LockedRangeSupported(1200, 1200, 1980));
  EXPECT_FALSE(LockedRangeSupported(0, 1000, 1980));
  EXPECT_FALSE(LockedRangeSupported(kMinClockMhz - 1, 1000, 1980));
  EXPECT_FALSE(LockedRangeSupported(1500, 1400, 1980));
  EXPECT_FALSE(LockedRangeSupported(1000, 1981, 1980));
}

TEST(NvmlModelBar1, IsThePowerOfTwoHoldingDeviceMemory) {
  DeviceInfo info{};
  info.total_bytes = uint64_t{80} << 30;
  EXPECT_EQ(Bar1(info).total_bytes, uint64_t{128} << 30);
  EXPECT_EQ(Bar1(info).used_bytes, uint64_t{1} << 20);
  info.total_bytes = uint64_t{64} << 30;
  EXPECT_EQ(Bar1(info).total_bytes, uint64_t{64} << 30);
}

// Window semantics end to end through the scheduler, in simulated time: what
// NVML reports for work the scheduler executed.
class NvmlWindowTest : public ::testing::Test {
 protected:
  static constexpr int64_t kSample = 100 * kMs;

  NvmlWindowTest() : state_(std::make_unique<SimState>()) {
    SimConfig config = DefaultSimConfig();
    config.params.sample_ns = kSample;
    config.params.switch_ns = 0;
    // The "split" attribution's own semantics unless a test says "window"
    // (the default, what an H100 does: each test of it sets it).
    config.params.process_util = kProcessUtilSplit;
    InitializeState(state_.get(), config, 0, /*now_ns=*/0);
    AddContext(0, 4242);
  }

  // Context `i` of a live process (slot i, `pid`) on device 0.
  void AddContext(int i, int32_t pid) {
    ProcessRecord& p = state_->processes[i];
    p.pid = pid;
    p.status = kProcessAlive;
    ContextRecord& c = state_->contexts[i];
    c.status = kContextActive;
    c.device = 0;
    c.process_slot = i;
    c.next_seq = 1;
  }

  // At `at_ms`, context `ctx` queues a kernel of `len_ms`.
  void Kernel(int ctx, int64_t at_ms, int64_t len_ms) {
    AdvanceDevice(*state_, 0, at_ms * kMs);
    EnqueueOp(*state_, ctx, len_ms * kMs, -1, at_ms * kMs);
  }
  void AdvanceTo(int64_t ms) { AdvanceDevice(*state_, 0, ms * kMs); }
  const DeviceState& dev() const { return state_->devices[0]; }
  uint64_t EndUs(int64_t end_ms) const { return ToRealtimeUs(*state_, end_ms * kMs); }
  std::vector<ProcessSample> Samples(uint64_t last_seen_us) const {
    return ProcessUtilization(*state_, 0, last_seen_us);
  }

  std::unique_ptr<SimState> state_;
};

TEST_F(NvmlWindowTest, OnlyClosedWindowsAreReported) {
  Kernel(0, 0, 50);
  AdvanceTo(99);
  EXPECT_EQ(LatestWindow(dev()), nullptr);  // the open window does not count yet
  EXPECT_EQ(GpuUtilizationPercent(dev()), 0u);
  EXPECT_TRUE(Samples(0).empty());
  AdvanceTo(100);
  ASSERT_NE(LatestWindow(dev()), nullptr);
  EXPECT_EQ(LatestWindow(dev())->end_ns, 100 * kMs);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 50u);
  EXPECT_EQ(MemoryUtilizationPercent(dev()), 25u);
  AdvanceTo(250);  // [100, 200) closed idle; [200, 300) still open
  EXPECT_EQ(GpuUtilizationPercent(dev()), 0u);
}

TEST_F(NvmlWindowTest, AKernelAcrossABoundaryIsSplitBetweenWindows) {
  Kernel(0, 70, 60);  // busy [70, 130)
  AdvanceTo(100);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 30u);
  AdvanceTo(200);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 30u);
  auto samples = Samples(0);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].pid, 4242);
  EXPECT_EQ(samples[0].sm_percent, 30u);
  EXPECT_EQ(samples[0].timestamp_us, EndUs(200));
  EXPECT_EQ(dev().busy_ns, 60 * kMs);  // ground truth agrees
}

TEST_F(NvmlWindowTest, TimestampsAdvanceAndLastSeenSelectsNewerWindows) {
  Kernel(0, 0, 50);     // window 0: 50%
  Kernel(0, 200, 100);  // window 1 idle, window 2: 100%
  AdvanceTo(300);
  auto all = Samples(0);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].sm_percent, 50u);  // (50 + 0 + 100) / 3
  EXPECT_EQ(all[0].mem_percent, 25u);
  EXPECT_EQ(all[0].timestamp_us, EndUs(300));

  auto after_first = Samples(EndUs(100));
  ASSERT_EQ(after_first.size(), 1u);
  EXPECT_EQ(after_first[0].sm_percent, 50u);  // (0 + 100) / 2
  // A sample's timestamp is newer than lastSeen; passing it back yields nothing
  // until the process runs in a later window.
  EXPECT_GT(after_first[0].timestamp_us, EndUs(100));
  EXPECT_TRUE(Samples(all[0].timestamp_us).empty());
  AdvanceTo(1000);  // idle windows: still nothing new for the process
  EXPECT_TRUE(Samples(all[0].timestamp_us).empty());
  EXPECT_EQ(GpuUtilizationPercent(dev()), 0u);
  Kernel(0, 1000, 100);
  AdvanceTo(1100);
  auto next = Samples(all[0].timestamp_us);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].timestamp_us, EndUs(1100));
  EXPECT_EQ(next[0].sm_percent, 13u);  // 100 ms busy over 8 windows newer: 12.5
}

TEST_F(NvmlWindowTest, ALongIdleStretchLeavesOnlyIdleWindows) {
  Kernel(0, 0, 100);
  AdvanceTo(100);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 100u);
  AdvanceTo(int64_t{100} * (kUtilWindows + 50));
  EXPECT_EQ(GpuUtilizationPercent(dev()), 0u);
  EXPECT_TRUE(Samples(0).empty());
  EXPECT_GE(dev().windows_closed, static_cast<uint64_t>(kUtilWindows + 49));
}

TEST_F(NvmlWindowTest, ProcessesSharingTheDeviceSplitTheWindow) {
  AddContext(1, 4343);
  Kernel(0, 0, 1000);
  Kernel(1, 0, 1000);
  AdvanceTo(400);
  EXPECT_EQ(GpuUtilizationPercent(dev()), 100u);
  auto samples = Samples(EndUs(100));  // three full windows of round-robin
  ASSERT_EQ(samples.size(), 2u);
  for (const ProcessSample& s : samples) {
    EXPECT_NEAR(s.sm_percent, 50.0, 1.0) << s.pid;
    EXPECT_EQ(s.timestamp_us, EndUs(400));
  }
  // Ground truth: the two contexts' busy time sums to the device's.
  EXPECT_EQ(state_->contexts[0].busy_ns + state_->contexts[1].busy_ns, dev().busy_ns);
}

// Twenty processes time-sliced in every window (bench/scheduler's 20 real
// groups): each gets its sample, and the samples add up to the device's busy
// time. The per-window record held 16 processes: the four whose first slice
// came last in a window got nothing for it (here the samples added up to 79
// of 100, nine of them a point or more low), and gpusliced read the 2 ms and
// 20 ms groups 15-30 % below what they ran, so charged their kernels short.
TEST_F(NvmlWindowTest, EveryProcessThatRanInAWindowHasItsSample) {
  constexpr int kProcesses = 20;
  for (int i = 1; i < kProcesses; ++i) AddContext(i, 4242 + i);
  for (int i = 0; i < kProcesses; ++i) Kernel(i, 0, 1000);
  AdvanceTo(400);
  auto samples = Samples(EndUs(100));  // three full windows of round-robin
  ASSERT_EQ(samples.size(), static_cast<size_t>(kProcesses));
  uint32_t total = 0;
  for (const ProcessSample& s : samples) {
    EXPECT_NEAR(s.sm_percent, 100.0 / kProcesses, 1.0) << s.pid;
    total += s.sm_percent;
  }
  EXPECT_NEAR(total, 100, 10);  // each sample rounded to a whole percent
}

TEST_F(NvmlWindowTest, WindowModeGivesEachTimeSlicedWindowToOneProcess) {
  state_->params.process_util = kProcessUtilWindow;
  AddContext(1, 4343);
  Kernel(0, 0, 1000);
  Kernel(1, 0, 1000);
  AdvanceTo(400);
  auto samples = Samples(EndUs(100));  // three full windows of round-robin
  ASSERT_EQ(samples.size(), 3u);       // one per window, not one per process
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_TRUE(samples[i].pid == 4242 || samples[i].pid == 4343) << samples[i].pid;
    EXPECT_EQ(samples[i].sm_percent, 100u);  // the device's busy, not the ~50 % each ran
    EXPECT_EQ(samples[i].timestamp_us, EndUs(200 + 100 * static_cast<int64_t>(i)));
  }
}

TEST_F(NvmlWindowTest, WindowModeGivesASingleProcessEveryWindowAtItsDuty) {
  state_->params.process_util = kProcessUtilWindow;
  for (int64_t t = 0; t < 1000; t += 100) Kernel(0, t, 30);  // 30 % duty
  AdvanceTo(1000);
  auto samples = Samples(0);
  ASSERT_EQ(samples.size(), 10u);
  for (const ProcessSample& s : samples) {
    EXPECT_EQ(s.pid, 4242);
    EXPECT_EQ(s.sm_percent, 30u);
  }
}

// ---- NVML sizing rules (nvml_fill.h) ----

TEST(NvmlFill, RunningProcessesSizingCall) {
  const std::vector<RunningProcess> procs = {{100, 1u << 20}, {101, 3u << 20}};
  unsigned int count = 0;
  EXPECT_EQ(FillRunningProcesses<nvmlProcessInfo_v2_t>(procs, &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  count = 1;
  nvmlProcessInfo_v2_t one[1];
  EXPECT_EQ(FillRunningProcesses(procs, &count, one), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  count = 4;
  EXPECT_EQ(FillRunningProcesses<nvmlProcessInfo_v2_t>(procs, &count, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(FillRunningProcesses<nvmlProcessInfo_v2_t>(procs, nullptr, one),
            NVML_ERROR_INVALID_ARGUMENT);
  count = 0;
  EXPECT_EQ(FillRunningProcesses<nvmlProcessInfo_t>({}, &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

TEST(NvmlFill, RunningProcessesInEveryLayout) {
  const std::vector<RunningProcess> procs = {{100, 1u << 20}, {101, 3u << 20}};
  nvmlProcessInfo_v1_t v1[4];
  unsigned int count = 4;
  ASSERT_EQ(FillRunningProcesses(procs, &count, v1), NVML_SUCCESS);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(v1[1].pid, 101u);
  EXPECT_EQ(v1[1].usedGpuMemory, 3u << 20);

  nvmlProcessInfo_t v3[3];
  memset(v3, 0xAB, sizeof v3);
  count = 3;
  ASSERT_EQ(FillRunningProcesses(procs, &count, v3), NVML_SUCCESS);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(v3[0].pid, 100u);
  EXPECT_EQ(v3[0].usedGpuMemory, 1u << 20);
  EXPECT_EQ(v3[0].gpuInstanceId, kNoInstance);
  EXPECT_EQ(v3[0].computeInstanceId, kNoInstance);
  EXPECT_EQ(v3[2].pid, 0xABABABABu);  // untouched beyond the count
}

TEST(NvmlFill, ProcessSamplesSizingCall) {
  const std::vector<ProcessSample> samples = {{7, 123, 40, 20}, {8, 456, 10, 5}};
  unsigned int count = 0;
  EXPECT_EQ(FillProcessSamples({}, nullptr, &count), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(count, 0u);
  count = 8;
  EXPECT_EQ(FillProcessSamples(samples, nullptr, &count), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  nvmlProcessUtilizationSample_t out[2];
  count = 1;
  EXPECT_EQ(FillProcessSamples(samples, out, &count), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(FillProcessSamples(samples, out, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  count = 2;
  ASSERT_EQ(FillProcessSamples(samples, out, &count), NVML_SUCCESS);
  EXPECT_EQ(out[1].pid, 8u);
  EXPECT_EQ(out[1].timeStamp, 456u);
  EXPECT_EQ(out[1].smUtil, 10u);
  EXPECT_EQ(out[1].memUtil, 5u);
  EXPECT_EQ(out[1].encUtil, 0u);
  EXPECT_EQ(out[1].decUtil, 0u);
}

}  // namespace
}  // namespace gpuslice::sim::nvml
