// The compute controller's logic (cost estimator + pacer) against a model of
// a shared device on a simulated clock: a tenant that launches kernels of a
// known device time (asynchronously or synchronising after each), a device
// that other tenants' slices take away from it, and NVML windows that close
// late and round to whole percent. Each case checks the share the model's
// ground truth says the tenant got.
#include "control/cost_estimator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <vector>

#include "shm/launch_pacer.h"

namespace gpuslice::control {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;
constexpr int64_t kSec = 1000 * kMs;

struct PlantOptions {
  int64_t kernel_ns = 2 * kMs;
  bool sync = false;
  uint32_t limit = 30;
  double competitor = 0;  // share of device time other tenants take
  int64_t nvml_window_ns = 166'666'667;
  int64_t nvml_lag_ns = 0;  // extra delay before a closed window is visible
  int64_t probe_ns = 0;     // bootstrap charge (0: 1.5 x kernel)
  int64_t step_ns = 10 * kUs;
};

// A device with one paced tenant. Everything advances in Step().
class Plant {
 public:
  explicit Plant(const PlantOptions& o) : o_(o), limit_(o.limit) {}

  void set_limit(uint32_t l) { limit_ = l; }
  void set_running(bool r) { running_ = r; }
  void set_kernel_ns(int64_t k) { o_.kernel_ns = k; }

  void RunUntil(int64_t t_ns) {
    while (now_ < t_ns) Step();
  }

  // The tenant's ground-truth share of (from, to].
  double Share(int64_t from, int64_t to) const {
    int64_t busy = 0;
    for (auto i = static_cast<size_t>(from / o_.step_ns);
         i < static_cast<size_t>(to / o_.step_ns) && i < busy_steps_.size(); ++i) {
      busy += busy_steps_[i] ? o_.step_ns : 0;
    }
    return static_cast<double>(busy) / static_cast<double>(to - from);
  }

  // Shares of consecutive 1 s windows in (from, to].
  std::vector<double> SecondShares(int64_t from, int64_t to) const {
    std::vector<double> out;
    for (int64_t t = from; t + kSec <= to; t += kSec) out.push_back(Share(t, t + kSec));
    return out;
  }

  int64_t charge_ns() const { return charge_ns_; }

 private:
  bool CompetitorHolds() const {
    if (o_.competitor <= 0) return false;
    constexpr int64_t kPeriod = 4 * kMs;  // others' slices, interleaved with ours
    return static_cast<double>(now_ % kPeriod) < o_.competitor * kPeriod;
  }

  void Launch() {
    const int64_t charge = charge_ns_ > 0    ? charge_ns_
                           : o_.probe_ns > 0 ? o_.probe_ns
                                             : o_.kernel_ns * 3 / 2;
    while (running_ && (!o_.sync || queue_.empty()) && queue_.size() < 1024) {
      if (TryAdmit(std::atomic_ref<int64_t>(next_free_), now_, PacedIntervalNs(charge, limit_)) !=
          0) {
        return;
      }
      queue_.push_back(o_.kernel_ns);
      ++launches_;
    }
  }

  void Step() {
    Launch();
    bool busy = false;
    if (!queue_.empty() && !CompetitorHolds()) {
      busy = true;
      queue_.front() -= o_.step_ns;
      if (queue_.front() <= 0) queue_.pop_front();
    }
    busy_steps_.push_back(busy);
    window_busy_ += busy ? o_.step_ns : 0;
    now_ += o_.step_ns;
    if (now_ >= window_start_ + o_.nvml_window_ns) {
      const double pct = std::round(100.0 * static_cast<double>(window_busy_) /
                                    static_cast<double>(o_.nvml_window_ns));
      closed_.push_back({window_start_, now_, pct / 100});
      window_start_ = now_;
      window_busy_ = 0;
    }
    if (now_ % (50 * kMs) == 0) Tick();
  }

