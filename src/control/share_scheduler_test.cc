// The scheduler's four stages together, on a model GPU on simulated time.
#include "control/share_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "control/allocation.h"
#include "shm/launch_pacer.h"

namespace gpuslice::control {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;
constexpr int64_t kTick = std::chrono::nanoseconds(ShareScheduler::kPeriod).count();
constexpr int64_t kWindow = 200 * kMs;  // the H100's NVML window

// A model GPU under the scheduler's outputs, in steps of kStep. A batch group
// with turns runs only within its turn, kernels back to back, each started
// only if it ends by the turn's end (the launch gate's rule); a group without
// turns (a latency group, or any group while nobody takes turns) runs at its
// pace, min(grant, limit), taking its time before the turn's holder (its
// kernels come between the holder's). Each group offers `demand` of the
// device (1: saturating). Counters are what the launch gate and the cost
// meter would publish: launches, those completed, waits, and the kernel's
// true cost as the charge (a latency group's stays unknown: its launches are
// each waited for). NVML's device windows say what ran, in whole percent.
class ModelGpu {
 public:
  static constexpr int64_t kStep = 50 * kUs;

  struct Group {
    ShareScheduler::Input input;
    ShareScheduler::Output output;
    double demand = 1.0;
    int64_t kernel_ns = 1 * kMs;
    double ran_ns = 0;          // device time so far (ground truth)
    int64_t in_kernel = 0;      // progress in the kernel running; 0: none
    double free_ran = 0;        // a free group's fluid device time, in kernels
    bool blocked = false;       // wanted to run this tick and could not
    int cut = 0;                // turns' ends that cut it off this tick
    int64_t free_floor_ns = 0;  // a free latency group's least bracketed launch; 0: none
  };

  explicit ModelGpu(int64_t start_ns = 1'000'000 * kMs) : clock_(start_ns), scheduler_(clock_) {}

  Group& Add(const std::string& name, uint32_t request, int64_t kernel_ns, uint32_t limit = 100,
             uint32_t weight = 1, bool latency = false) {
    Group& g = groups_[name];
    g.input.group = name;
    g.input.request_percent = request;
    g.input.limit_percent = limit;
    g.input.weight = weight;
    g.input.latency = latency;
    g.kernel_ns = kernel_ns;
    return g;
  }
  Group& operator[](const std::string& name) { return groups_.at(name); }

  // One tick of device time, then a scheduler tick.
  void Step() {
    const int64_t t0 = clock_.NowNs();
    tick_start_ = t0;
    for (auto& [name, g] : groups_) {
      g.blocked = false;
      g.cut = 0;
    }
    for (int64_t t = t0; t < t0 + kTick; t += kStep) StepDevice(t);
    clock_.Advance(kTick);
    std::vector<ShareScheduler::Input> inputs;
    for (auto& [name, g] : groups_) {
      if (g.blocked) ++g.input.counters.waits;
      g.input.counters.waiting = g.blocked ? 1 : 0;  // its thread waits in the gate
      g.input.counters.cut_off += static_cast<uint64_t>(g.cut);
      // Measured alone in its turns; a latency group running free is only
      // bounded (its least bracketed launch: `free_floor_ns`).
      if (!g.input.latency || g.output.turn.period_ns > 0) g.input.counters.charge_ns = g.kernel_ns;
      if (g.input.latency && g.output.turn.period_ns <= 0) {
        g.input.counters.bound_floor_ns = g.free_floor_ns;
      }
      inputs.push_back(g.input);
    }
    std::vector<UsageMeter::BusyWindow> closed;
    if (clock_.NowNs() - window_start_ >= kWindow) {
      const double percent = std::round(100 * window_busy_ / static_cast<double>(kWindow));
      closed.push_back({clock_.NowNs(), kWindow, percent / 100});
      window_start_ = clock_.NowNs();
      window_busy_ = 0;
    }
    const std::vector<ShareScheduler::Output> out = scheduler_.Tick(inputs, closed);
    size_t i = 0;
    for (auto& [name, g] : groups_) g.output = out[i++];
  }
  void Run(int64_t ns) {
    for (int64_t t = 0; t < ns; t += kTick) {
      Step();
      if (const char* w = std::getenv("GPUSLICE_TEST_WATCH"); w != nullptr && groups_.contains(w)) {
        const Group& g = groups_.at(w);
        std::printf("t %lld ran %.1f ms grant %u turn %lld+%lld/%lld epoch %lld used %u held %d\n",
                    static_cast<long long>(clock_.NowNs() / kMs), g.ran_ns / 1e6, g.output.grant_bp,
                    static_cast<long long>(g.output.turn.begin_ns / kMs),
                    static_cast<long long>(g.output.turn.length_ns / kMs),
                    static_cast<long long>(g.output.turn.period_ns / kMs),
                    static_cast<long long>(g.output.turn.epoch_ns / kMs), g.output.used_bp,
                    g.output.wants_more);
      }
    }
  }
  // Each group's share of the device (percent of wall time) over the next `ns`.
  std::map<std::string, double> Measure(int64_t ns) {
    std::map<std::string, double> before;
    for (auto& [name, g] : groups_) before[name] = g.ran_ns;
    Run(ns);
    std::map<std::string, double> share;
    for (auto& [name, g] : groups_) {
      share[name] = 100 * (g.ran_ns - before[name]) / static_cast<double>(ns);
    }
    return share;
  }
  ShareScheduler& scheduler() { return scheduler_; }

