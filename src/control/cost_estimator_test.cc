// The compute controller's logic (cost estimator + pacer) against a model of
// a shared device on a simulated clock: a tenant that launches kernels of a
// known device time (asynchronously or synchronising after each), a device
// that other tenants' slices take away from it, and NVML windows that close
// late and round to whole percent. Each case checks the share the model's
// ground truth says the tenant got.
#include "control/cost_estimator.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "control/compute_controller.h"
#include "control/share_correction.h"
#include "shm/launch_pacer.h"
#include "shm/progress_watch.h"

namespace gpuslice::control {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;
constexpr int64_t kSec = 1000 * kMs;
// The launch gate's sleeps: polling a draining stream, and the most a thread
// waiting for its budget sleeps while its stream has markers pending.
constexpr int64_t kDrainNapNs = 200 * kUs;
constexpr int64_t kWatchNapNs = 1 * kMs;

struct PlantOptions {
  int64_t kernel_ns = 2 * kMs;
  bool sync = false;
  uint32_t limit = 30;
  double competitor = 0;  // share of device time other tenants take
  int64_t nvml_window_ns = 166'666'667;
  int64_t nvml_lag_ns = 0;  // extra delay before a closed window is visible
  // The controller does not tick in [stall_from_ns, stall_from_ns +
  // stall_ns) (its thread descheduled on a loaded host).
  int64_t stall_from_ns = 0;
  int64_t stall_ns = 0;
  int64_t probe_ns = 0;  // bootstrap charge (0: 1.5 x kernel)
  int64_t step_ns = 10 * kUs;
  bool backlog_watch = true;  // the launch gate's (shm/progress_watch.h)
  // A member waiting for its budget sleeps as the launch gate does (until
  // half the burst is free; while markers are pending, at most a nap).
  bool sleeps = true;
  // Each member charged by its own estimate (its own NVML samples over its
  // own launches, as ComputeController does); false: one charge for the
  // whole group (the group's busy time over all its launches).
  bool per_member = true;
  // The controller multiplies charges by the measured share's correction
  // (ShareCorrection), as ComputeController does.
  bool closed_loop = true;
  // The estimates multiplied by this (an estimate that lags too high, as
  // after a backlog of longer kernels; or too low).
  double estimate_bias = 1.0;
  // The controller counts a launch when the member has seen it complete (its
  // markers; SlotCompute::queued), as ComputeController does; false: when it
  // was admitted (before issues 13 and 14). Without the backlog watch (no
  // markers) launches are counted when admitted either way.
  bool count_at_completion = true;
  // After a drain the launch gate charges at least what the drain measured
  // per launch (ChargeFloor); false: the gate before issue 14's fix.
  bool drain_floor = true;
  CostEstimator::Options estimator;
};

// A device with one paced group of one or more members (processes, each
// with one stream). Everything advances in Step(). Members' queues share the
// device by round-robin time slices of 1 ms, as contexts do. NVML's windows
// report each member's busy share, rounded to whole percent.
class Plant {
 public:
  explicit Plant(const PlantOptions& o) : o_(o), limit_(o.limit), estimator_(o.estimator) {
    members_.emplace_back(o.kernel_ns, o.sync, o.estimator);
    // The controller's first look, before the first launch (the first NVML
    // window starts there too).
    estimator_.RecordLaunches(0, 0);
    members_[0].estimator.RecordLaunches(0, 0);
  }

  void set_limit(uint32_t l) { limit_ = l; }
  void set_running(bool r) { members_[0].running = r; }
  // The scheduler holds the group: its members launch nothing (their queues
  // drain) until released.
  void set_held(bool h) { held_ = h; }
  void set_kernel_ns(int64_t k) { members_[0].kernel_ns = k; }
  // Adds a member launching kernels of `kernel_ns`; returns its index.
  size_t AddMember(int64_t kernel_ns, bool sync = false) {
    members_.emplace_back(kernel_ns, sync, o_.estimator);
    return members_.size() - 1;
  }
  // A member leaves: it launches no more and its queued work is dropped
  // (the process exited).
  void RemoveMember(size_t m) {
    members_[m].running = false;
    members_[m].done += members_[m].queue.size();
    members_[m].queue.clear();
    members_[m].watch.Drained(now_);  // its slot goes: nothing of it is queued
    members_[m].confirmed += members_[m].watch.TakeConfirmed();
  }

  void RunUntil(int64_t t_ns) {
    while (now_ < t_ns) Step();
  }

  // The group's ground-truth share of (from, to].
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
  // The highest share of any 1 s window in (from, to], in 100 ms steps.
  double MaxSecond(int64_t from, int64_t to) const {
    double best = 0;
    for (int64_t t = from; t + kSec <= to; t += 100 * kMs)
      best = std::max(best, Share(t, t + kSec));
    return best;
  }

  // The charge of member 0's launches.
  int64_t charge_ns() const { return o_.per_member ? members_[0].charge_ns : charge_ns_; }
  // The estimator of member 0's charge.
  double factor() const { return correction_.factor(); }
  // Workload changes every estimator detected.
  uint64_t shifts() const {
    uint64_t n = estimator_.shifts();
    for (const Member& m : members_) n += m.estimator.shifts();
    return n;
  }
  const CostEstimator& estimator() const {
    return o_.per_member ? members_[0].estimator : estimator_;
  }