  // The controller: records launches, takes the NVML windows that are visible.
  void Tick() {
    estimator_.RecordLaunches(now_, launches_);
    while (!closed_.empty() && closed_.front().end + o_.nvml_lag_ns <= now_) {
      estimator_.AddBusy(closed_.front().start, closed_.front().end, closed_.front().fraction);
      closed_.pop_front();
    }
    if (int64_t c = estimator_.CostNs(); c > 0) charge_ns_ = c;
  }

  struct Window {
    int64_t start, end;
    double fraction;
  };

  PlantOptions o_;
  uint32_t limit_;
  bool running_ = true;
  int64_t now_ = 0;
  int64_t next_free_ = 0;
  uint64_t launches_ = 0;
  int64_t charge_ns_ = 0;
  std::deque<int64_t> queue_;
  std::vector<bool> busy_steps_;
  int64_t window_start_ = 0;
  int64_t window_busy_ = 0;
  std::deque<Window> closed_;
  CostEstimator estimator_;
};

struct Case {
  int64_t kernel_ns;
  uint32_t limit;
  bool sync;
};

class SteadyState : public ::testing::TestWithParam<Case> {};

// After a 2 s start-up, the mean share is within a point of the limit and no
// 1 s window exceeds it by 5.
TEST_P(SteadyState, MeanShareMatchesTheLimit) {
  const Case c = GetParam();
  PlantOptions o;
  o.kernel_ns = c.kernel_ns;
  o.limit = c.limit;
  o.sync = c.sync;
  Plant plant(o);
  plant.RunUntil(14 * kSec);
  EXPECT_NEAR(plant.Share(4 * kSec, 14 * kSec), c.limit / 100.0, 0.01);
  for (double s : plant.SecondShares(2 * kSec, 14 * kSec)) EXPECT_LE(s, (c.limit + 5) / 100.0);
  EXPECT_NEAR(static_cast<double>(plant.charge_ns()), static_cast<double>(c.kernel_ns),
              0.1 * static_cast<double>(c.kernel_ns));
}

std::vector<Case> SteadyCases() {
  std::vector<Case> out;
  for (int64_t k : {200 * kUs, 2 * kMs, 20 * kMs}) {
    for (uint32_t l : {10u, 30u, 50u, 70u}) {
      for (bool sync : {false, true}) out.push_back({k, l, sync});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(KernelsLimitsSync, SteadyState, ::testing::ValuesIn(SteadyCases()),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param.kernel_ns / kUs) + "us_" +
                                  std::to_string(param_info.param.limit) + "pct_" +
                                  (param_info.param.sync ? "sync" : "async");
                         });

TEST(CostEstimatorPlant, OtherTenantsSlicesDoNotCountAgainstTheGroup) {
  PlantOptions o;
  o.limit = 30;
  o.competitor = 0.4;
  Plant plant(o);
  plant.RunUntil(14 * kSec);
  EXPECT_NEAR(plant.Share(4 * kSec, 14 * kSec), 0.30, 0.015);
}

TEST(CostEstimatorPlant, SlowAndLateSamplesStillConverge) {
  PlantOptions o;
  o.limit = 50;
  o.nvml_window_ns = kSec;
  o.nvml_lag_ns = 500 * kMs;
  o.sync = true;
  Plant plant(o);
  plant.RunUntil(20 * kSec);
  EXPECT_NEAR(plant.Share(6 * kSec, 20 * kSec), 0.50, 0.015);
  for (double s : plant.SecondShares(3 * kSec, 20 * kSec)) EXPECT_LE(s, 0.55);
}

TEST(CostEstimatorPlant, AnOptimisticBootstrapIsCorrectedWithinTheHorizon) {
  PlantOptions o;
  o.limit = 30;
  o.probe_ns = o.kernel_ns / 4;  // four times too cheap: the tenant overshoots at first
  Plant plant(o);
  plant.RunUntil(12 * kSec);
  EXPECT_NEAR(plant.Share(4 * kSec, 12 * kSec), 0.30, 0.01);
}

TEST(CostEstimatorPlant, LimitChangesTakeEffectWithinASecond) {
  PlantOptions o;
  o.limit = 30;
  Plant plant(o);
  plant.RunUntil(8 * kSec);
  plant.set_limit(70);
  plant.RunUntil(12 * kSec);
  EXPECT_NEAR(plant.Share(9 * kSec, 10 * kSec), 0.70, 0.05);
  plant.set_limit(10);
  plant.RunUntil(16 * kSec);
  EXPECT_NEAR(plant.Share(13 * kSec, 14 * kSec), 0.10, 0.05);
}

TEST(CostEstimatorPlant, ATenantThatPausesDoesNotBurstWhenItResumes) {
  PlantOptions o;
  o.limit = 30;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_running(false);
  plant.RunUntil(10 * kSec);
  EXPECT_EQ(plant.Share(int64_t{6} * kSec + 100 * kMs, 10 * kSec), 0.0);
  plant.set_running(true);
  plant.RunUntil(16 * kSec);
  for (double s : plant.SecondShares(10 * kSec, 16 * kSec)) EXPECT_LE(s, 0.35);
  EXPECT_NEAR(plant.Share(11 * kSec, 16 * kSec), 0.30, 0.015);
}

TEST(CostEstimatorPlant, AChangeOfKernelLengthIsRelearned) {
  PlantOptions o;
  o.limit = 50;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(200 * kUs);  // ten times cheaper: under-uses until relearned
  plant.RunUntil(16 * kSec);
  EXPECT_NEAR(plant.Share(10 * kSec, 16 * kSec), 0.50, 0.015);
}

TEST(CostEstimator, NoEstimateWithoutEnoughEvidence) {
  CostEstimator e;
  EXPECT_EQ(e.CostNs(), 0);
  e.RecordLaunches(0, 0);
  e.RecordLaunches(100 * kMs, 10);
  e.AddBusy(0, 100 * kMs, 0.5);
  EXPECT_EQ(e.CostNs(), 0);  // 100 ms of evidence: too little
  e.RecordLaunches(500 * kMs, 50);
  e.AddBusy(100 * kMs, 500 * kMs, 0.5);
  EXPECT_EQ(e.CostNs(), 5 * kMs);  // 250 ms busy / 50 launches
}

TEST(CostEstimator, InterpolatesLaunchesAndIgnoresIdleSpans) {
  CostEstimator e;
  e.RecordLaunches(0, 0);
  e.RecordLaunches(kSec, 100);
  EXPECT_DOUBLE_EQ(e.LaunchesBetween(250 * kMs, 750 * kMs), 50.0);
  e.AddBusy(0, kSec, 0.2);  // 100 launches, 200 ms: 2 ms each
  e.RecordLaunches(3 * kSec, 100);
  e.AddBusy(kSec, 3 * kSec, 0.0);  // idle
  EXPECT_EQ(e.CostNs(), 2 * kMs);
  EXPECT_NEAR(e.RecentShare(kSec), 0.0, 1e-9);
  EXPECT_NEAR(e.RecentShare(3 * kSec), 0.2 / 3, 1e-9);
}

TEST(LaunchPacer, AdmitsWithinTheBurstThenSpacesLaunches) {
  int64_t next_free = 0;
  std::atomic_ref<int64_t> nf(next_free);
  const int64_t interval = PacedIntervalNs(2 * kMs, 50);  // 4 ms of wall time
  EXPECT_EQ(interval, 4 * kMs);
  int admitted = 0;
  while (TryAdmit(nf, 0, interval, 20 * kMs) == 0) ++admitted;
  EXPECT_EQ(admitted, 6);  // 0, 4, ..., 20 ms: admitted while next_free <= 20 ms
  EXPECT_EQ(TryAdmit(nf, 0, interval, 20 * kMs), 4 * kMs);
  EXPECT_EQ(TryAdmit(nf, 4 * kMs, interval, 20 * kMs), 0);
  // Idle time is not banked beyond the burst.
  EXPECT_EQ(TryAdmit(nf, 10 * kSec, interval, 20 * kMs), 0);
  EXPECT_EQ(next_free, 10 * kSec + interval);
}

}  // namespace
}  // namespace gpuslice::control