 private:
  void StepDevice(int64_t t) {
    double left = static_cast<double>(kStep);
    // Groups without turns first, at their pace.
    for (auto& [name, g] : groups_) {
      if (g.input.paused || g.output.turn.period_ns > 0 || g.demand <= 0) continue;
      const uint32_t grant = g.output.grant_bp == 0 ? 10000 : g.output.grant_bp;
      const double pace = std::min<double>(grant, g.input.limit_percent * 100.0) / 10000.0;
      const double run = std::min({pace, g.demand, 1.0}) * kStep;
      if (g.demand > pace) g.blocked = true;
      const double got = std::min(run, left);
      left -= got;
      Account(g, got);
    }
    // The holder of the turn, whole kernels within it.
    for (auto& [name, g] : groups_) {
      const TurnPlan& p = g.output.turn;
      if (g.input.paused || p.period_ns <= 0 || g.demand <= 0) continue;
      if (left <= 0) break;
      const int64_t since = t - p.epoch_ns - p.begin_ns;
      const int64_t phase = ((since % p.period_ns) + p.period_ns) % p.period_ns;
      const bool whole = p.length_ns >= p.period_ns;
      if (!whole && phase >= p.length_ns) {
        g.blocked = true;                                   // waits for its turn
        if (p.length_ns == 0 && t == tick_start_) ++g.cut;  // none this cycle: held over
        continue;
      }
      const int64_t turn_left = whole ? INT64_MAX : p.length_ns - phase;
      // Its turn's end cuts off the launch it has ready (once a turn).
      const bool last_step = !whole && turn_left <= kStep;
      if (g.in_kernel == 0 && g.kernel_ns > turn_left) {  // does not fit: idle
        if (last_step) ++g.cut;
        continue;
      }
      if (last_step) ++g.cut;
      const double got = left * std::min(1.0, g.demand);
      left -= got;
      Account(g, got);
    }
    window_busy_ += static_cast<double>(kStep) - left;
  }
  void Account(Group& g, double ns) {
    if (ns <= 0) return;
    g.ran_ns += ns;
    if (g.output.turn.period_ns <= 0) {  // fluid
      const double before = g.free_ran;
      g.free_ran += ns / static_cast<double>(g.kernel_ns);
      const auto n = static_cast<uint64_t>(g.free_ran) - static_cast<uint64_t>(before);
      g.input.counters.launches += n;
      g.input.counters.completed += n;
      return;
    }
    if (g.in_kernel == 0) ++g.input.counters.launches;
    g.in_kernel += static_cast<int64_t>(ns);
    while (g.in_kernel >= g.kernel_ns) {
      g.in_kernel -= g.kernel_ns;
      ++g.input.counters.completed;
      if (g.in_kernel > 0) ++g.input.counters.launches;
    }
  }