 private:
  struct Window {
    int64_t start, end;
    double fraction;
  };
  struct Member {
    Member(int64_t k, bool s, const CostEstimator::Options& e)
        : kernel_ns(k), sync(s), estimator(e) {}
    int64_t kernel_ns;
    bool sync;
    // Per-member charging: its launches, its NVML windows, its estimate.
    uint64_t launches = 0;
    int64_t window_busy = 0;
    std::deque<Window> closed;
    CostEstimator estimator;
    int64_t charge_ns = 0;
    bool running = true;
    std::deque<int64_t> queue;
    ProgressWatch watch;                                     // the backlog watch's state
    ChargeFloor floor;                                       // what its last drain measured
    std::array<uint64_t, ProgressWatch::kMarkers> marker{};  // completes when `done` reaches it
    uint64_t done = 0;                                       // kernels completed
    uint64_t confirmed = 0;   // launches the member saw complete (its markers)
    int64_t launched_at = 0;  // its last launch
    uint64_t counted = 0;     // what the controller counted (never decreasing)
    CompletedLaunches completed;
    bool draining = false;  // a marker missed its deadline: waits for an empty queue
    int64_t wake_at = 0;    // the launching thread sleeps until then
  };

  bool CompetitorHolds() const {
    if (o_.competitor <= 0) return false;
    constexpr int64_t kPeriod = 4 * kMs;  // others' slices, interleaved with ours
    return static_cast<double>(now_ % kPeriod) < o_.competitor * kPeriod;
  }

  void Launch(Member& m) {
    // Before an estimate, the bootstrap probe: an upper bound of the
    // member's own kernel (the group's first member's, when charged as one).
    // After a drain, at least what it measured (ChargeFloor), unless the
    // plant models the gate before issue 14's fix.
    const int64_t own = o_.per_member ? m.charge_ns : charge_ns_;
    const int64_t bootstrap = o_.per_member ? m.kernel_ns : members_[0].kernel_ns;
    int64_t charge = 0;
    int64_t interval = 0;
    const auto recharge = [&] {
      charge = own > 0 ? own : o_.probe_ns > 0 ? o_.probe_ns : bootstrap * 3 / 2;
      if (own > 0 && o_.drain_floor) charge = m.floor.Apply(now_, charge);
      interval = PacedIntervalNs(charge, limit_);
    };
    recharge();
    if (now_ < m.wake_at) return;
    const auto done = [&](int i) { return m.done >= m.marker[i]; };
    if (held_ && m.running) {
      // Held: the launching thread waits in the gate, following its markers.
      if (m.watch.Poll(now_, done) > 0) m.wake_at = now_ + kWatchNapNs;
      m.confirmed += m.watch.TakeConfirmed();
      return;
    }
    while (m.running && (!m.sync || m.queue.empty()) && m.queue.size() < 1024) {
      if (o_.backlog_watch) {
        if (m.draining) {
          if (!m.queue.empty()) {
            m.watch.Poll(now_, done);  // the drain follows the markers
            m.confirmed += m.watch.TakeConfirmed();
            m.wake_at = now_ + kDrainNapNs;  // polls
            return;
          }
          m.draining = false;
          m.watch.Drained(now_);
          m.floor.Measured(now_, m.watch.TakeDrainedCost(), charge, limit_ * 100, false);
          recharge();
        }
        const auto verdict = m.watch.Check(now_, kPacerBurstNs * limit_ / 100, limit_ * 100, done);
        m.confirmed += m.watch.TakeConfirmed();
        if (verdict == ProgressWatch::Verdict::kBacklog) {
          m.draining = true;
          m.watch.DrainBegan(now_);
          continue;
        }
      }
      if (const int64_t wait = TryAdmit(std::atomic_ref<int64_t>(next_free_), now_, interval);
          wait != 0) {
        ++waits_;
        if (o_.sleeps) {
          int64_t nap = wait + kPacerBurstNs / 2;
          if (o_.backlog_watch && m.watch.pending() > 0) nap = std::min(nap, kWatchNapNs);
          m.wake_at = now_ + nap;
        }
        return;
      }
      m.queue.push_back(m.kernel_ns);
      ++launches_;
      ++m.launches;
      m.launched_at = now_;
      if (o_.backlog_watch) {
        if (const int i = m.watch.Launched(now_, charge); i >= 0) {
          m.marker[i] = m.done + m.queue.size();
          m.watch.Marked(now_);
        }
      } else {
        ++m.confirmed;  // no markers: counted when admitted
      }
    }
  }

  void Step() {
    for (size_t i = 0; i < members_.size(); ++i) {
      Launch(members_[(i + rotate_) % members_.size()]);
    }
    ++rotate_;
    bool busy = false;
    if (!CompetitorHolds()) {
      // Time slices of 1 ms between the members that have work.
      for (size_t i = 0; i < members_.size(); ++i) {
        Member& m = members_[(slice_owner_ + i) % members_.size()];
        if (m.queue.empty()) continue;
        slice_owner_ = (slice_owner_ + i) % members_.size();
        busy = true;
        m.window_busy += o_.step_ns;
        m.queue.front() -= o_.step_ns;
        if (m.queue.front() <= 0) {
          m.queue.pop_front();
          ++m.done;
        }
        break;
      }
      if (now_ % kMs == 0) slice_owner_ = (slice_owner_ + 1) % members_.size();
    }
    busy_steps_.push_back(busy);
    window_busy_ += busy ? o_.step_ns : 0;
    now_ += o_.step_ns;
    if (now_ >= window_start_ + o_.nvml_window_ns) {
      const double pct = std::round(100.0 * static_cast<double>(window_busy_) /
                                    static_cast<double>(o_.nvml_window_ns));
      closed_.push_back({window_start_, now_, pct / 100});
      for (Member& m : members_) {
        const double own = std::round(100.0 * static_cast<double>(m.window_busy) /
                                      static_cast<double>(o_.nvml_window_ns));
        m.closed.push_back({window_start_, now_, own / 100});
        m.window_busy = 0;
      }
      window_start_ = now_;
      window_busy_ = 0;
    }
    const bool stalled = now_ >= o_.stall_from_ns && now_ < o_.stall_from_ns + o_.stall_ns;
    if (now_ % (50 * kMs) == 0 && !stalled) Tick();
  }