  SimulatedClock clock_;
  int64_t tick_start_ = 0;
  ShareScheduler scheduler_;
  std::map<std::string, Group> groups_;
  int64_t window_start_ = clock_.NowNs();
  double window_busy_ = 0;
};

TEST(ShareSchedulerTest, SaturatingGroupsGetTheirRequestsWhateverTheirKernels) {
  for (const bool reversed : {false, true}) {
    ModelGpu gpu;
    const std::vector<int64_t> kernels = {20 * kUs, 200 * kUs, 2 * kMs, 20 * kMs};
    for (int i = 0; i < 4; ++i) {
      gpu.Add("r" + std::to_string(10 * (i + 1)), 10 * (i + 1), kernels[reversed ? 3 - i : i]);
    }
    gpu.Run(3000 * kMs);
    const std::map<std::string, double> share = gpu.Measure(5000 * kMs);
    for (int i = 0; i < 4; ++i) {
      const std::string name = "r" + std::to_string(10 * (i + 1));
      EXPECT_NEAR(share.at(name), 10.0 * (i + 1), 2) << name << (reversed ? " reversed" : "");
    }
    // Every turn holds only the batch groups, and the device is busy.
    EXPECT_EQ(gpu["r10"].output.queue_ns, 0);
    EXPECT_GT(gpu["r10"].output.turn.period_ns, 0);
  }
}

TEST(ShareSchedulerTest, ACappedGroupThatWantsMoreReachesItsCapBesideALatencyGroup) {
  // The demo's promises: training request 40, notebook capped at 10 with
  // weight 6, inference in the latency class with request 20.
  ModelGpu gpu;
  gpu.Add("training", 40, 2 * kMs);
  gpu.Add("notebook", 0, 500 * kUs, /*limit=*/10, /*weight=*/6);
  ModelGpu::Group& inference = gpu.Add("inference", 20, 1 * kMs, 100, 1, /*latency=*/true);
  inference.demand = 0.15;  // one request at a time
  gpu.Run(3000 * kMs);
  const std::map<std::string, double> share = gpu.Measure(5000 * kMs);
  EXPECT_GE(share.at("notebook"), 8);
  EXPECT_LE(share.at("notebook"), 10.5);
  EXPECT_GE(share.at("training"), 38);
  EXPECT_NEAR(share.at("inference"), 15, 1);
  EXPECT_GE(share.at("training") + share.at("notebook") + share.at("inference"), 93);
  // What the scheduler says each ran is the model's truth.
  EXPECT_NEAR(gpu["notebook"].output.used_bp / 100.0, share.at("notebook"), 1);
  EXPECT_NEAR(gpu["inference"].output.used_bp / 100.0, share.at("inference"), 1.5);
  // The latency group has no turns, the batch groups' queues are bounded.
  EXPECT_EQ(gpu["inference"].output.turn.period_ns, 0);
  EXPECT_EQ(gpu["training"].output.queue_ns, ShareScheduler::kLatencyQueueNs);
}

// The demo's inference as it is: each request waited for and sent at once
// (it wants more than its request), its least bracketed launch 1.15 ms (its
// 1 ms kernel and a switch). Beside the turns it would
// run in every gap and in every holder's measured time; it takes turns
// instead, gets its request and the others theirs, and every figure is
// measured alone.
TEST(ShareSchedulerTest, ALatencyGroupThatWantsMoreThanItCanRunFreeTakesTurns) {
  ModelGpu gpu;
  gpu.Add("training", 40, 2 * kMs);
  gpu.Add("notebook", 0, 500 * kUs, /*limit=*/10, /*weight=*/6);
  ModelGpu::Group& inference = gpu.Add("inference", 20, 1 * kMs, 100, 1, /*latency=*/true);
  inference.free_floor_ns = 1150 * kUs;  // its kernel and a switch
  gpu.Run(3000 * kMs);
  const std::map<std::string, double> share = gpu.Measure(5000 * kMs);
  EXPECT_GT(gpu["inference"].output.turn.period_ns, 0);
  EXPECT_EQ(gpu["training"].output.queue_ns, 0);  // no latency group runs free
  EXPECT_GE(share.at("inference"), 18);
  EXPECT_GE(share.at("training"), 38);
  EXPECT_GE(share.at("notebook"), 8);
  EXPECT_LE(share.at("notebook"), 10.5);
  EXPECT_GE(share.at("training") + share.at("notebook") + share.at("inference"), 93);
  EXPECT_NEAR(gpu["inference"].output.used_bp / 100.0, share.at("inference"), 1);

  // Once it wants little (a request now and then), it runs free again.
  inference.demand = 0.05;
  inference.free_floor_ns = 1150 * kUs;
  gpu.Run(3000 * kMs);
  EXPECT_EQ(gpu["inference"].output.turn.period_ns, 0);
  EXPECT_EQ(gpu["training"].output.queue_ns, ShareScheduler::kLatencyQueueNs);
}

TEST(ShareSchedulerTest, IdleShareIsLentAndReturnedWithinASecond) {
  ModelGpu gpu;
  gpu.Add("a", 50, 1 * kMs);
  gpu.Add("b", 0, 1 * kMs);
  gpu.Add("c", 0, 1 * kMs);
  gpu.Run(3000 * kMs);
  EXPECT_NEAR(gpu.Measure(2000 * kMs).at("a"), 50 + 50 / 3.0, 2.5);
  gpu["a"].demand = 0;
  gpu.Run(1000 * kMs);
  const std::map<std::string, double> idle = gpu.Measure(2000 * kMs);
  EXPECT_GE(idle.at("b") + idle.at("c"), 95);
  gpu["a"].demand = 1;
  gpu.Run(1000 * kMs);
  EXPECT_GE(gpu.Measure(1000 * kMs).at("a"), 48);
}

TEST(ShareSchedulerTest, APausedGroupGetsNothingAndItsShareIsLent) {
  ModelGpu gpu;
  gpu.Add("a", 50, 1 * kMs);
  gpu.Add("b", 0, 1 * kMs);
  gpu.Run(2000 * kMs);
  gpu["a"].input.paused = true;
  gpu.Run(500 * kMs);
  const std::map<std::string, double> paused = gpu.Measure(2000 * kMs);
  EXPECT_EQ(gpu["a"].output.grant_bp, 0u);
  EXPECT_TRUE(gpu["a"].output.paused);
  EXPECT_LT(paused.at("a"), 0.01);
  EXPECT_GE(paused.at("b"), 95);
  gpu["a"].input.paused = false;
  gpu.Run(1000 * kMs);
  EXPECT_GE(gpu.Measure(1000 * kMs).at("a"), 48);
}

TEST(ShareSchedulerTest, LimitsAreNeverExceededAndALoneGroupGetsItsLimit) {
  ModelGpu gpu;
  gpu.Add("capped", 0, 20 * kMs, /*limit=*/30);
  gpu.Run(2000 * kMs);
  EXPECT_NEAR(gpu.Measure(3000 * kMs).at("capped"), 30, 1);
  gpu.Add("other", 0, 1 * kMs);
  gpu.Run(2000 * kMs);
  const std::map<std::string, double> share = gpu.Measure(3000 * kMs);
  // Its turns hold whole 20 ms launches: over 3 s one more or less is 0.7.
  EXPECT_LE(share.at("capped"), 31);
  EXPECT_GE(share.at("capped") + share.at("other"), 95);
}

TEST(ShareSchedulerTest, AGroupMissingFromATickIsForgotten) {
  SimulatedClock clock(1000 * kMs);
  ShareScheduler s(clock);
  ShareScheduler::Input a;
  a.group = "a";
  a.request_percent = 50;
  ShareScheduler::Input b = a;
  b.group = "b";
  a.counters.charge_ns = b.counters.charge_ns = kMs;
  for (int i = 0; i < 20; ++i) {
    clock.Advance(kTick);
    a.counters.launches += 50;
    a.counters.completed += 50;
    a.counters.waits += 1;
    a.counters.cut_off += 1;
    b.counters = a.counters;
    ASSERT_EQ(s.Tick({a, b}, {}).size(), 2u);
  }
  clock.Advance(kTick);
  const std::vector<ShareScheduler::Output> out = s.Tick({b}, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].group, "b");
  EXPECT_EQ(out[0].grant_bp, 10000u);  // alone: the whole device
}