  // The controller: records launches, takes the NVML windows that are visible.
  void Tick() {
    // Each member's launches as the controller counts them: when seen
    // complete, or all of them once it has launched nothing for
    // kQueueSettleNs (ComputeController::RecordSlots).
    uint64_t counted = 0;
    bool queued = false;
    for (Member& m : members_) {
      const bool settled = now_ - m.launched_at >= ComputeController::kQueueSettleNs;
      m.counted =
          std::max(m.counted, !o_.count_at_completion || settled ? m.launches : m.confirmed);
      counted += m.counted;
      queued = queued || m.counted < m.launches;
    }
    completed_.Record(estimator_, now_, counted, queued);
    bool window_closed = false;
    while (!closed_.empty() && closed_.front().end + o_.nvml_lag_ns <= now_) {
      estimator_.AddBusy(closed_.front().start, closed_.front().end, closed_.front().fraction);
      closed_.pop_front();
      window_closed = true;
    }
    uint64_t shifts = estimator_.shifts();
    for (const Member& m : members_) shifts += m.estimator.shifts();
    if (shifts != shifts_seen_) {
      shifts_seen_ = shifts;
      correction_.Hold(now_);
    }
    if (window_closed && o_.closed_loop) {
      correction_.Update(now_, estimator_.RecentShare(ShareCorrection::kWindowNs), limit_ / 100.0,
                         std::max(charge_ns_, members_[0].charge_ns), waits_ != waits_seen_);
      waits_seen_ = waits_;
    }
    const double factor = correction_.factor();
    if (int64_t c = estimator_.CostNs(); c > 0) {
      charge_ns_ = static_cast<int64_t>(static_cast<double>(c) * o_.estimate_bias * factor);
    }
    for (Member& m : members_) {
      m.completed.Record(m.estimator, now_, m.counted, m.counted < m.launches);
      while (!m.closed.empty() && m.closed.front().end + o_.nvml_lag_ns <= now_) {
        m.estimator.AddBusy(m.closed.front().start, m.closed.front().end,
                            m.closed.front().fraction);
        m.closed.pop_front();
      }
      if (int64_t c = m.estimator.CostNs(); c > 0) {
        m.charge_ns = static_cast<int64_t>(static_cast<double>(c) * o_.estimate_bias * factor);
      }
    }
  }