TEST(ShareSchedulerTest, HundredGroupsTenWithRequests) {
  ModelGpu gpu;
  for (int i = 0; i < 100; ++i) {
    const int64_t kernels[] = {20 * kUs, 200 * kUs, 2 * kMs, 20 * kMs};
    gpu.Add("g" + std::to_string(i), i < 10 ? 5 : 0, kernels[i % 4]);
  }
  gpu.Run(5000 * kMs);
  const std::map<std::string, double> share = gpu.Measure(10'000 * kMs);
  double worst = 0;
  double busy = 0;
  double lo[2] = {100, 100};
  double hi[2] = {0, 0};
  const double capacity = gpu.scheduler().capacity_bp() / 100.0;
  for (int i = 0; i < 100; ++i) {
    const double s = share.at("g" + std::to_string(i));
    busy += s;
    // Each request of the capacity, the rest shared equally.
    const double expect =
        (i < 10 ? 5 * capacity / 100 : 0) + (capacity - 50 * capacity / 100) / 100;
    EXPECT_NEAR(s, expect, 2) << i;
    if (std::getenv("GPUSLICE_TEST_DEBUG") != nullptr) {
      std::printf("g%d %.2f (expect %.2f) grant %u turn %lld/%lld wants %d\n", i, s, expect,
                  gpu["g" + std::to_string(i)].output.grant_bp,
                  static_cast<long long>(gpu["g" + std::to_string(i)].output.turn.length_ns),
                  static_cast<long long>(gpu["g" + std::to_string(i)].output.turn.period_ns),
                  gpu["g" + std::to_string(i)].output.wants_more ? 1 : 0);
    }
    worst = std::max(worst, std::abs(s - expect));
    lo[i < 10 ? 0 : 1] = std::min(lo[i < 10 ? 0 : 1], s);
    hi[i < 10 ? 0 : 1] = std::max(hi[i < 10 ? 0 : 1], s);
  }
  EXPECT_GT(busy, 90);
  std::printf(
      "model 100 groups: request-5 %.2f..%.2f, others %.2f..%.2f, max err %.2f, device busy "
      "%.1f%%, capacity %.1f%%, cycle %lld ms\n",
      lo[0], hi[0], lo[1], hi[1], worst, busy, capacity,
      static_cast<long long>(gpu.scheduler().turns().period_ns() / kMs));

  // CPU cost of the scheduler's tick alone (the model's excluded), printed.
  SimulatedClock clock(1000 * kMs);
  ShareScheduler scheduler(clock);
  std::vector<ShareScheduler::Input> inputs(100);
  for (int i = 0; i < 100; ++i) {
    inputs[i].group = "g" + std::to_string(i);
    inputs[i].request_percent = 1;
    inputs[i].counters.charge_ns = 1'000'000;
  }
  constexpr int kTicks = 500;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < kTicks; ++t) {
    clock.Advance(kTick);
    for (auto& in : inputs) {
      in.counters.launches += 9;
      in.counters.completed += 9;
      in.counters.waits += 1;
    }
    ASSERT_EQ(scheduler.Tick(inputs, {}).size(), 100u);
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      kTicks;
  std::printf("ShareScheduler::Tick with 100 groups: %.1f us CPU per tick\n", us);
}

}  // namespace
}  // namespace gpuslice::control