  PlantOptions o_;
  uint32_t limit_;
  std::vector<Member> members_;
  size_t rotate_ = 0;
  size_t slice_owner_ = 0;
  int64_t now_ = 0;
  int64_t next_free_ = 0;
  uint64_t launches_ = 0;
  int64_t charge_ns_ = 0;
  std::vector<bool> busy_steps_;
  int64_t window_start_ = 0;
  int64_t window_busy_ = 0;
  std::deque<Window> closed_;
  CostEstimator estimator_;
  ShareCorrection correction_;
  uint64_t shifts_seen_ = 0;
  uint64_t waits_ = 0;  // launches that waited for budget
  uint64_t waits_seen_ = 0;
  bool held_ = false;
  CompletedLaunches completed_;  // the group's
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

// ---- workload changes (DESIGN.md section 8): after the first second that
// follows a change, no 1 s window above cap + 5 and the 10 s mean within 2
// points of the cap ----

void ExpectCapHolds(const Plant& plant, int64_t change_ns, uint32_t cap) {
  const int64_t from = change_ns + kSec;
  const int64_t to = from + 10 * kSec;
  if (getenv("PLANT_TRACE") != nullptr) {
    for (int64_t t = change_ns - kSec; t < to; t += 250 * kMs) {
      printf("  %6.2f s: %5.1f %%\n", static_cast<double>(t) / kSec,
             100 * plant.Share(t, t + kSec));
    }
  }
  if (getenv("PLANT_SUMMARY") != nullptr) {
    printf("  max 1 s window %.1f %%, mean %.1f %% (cap %u)\n", 100 * plant.MaxSecond(from, to),
           100 * plant.Share(from, to), cap);
  }
  EXPECT_LE(plant.MaxSecond(from, to), (cap + 5) / 100.0);
  EXPECT_NEAR(plant.Share(from, to), cap / 100.0, 0.02);
}

TEST(WorkloadChange, KernelsAHundredTimesLonger) {
  PlantOptions o;
  o.kernel_ns = 200 * kUs;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(20 * kMs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 30);
  EXPECT_GE(plant.estimator().shifts(), 1u);
}

// At 70 % the stream keeps about 14 ms of work queued, and launches go on
// being admitted at the old charge (one every 0.29 ms) until the first long
// kernel has even started: about 50 launches, a second of 20 ms kernels,
// that no observation can stop. The progress watch's markers (one per
// 1 ms of launches, each due twice its charge after its predecessor)
// catch
// the first long kernel within milliseconds of its start, so the rest of the
// backlog never queues. (The allowance-based watch before it looked every
// 27 ms and let about 2 s of work in: 100.0 / 73.5.)
TEST(WorkloadChange, KernelsAHundredTimesLongerUnderAHighCap) {
  PlantOptions o;
  o.kernel_ns = 200 * kUs;
  o.limit = 70;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(20 * kMs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 70);
}

// A late controller (issue 14's outlier under CPU load): its thread is
// descheduled, or NVML's windows arrive late, for a few hundred milliseconds
// right after the change. The backlog watch's first drain ends before the new
// cost is known, and the gate went on admitting a whole burst at the old
// charge (at 70 %: 70 launches, 1.4 s of 20 ms kernels) before the next
// marker was due: the overuse ran past the first second (81.5 % at cap 70 in
// bench/share_accuracy). A drain measures what its launches cost, and that is
// their floor until the controller has learned it.
struct LateController {
  uint32_t cap;
  int64_t stall_ns;
  int64_t nvml_lag_ns;
};

class WorkloadChangeLate : public ::testing::TestWithParam<LateController> {};

TEST_P(WorkloadChangeLate, KernelsAHundredTimesLongerWithALateController) {
  const LateController c = GetParam();
  PlantOptions o;
  o.kernel_ns = 200 * kUs;
  o.limit = c.cap;
  o.stall_from_ns = 6 * kSec;
  o.stall_ns = c.stall_ns;
  o.nvml_lag_ns = c.nvml_lag_ns;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(20 * kMs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, c.cap);
}

INSTANTIATE_TEST_SUITE_P(
    Stalls, WorkloadChangeLate,
    ::testing::Values(LateController{30, 400 * kMs, 0}, LateController{70, 400 * kMs, 0},
                      LateController{30, 700 * kMs, 0}, LateController{70, 700 * kMs, 0},
                      LateController{30, 0, 300 * kMs}, LateController{70, 0, 300 * kMs}),
    [](const ::testing::TestParamInfo<LateController>& param_info) {
      const LateController& c = param_info.param;
      return "Cap" + std::to_string(c.cap) + "Stall" + std::to_string(c.stall_ns / kMs) +
             "msNvmlLag" + std::to_string(c.nvml_lag_ns / kMs) + "ms";
    });

// Counted when admitted (before issues 13 and 14), the backlog's launches
// were counted in the window they were admitted in while their device time
// arrived over the next second: the estimate overshot the new cost for about
// a horizon and the 10 s mean missed the cap (67.6 %; 70.0 % counted as the
// launch path sees them complete). Since the estimator drops the evidence kept
// across a shift once the new workload's suffices (issue 14), the miss is
// smaller (68.5 %), still well under what counting at completion gets; both
// with the gate of before issue 14 (no drain floor).
TEST(WorkloadChange, CountedWhenAdmittedLongerKernelsUndershootAHighCap) {
  const auto mean = [](bool count_at_completion) {
    PlantOptions o;
    o.kernel_ns = 200 * kUs;
    o.limit = 70;
    o.count_at_completion = count_at_completion;
    o.drain_floor = false;
    Plant plant(o);
    plant.RunUntil(6 * kSec);
    plant.set_kernel_ns(20 * kMs);
    plant.RunUntil(18 * kSec);
    return plant.Share(7 * kSec, 17 * kSec);
  };
  const double at_completion = mean(true);
  EXPECT_LT(mean(false), at_completion - 0.01);
  EXPECT_NEAR(at_completion, 0.70, 0.01);
}

// Kernels 1.45x longer: within the estimator's shift factor, so the horizon
// is not dropped and the charge creeps up over two seconds; meanwhile the
// group would run at 1.4x its cap. The measured share closes the loop.
TEST(WorkloadChange, KernelsALittleLongerWithinTheShiftFactor) {
  PlantOptions o;
  o.kernel_ns = 2 * kMs;
  o.limit = 50;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(2900 * kUs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 50);
}

// The same without the closed loop: the charge creeps up over the horizon
// and the second after the change's first runs over cap + 5.
TEST(WorkloadChange, WithoutTheClosedLoopALittleLongerKernelsOvershoot) {
  PlantOptions o;
  o.kernel_ns = 2 * kMs;
  o.limit = 50;
  o.closed_loop = false;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(2900 * kUs);
  plant.RunUntil(18 * kSec);
  if (getenv("PLANT_SUMMARY") != nullptr) {
    printf("  max 1 s window %.1f %%\n", 100 * plant.MaxSecond(7 * kSec, 17 * kSec));
  }
  EXPECT_GT(plant.MaxSecond(7 * kSec, 17 * kSec), 0.55);
}

// An estimate 30 % too high (the estimator's after a backlog, before the
// span fix, was up to 10 % high for two seconds; the limiter's measured
// 53-60 % under a 70 % cap): the group is held back by its budget while
// NVML measures it under its rate, so the loop lowers its charges. (With a
// loop that only ever slowed a group down it ran at 54 %.)
TEST(ShareCorrectionPlant, AGroupChargedTooMuchIsBroughtUpToItsCap) {
  for (const uint32_t cap : {30u, 70u}) {
    PlantOptions o;
    o.kernel_ns = 2 * kMs;
    o.limit = cap;
    o.estimate_bias = 1.3;
    Plant plant(o);
    plant.RunUntil(14 * kSec);
    ExpectCapHolds(plant, 3 * kSec, cap);
  }
}

// The same group charged 30 % too little is held at its cap from above, as
// before.
TEST(ShareCorrectionPlant, AGroupChargedTooLittleIsHeldAtItsCap) {
  PlantOptions o;
  o.kernel_ns = 2 * kMs;
  o.limit = 50;
  o.estimate_bias = 0.7;
  Plant plant(o);
  plant.RunUntil(14 * kSec);
  ExpectCapHolds(plant, 3 * kSec, 50);
  EXPECT_GT(plant.factor(), 1.2);
}

// Kernels 1.43x shorter: within the shift factor, so the estimate comes
// down over a horizon and meanwhile the group, held back by its budget, runs
// under its cap (37 % then 45 % under a 50 % cap with a loop that only ever
// slowed a group down). The two-sided loop brings it up within a second.
TEST(WorkloadChange, KernelsALittleShorterWithinTheShiftFactor) {
  PlantOptions o;
  o.kernel_ns = 2 * kMs;
  o.limit = 50;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(1400 * kUs);
  plant.RunUntil(18 * kSec);
  EXPECT_EQ(plant.estimator().shifts(), 0u);
  EXPECT_GE(plant.Share(6 * kSec, 7 * kSec), 0.43) << "the change's first second";
  ExpectCapHolds(plant, 6 * kSec, 50);
  EXPECT_GE(plant.Share(7 * kSec, 8 * kSec), 0.48);
}

TEST(WorkloadChange, KernelsAHundredTimesShorter) {
  PlantOptions o;
  o.kernel_ns = 20 * kMs;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(200 * kUs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 30);
}

// A graph of ten kernels is, to the budget, one launch ten times as long.
TEST(WorkloadChange, GraphsOfTenKernelsInPlaceOfSingleLaunchesAndBack) {
  PlantOptions o;
  o.kernel_ns = 200 * kUs;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(2 * kMs);  // ten 200 us kernels
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 30);
  plant.set_kernel_ns(200 * kUs);
  plant.RunUntil(30 * kSec);
  ExpectCapHolds(plant, 18 * kSec, 30);
}

// Members whose kernels differ 250x, each charged by its own estimate: the
// one that joins starts on its own bootstrap measurement (an upper bound of
// its kernels), never on the others' short charge.
TEST(WorkloadChange, AMemberWithMuchLongerKernelsJoinsThenLeaves) {
  PlantOptions o;
  o.kernel_ns = 20 * kUs;
  o.limit = 40;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  const size_t other = plant.AddMember(5 * kMs);
  plant.RunUntil(18 * kSec);
  ExpectCapHolds(plant, 6 * kSec, 40);
  plant.RemoveMember(other);
  plant.RunUntil(30 * kSec);
  ExpectCapHolds(plant, 18 * kSec, 40);
}

TEST(WorkloadChange, AMixedGroupFromTheStart) {
  PlantOptions o;
  o.kernel_ns = 20 * kUs;
  o.limit = 40;
  Plant plant(o);
  plant.AddMember(5 * kMs);
  plant.RunUntil(14 * kSec);
  ExpectCapHolds(plant, 3 * kSec, 40);
}

// The same, with one charge for the whole group (the group's busy time over
// all its launches): the join overshoots and the mixed group misses its cap.
TEST(WorkloadChange, OneChargePerGroupMissesTheCapOfMixedMembers) {
  PlantOptions o;
  o.kernel_ns = 20 * kUs;
  o.limit = 40;
  o.per_member = false;
  Plant join(o);
  join.RunUntil(6 * kSec);
  join.AddMember(5 * kMs);
  join.RunUntil(18 * kSec);
  Plant mixed(o);
  mixed.AddMember(5 * kMs);
  mixed.RunUntil(14 * kSec);
  const bool join_misses = join.MaxSecond(7 * kSec, 17 * kSec) > 0.45 ||
                           std::abs(join.Share(7 * kSec, 17 * kSec) - 0.40) > 0.02;
  const bool mixed_misses = mixed.MaxSecond(4 * kSec, 14 * kSec) > 0.45 ||
                            std::abs(mixed.Share(4 * kSec, 14 * kSec) - 0.40) > 0.02;
  EXPECT_TRUE(join_misses);
  EXPECT_TRUE(mixed_misses);
}

TEST(WorkloadChange, AGroupIdleForMinutesThenBursting) {
  PlantOptions o;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_running(false);
  const int64_t back = 6 * kSec + 180 * kSec;
  plant.RunUntil(back);
  plant.set_running(true);
  plant.RunUntil(back + 12 * kSec);
  ExpectCapHolds(plant, back, 30);
  // The burst itself stays within the pacer's burst tolerance.
  EXPECT_LE(plant.Share(back, back + kSec), 0.35);
}

// Without the backlog watch a 100x longer kernel fills the driver's queue
// with seconds of work, which no estimate can take back.
TEST(WorkloadChange, WithoutTheBacklogWatchLongerKernelsOvershoot) {
  PlantOptions o;
  o.kernel_ns = 200 * kUs;
  o.backlog_watch = false;
  Plant plant(o);
  plant.RunUntil(6 * kSec);
  plant.set_kernel_ns(20 * kMs);
  plant.RunUntil(18 * kSec);
  EXPECT_GT(plant.MaxSecond(7 * kSec, 17 * kSec), 0.9);
}

TEST(CostEstimator, ANewWorkloadReplacesTheHorizonAtOnce) {
  CostEstimator e;
  int64_t t = 0;
  uint64_t launches = 0;
  e.RecordLaunches(t, launches);
  // 3 s of 1 ms launches at 30 %: 300 launches a second.
  for (int i = 0; i < 18; ++i) {
    launches += 50;
    e.RecordLaunches(t + 166 * kMs, launches);
    e.AddBusy(t, t + 166 * kMs, 0.30);
    t += 166 * kMs;
  }
  EXPECT_NEAR(static_cast<double>(e.CostNs()), 1.0 * kMs, 0.05 * kMs);
  // Two windows of 10 ms launches: the old evidence goes, the estimate follows.
  for (int i = 0; i < 2; ++i) {
    launches += 5;
    e.RecordLaunches(t + 166 * kMs, launches);
    e.AddBusy(t, t + 166 * kMs, 0.30);
    t += 166 * kMs;
  }
  EXPECT_GE(e.shifts(), 1u);
  EXPECT_NEAR(static_cast<double>(e.CostNs()), 10.0 * kMs, 0.5 * kMs);
}

// A backlog: 50 launches of 20 ms kernels counted as they were admitted,
// their device time over the next second (windows busy with no launches),
// then 70 % of 20 ms kernels. Where the horizon's 2 s end among the busy
// windows, they are not cut from the launches they belong to. (Cut, the
// estimate rose by half at once: in the plant a group under a 70 % cap then
// ran at 40-55 % for half a second.)
TEST(CostEstimator, ABacklogsBusyWindowsStayWithTheirLaunches) {
  constexpr int64_t kWindow = 166 * kMs;
  CostEstimator e;
  int64_t t = 0;
  uint64_t launches = 0;
  e.RecordLaunches(t, launches);
  launches += 50;
  e.RecordLaunches(t + kMs, launches);
  e.RecordLaunches(t + kWindow, launches);
  e.AddBusy(t, t + kWindow, 1.0);
  t += kWindow;
  for (int i = 0; i < 5; ++i) {  // the backlog drains
    e.RecordLaunches(t + kWindow, launches);
    e.AddBusy(t, t + kWindow, 1.0);
    t += kWindow;
  }
  for (int i = 0; i < 10; ++i) {  // 70 %: 5.81 launches of 20 ms a window
    launches += i % 6 == 5 ? 5 : 6;
    e.RecordLaunches(t + kWindow, launches);
    e.AddBusy(t, t + kWindow, 0.70);
    t += kWindow;
    EXPECT_NEAR(static_cast<double>(e.CostNs()), 20.0 * kMs, 1.5 * kMs) << i;
  }
}

TEST(CostEstimator, NoiseWithinTheShiftFactorKeepsTheHorizon) {
  CostEstimator e;
  int64_t t = 0;
  uint64_t launches = 0;
  e.RecordLaunches(t, launches);
  for (int i = 0; i < 60; ++i) {
    launches += 50;
    e.RecordLaunches(t + 166 * kMs, launches);
    e.AddBusy(t, t + 166 * kMs, i % 2 == 0 ? 0.36 : 0.24);  // 1.2 ms and 0.8 ms
    t += 166 * kMs;
  }
  EXPECT_EQ(e.shifts(), 0u);
  EXPECT_NEAR(static_cast<double>(e.CostNs()), 1.0 * kMs, 0.05 * kMs);
}

TEST(CostEstimator, AWindowRoundedToZeroBoundsTheCostFromAbove) {
  CostEstimator e;
  e.RecordLaunches(0, 0);
  e.RecordLaunches(kSec, 100);
  e.AddBusy(0, kSec, 0.0);          // NVML: 0 % (less than half a percent)
  EXPECT_EQ(e.CostNs(), 50 * kUs);  // 5 ms / 100 launches: an upper bound
  CostEstimator unsampled;
  unsampled.RecordLaunches(0, 0);
  unsampled.RecordLaunches(kSec, 100);
  unsampled.AddBusy(0, kSec, 0.0, /*sampled=*/false);  // no sample of any member: unknown
  EXPECT_EQ(unsampled.CostNs(), 0);
}

TEST(BacklogAllowance, IsTheQueueOfACorrectlyChargedStreamWithSlack) {
  // 15 ms of queue at 50 %, 2 ms of intervals, 5 ms of slack.
  EXPECT_EQ(BacklogAllowanceNs(kMs, 20 * kMs, 5000), 22 * kMs);
}

// A marker is due twice the charge of the launches behind it (at a high
// rate) after its predecessor was seen complete (or after its own recording,
// if later).
TEST(ProgressWatch, AMarkerIsDueAfterItsPredecessorCompletedByTwiceItsCharge) {
  ProgressWatch w;
  std::array<bool, ProgressWatch::kMarkers> done{};
  auto is_done = [&](int i) { return done[static_cast<size_t>(i)]; };
  constexpr int64_t kUnknown = 30 * kMs;
  // First marker: the queue ahead unknown, so it gets kUnknown more.
  int i = w.Launched(10 * kMs, 200 * kUs);
  ASSERT_EQ(i, 0);
  w.Marked(10 * kMs);
  // Within the mark period: no second marker; the charge carries over.
  EXPECT_EQ(w.Launched(10 * kMs + 100 * kUs, 200 * kUs), -1);
  const int64_t first_due = 10 * kMs + 400 * kUs + ProgressWatch::kSlackNs + kUnknown;
  EXPECT_EQ(w.Check(first_due, kUnknown, 10000, is_done), ProgressWatch::Verdict::kOk);
  EXPECT_EQ(w.Check(first_due + 1, kUnknown, 10000, is_done), ProgressWatch::Verdict::kBacklog);
  // It completes; a second marker behind 400 us of charges.
  done[0] = true;
  EXPECT_EQ(w.Check(first_due + 1, kUnknown, 10000, is_done), ProgressWatch::Verdict::kOk);
  EXPECT_EQ(w.pending(), 0);
  const int64_t t = first_due + kMs;
  i = w.Launched(t, 400 * kUs);
  ASSERT_EQ(i, 1);
  w.Marked(t);
  // Now the queue ahead is known: due 2 x 0.6 ms (the 200 us carried over
  // and these 400 us) + slack after its recording.
  const int64_t due = t + 1200 * kUs + ProgressWatch::kSlackNs;
  EXPECT_EQ(w.Check(due, kUnknown, 10000, is_done), ProgressWatch::Verdict::kOk);
  EXPECT_EQ(w.Check(due + 1, kUnknown, 10000, is_done), ProgressWatch::Verdict::kBacklog);
  // A drain forgets the markers.
  w.Drained(due + 10 * kMs);
  EXPECT_EQ(w.pending(), 0);
}

// The watch counts the launches behind each marker: they are confirmed (run
// by the GPU) when it completes, and the rest when the stream drains.
TEST(ProgressWatch, ConfirmsTheLaunchesBehindEachMarkerAsItCompletes) {
  ProgressWatch w;
  std::array<bool, ProgressWatch::kMarkers> done{};
  auto is_done = [&](int i) { return done[static_cast<size_t>(i)]; };
  // Three launches behind marker 0, two behind marker 1, one unmarked.
  constexpr int64_t t = 10 * kMs;
  EXPECT_EQ(w.Launched(t, kMs), 0);  // a marker due: recorded after the third
  EXPECT_EQ(w.Launched(t, kMs), 0);
  EXPECT_EQ(w.Launched(t, kMs), 0);
  w.Marked(t);
  EXPECT_EQ(w.Launched(t + 500 * kUs, kMs), -1);
  EXPECT_EQ(w.Launched(t + 3 * kMs, kMs), 1);
  w.Marked(t + 3 * kMs);
  EXPECT_EQ(w.Launched(t + 3 * kMs, kMs), -1);
  EXPECT_EQ(w.outstanding(), 6u);
  EXPECT_EQ(w.Poll(t + 4 * kMs, is_done), 2);
  EXPECT_EQ(w.TakeConfirmed(), 0u);
  done[0] = true;
  EXPECT_EQ(w.Poll(t + 5 * kMs, is_done), 1);
  EXPECT_EQ(w.outstanding(), 6u) << "confirmed, not yet taken";
  EXPECT_EQ(w.TakeConfirmed(), 3u);
  EXPECT_EQ(w.TakeConfirmed(), 0u);
  EXPECT_EQ(w.outstanding(), 3u);
  w.Drained(t + 6 * kMs);
  EXPECT_EQ(w.TakeConfirmed(), 3u);
  EXPECT_EQ(w.outstanding(), 0u);
  // Launches counted for another member are forgotten, not confirmed.
  EXPECT_GE(w.Launched(t + 10 * kMs, kMs), 0);
  w.ForgetLaunches();
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(w.pending(), 0);
  // A marker the driver refused: the launches it would have followed count
  // at once.
  EXPECT_GE(w.Launched(t + 12 * kMs, kMs), 0);
  w.ConfirmUnmarked();
  EXPECT_EQ(w.TakeConfirmed(), 1u);
  EXPECT_EQ(w.outstanding(), 0u);
}

// A marker behind a long queue is judged from its predecessor's completion,
// not from its recording: a correctly charged stream is never late however
// deep its queue.
TEST(ProgressWatch, ADeepCorrectlyChargedQueueIsNeverLate) {
  ProgressWatch w;
  std::array<int64_t, ProgressWatch::kMarkers> completes_at{};
  int64_t device_free = 0;  // when the device finishes what is queued
  for (int64_t t = 0; t < 200 * kMs; t += 100 * kUs) {
    const int64_t now = t;
    auto is_done = [&](int i) { return completes_at[static_cast<size_t>(i)] <= now; };
    ASSERT_EQ(w.Check(now, 30 * kMs, 7000, is_done), ProgressWatch::Verdict::kOk) << now;
    // 14 ms of queue kept: one 200 us kernel per 100 us while under it.
    if (device_free - now < 14 * kMs) {
      device_free = std::max(device_free, now) + 200 * kUs;
      if (const int i = w.Launched(now, 200 * kUs); i >= 0) {
        completes_at[static_cast<size_t>(i)] = device_free;
        w.Marked(now);
      }
    }
  }
}

// Four tenants' 20 ms kernels sliced round-robin: each takes four times its
// length in wall time. A group paced at 25 % gets about that much of the
// device, so its markers are judged by their charge stretched by its rate
// and a correctly charged stream is never late.
TEST(ProgressWatch, TimeSlicesOfOtherTenantsAreNotABacklog) {
  ProgressWatch w;
  std::array<int64_t, ProgressWatch::kMarkers> completes_at{};
  int64_t device_free = 0;
  int64_t charged_free = 0;
  for (int64_t now = 0; now < 2 * kSec; now += kMs) {
    auto is_done = [&](int i) { return completes_at[static_cast<size_t>(i)] <= now; };
    ASSERT_EQ(w.Check(now, 30 * kMs, 2500, is_done), ProgressWatch::Verdict::kOk) << now;
    if (charged_free - now < 20 * kMs) {  // the budget: 20 ms kernels at 25 %
      charged_free = std::max(charged_free, now) + 80 * kMs;
      device_free = std::max(device_free, now) + 80 * kMs;  // 20 ms, sliced four ways
      if (const int i = w.Launched(now, 20 * kMs); i >= 0) {
        completes_at[static_cast<size_t>(i)] = device_free;
        w.Marked(now);
      }
    }
  }
}

// Kernels that became 100x longer: the first marker behind one is late
// within a few milliseconds of that kernel's start.
TEST(ProgressWatch, KernelsMuchLongerThanChargedAreCaughtSoonAfterTheyStart) {
  ProgressWatch w;
  std::array<int64_t, ProgressWatch::kMarkers> completes_at{};
  int64_t device_free = 0;
  int64_t charged_free = 0;  // the budget: where the charges say the queue ends
  int64_t kernel = 200 * kUs;
  int64_t caught = 0;
  int64_t long_start = 0;
  for (int64_t now = 0; now < kSec && caught == 0; now += 100 * kUs) {
    if (now == 100 * kMs) {
      kernel = 20 * kMs;
      long_start = std::max(device_free, now);
    }
    auto is_done = [&](int i) { return completes_at[static_cast<size_t>(i)] <= now; };
    if (w.Check(now, 30 * kMs, 7000, is_done) == ProgressWatch::Verdict::kBacklog) {
      caught = now;
      break;
    }
    if (charged_free - now < 14 * kMs) {  // charged 200 us each: 14 ms of queue by the charges
      charged_free = std::max(charged_free, now) + 200 * kUs;
      device_free = std::max(device_free, now) + kernel;
      if (const int i = w.Launched(now, 200 * kUs); i >= 0) {
        completes_at[static_cast<size_t>(i)] = device_free;
        w.Marked(now);
      }
    }
  }
  ASSERT_GT(caught, 0);
  EXPECT_LE(caught - long_start, 5 * kMs);
}

// The drain that follows (issue 14) measures what the long kernels cost: from
// the late marker's completion (the launches before it hold the old
// workload's) to the end of the drain, over the launches left.
TEST(ProgressWatch, ADrainMeasuresWhatTheLaunchesBehindTheLateMarkerCost) {
  ProgressWatch w;
  std::array<int64_t, ProgressWatch::kMarkers> completes_at{};
  int64_t device_free = 0;
  int64_t charged_free = 0;
  int64_t kernel = 200 * kUs;
  int64_t now = 0;
  const auto is_done = [&](int i) { return completes_at[static_cast<size_t>(i)] <= now; };
  for (; now < kSec; now += 100 * kUs) {
    if (now == 100 * kMs) kernel = 20 * kMs;
    if (w.Check(now, 30 * kMs, 7000, is_done) == ProgressWatch::Verdict::kBacklog) break;
    if (charged_free - now < 14 * kMs) {
      charged_free = std::max(charged_free, now) + 200 * kUs;
      device_free = std::max(device_free, now) + kernel;
      if (const int i = w.Launched(now, 200 * kUs); i >= 0) {
        completes_at[static_cast<size_t>(i)] = device_free;
        w.Marked(now);
      }
    }
  }
  ASSERT_LT(now, kSec);
  w.DrainBegan(now);
  EXPECT_EQ(w.TakeDrainedCost(), 0);  // nothing measured until it ends
  while (now < device_free) {
    now += 200 * kUs;
    w.Poll(now, is_done);
  }
  w.Drained(now);
  EXPECT_NEAR(static_cast<double>(w.TakeDrainedCost()), 20.0 * kMs, 0.5 * kMs);
  EXPECT_EQ(w.TakeDrainedCost(), 0);  // taken once
  w.Drained(now + kMs);               // a drain nobody began measures nothing
  EXPECT_EQ(w.TakeDrainedCost(), 0);
}

TEST(ChargeFloor, ChargesAtLeastTheDrainsMeasurementForAHold) {
  ChargeFloor f;
  EXPECT_EQ(f.Apply(kSec, 200 * kUs), 200 * kUs);  // no drain yet
  f.Measured(kSec, 0, 200 * kUs, 3000, false);     // a drain that measured nothing
  EXPECT_EQ(f.Apply(kSec, 200 * kUs), 200 * kUs);
  // Within the watch's allowance at 30 % (200 us x 1/0.3 x 5/4 = 833 us):
  // others' time slices, no floor.
  f.Measured(kSec, 800 * kUs, 200 * kUs, 3000, false);
  EXPECT_EQ(f.Apply(kSec + kMs, 200 * kUs), 200 * kUs);
  f.Measured(kSec, 20 * kMs, 200 * kUs, 3000, false);
  EXPECT_EQ(f.Apply(kSec + kMs, 200 * kUs), 20 * kMs);
  EXPECT_EQ(f.Apply(kSec + kMs, 30 * kMs), 30 * kMs);  // the controller's, where more
  EXPECT_EQ(f.Apply(kSec + ChargeFloor::kHoldNs, 200 * kUs), 200 * kUs);  // the hold is over
}

TEST(ChargeFloor, NoFloorWhereGpuslicedSchedulesTheDevice) {
  // Beside the other groups gpusliced schedules, a drain's wall time is
  // stretched by their contexts, far past the rate's allowance: no floor.
  ChargeFloor f;
  f.Measured(kSec, 20 * kMs, 200 * kUs, 950, /*scheduled=*/true);
  EXPECT_EQ(f.Apply(kSec + kMs, 200 * kUs), 200 * kUs);
  f.Measured(kSec, 20 * kMs, 200 * kUs, 950, /*scheduled=*/false);  // alone under its cap
  EXPECT_EQ(f.Apply(kSec + kMs, 200 * kUs), 20 * kMs);
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

namespace gpuslice::control {
namespace {

// NVML's window attribution (compute_controller.h): each 200 ms window goes
// to one process with the whole window's busy percent. The group launches 20
// kernels a window and wins one window in five (drawn) at 95 %: 1.9 ms a
// launch on average. A window won after windows lost is no workload five
// times longer: no shift is taken, and with the controller's options for
// window attribution (50 windows' horizon, 8 won at least) the estimate
// stays within a factor of 1.6 of what a launch was credited on average
// (with 30 windows, 6 +- 2.2 won, it was 1.9x off).
struct WindowAttributed {
  uint64_t shifts = 0;
  double worst_ratio = 1;  // the estimate over the mean credited, furthest from 1
};
WindowAttributed RunWindowAttributed(const CostEstimator::Options& options, int judge_from) {
  CostEstimator e(options);
  uint64_t rng = 11;
  uint64_t total = 0;
  int won = 0;
  int windows = 0;
  int64_t t = 1000 * kMs;
  e.RecordLaunches(t, 0);
  WindowAttributed out;
  for (int k = 1; k <= 150; ++k) {
    const int64_t start = t;
    for (int i = 0; i < 4; ++i) {
      t += 50 * kMs;
      total += 5;
      e.RecordLaunches(t, total);
    }
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    const bool ours = (rng >> 33) % 5 == 0;
    ++windows;
    won += ours ? 1 : 0;
    e.AddBusy(start, t, ours ? 0.95 : 0.0, /*sampled=*/ours);
    if (k >= judge_from && won > 0) {
      const double mean_ns = 0.95 * won / windows * 200 * kMs / 20;
      const double ratio = static_cast<double>(e.CostNs()) / mean_ns;
      if (std::abs(std::log(ratio)) > std::abs(std::log(out.worst_ratio))) out.worst_ratio = ratio;
    }
  }
  out.shifts = e.shifts();
  return out;
}

TEST(CostEstimatorWindowAttribution, AWindowWonIsNoWorkloadShift) {
  EXPECT_EQ(RunWindowAttributed(CostEstimator::Options{}, 1000).shifts, 0u);
  const WindowAttributed w = RunWindowAttributed(ComputeController::WindowAttributionOptions(), 40);
  EXPECT_EQ(w.shifts, 0u);
  EXPECT_GT(w.worst_ratio, 1 / 1.6);
  EXPECT_LT(w.worst_ratio, 1.6);
}

}  // namespace
}  // namespace gpuslice::control
