#include "daemon/backstop/compute_backstop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <deque>

#include "daemon/backstop/fake_signaller.h"

namespace gpuslice::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Kind = ComputeBackstop::FindingKind;
using Finding = ComputeBackstop::Finding;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;
const std::string kUuid = "GPU-fake-0";

std::vector<Kind> KindsOf(const std::vector<Finding>& findings) {
  std::vector<Kind> out;
  out.reserve(findings.size());
  for (const Finding& f : findings) out.push_back(f.kind);
  return out;
}

class ComputeBackstopTest : public ::testing::Test {
 protected:
  ComputeBackstop Make(ComputeBackstop::Action action) {
    return ComputeBackstop(
        {.action = action,
         .tolerance_points = 5,
         .over_for_ns = 5 * kS,
         .unregistered_percent = 10},
        {.group_of = [this](uint32_t pid) -> std::optional<std::string> {
           auto it = group_of_.find(pid);
           if (it == group_of_.end()) return std::nullopt;
           return it->second;
         },
         .limit_of = [this](const std::string& group,
                            const std::string&) -> std::optional<uint32_t> {
           auto it = limit_of_.find(group);
           if (it == limit_of_.end()) return std::nullopt;
           return it->second;
         },
         .is_mps = [this](const std::string& group,
                          const std::string&) { return mps_groups_.contains(group); },
         .start_time_of = [](uint32_t pid) -> uint64_t { return 1000 + pid; }},
        &throttler_, [this](const std::string& uuid, pid_t pid) {
          terminated_.emplace_back(uuid, pid);
          return Status::Ok();
        });
  }
  // One sample: every pid in `shares` is on the GPU with that sm_percent.
  std::vector<Finding> Check(ComputeBackstop& b, int64_t now,
                             const std::map<uint32_t, uint32_t>& shares) {
    std::vector<GpuProcess> processes;
    std::vector<ProcessUtilization> samples;
    for (auto [pid, share] : shares) {
      processes.push_back({pid, 1 << 20});
      samples.push_back({pid, static_cast<uint64_t>(now / 1000), share});
    }
    return b.Check(now, 0, kUuid, processes, samples);
  }

  std::map<uint32_t, std::string> group_of_ = {{100, "a"}, {101, "a"}, {200, "b"}};
  std::map<std::string, uint32_t> limit_of_ = {{"a", 30}, {"b", 50}};
  std::set<std::string> mps_groups_;
  FakeSignaller signaller_;
  std::vector<std::vector<ProcessRef>> persisted_;
  DutyCycleThrottler throttler_{
      {.period_ns = 200 * kMs, .min_run_fraction = 0.02},
      signaller_,
      [this](const std::vector<ProcessRef>& p) { persisted_.push_back(p); }};
  std::vector<std::pair<std::string, pid_t>> terminated_;
};

TEST_F(ComputeBackstopTest, AnUnregisteredProcessIsReportedOnceAndAgainWhenItLeaves) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kReport);
  auto f = Check(b, 0, {{100, 10}, {300, 40}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kUnregistered));
  EXPECT_THAT(f[0].pids, ElementsAre(300u));
  EXPECT_EQ(f[0].share_percent, 40u);
  EXPECT_EQ(f[0].group, "");
  EXPECT_THAT(Check(b, kS, {{100, 10}, {300, 40}}), IsEmpty()) << "edge-triggered";
  f = Check(b, 2 * kS, {{100, 10}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kUnregisteredGone));
  EXPECT_THAT(f[0].pids, ElementsAre(300u));
  // Seen in the samples only (not in the compute processes) counts too.
  f = b.Check(3 * kS, 0, kUuid, {}, std::vector<ProcessUtilization>{{301, 3000000, 20}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kUnregistered));
  EXPECT_THAT(f[0].pids, ElementsAre(301u));
  EXPECT_THAT(signaller_.sent, IsEmpty()) << "report only";
}

TEST_F(ComputeBackstopTest, AGroupIsOverOnlyAfterMoreThanFiveSecondsMoreThanFivePointsAbove) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kReport);
  // Exactly limit + 5 (two processes: 20 + 15 = 35) is within.
  for (int64_t t = 0; t <= 20 * kS; t += 500 * kMs) {
    ASSERT_THAT(Check(b, t, {{100, 20}, {101, 15}}), IsEmpty()) << t;
  }
  // 36 from t = 21 s: not at 26 s (5 s), over at 26.5 s.
  int64_t t = 21 * kS;
  for (; t <= 26 * kS; t += 500 * kMs) {
    ASSERT_THAT(Check(b, t, {{100, 20}, {101, 16}}), IsEmpty()) << t;
  }
  auto f = Check(b, t, {{100, 20}, {101, 16}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kOverLimit));
  EXPECT_EQ(f[0].group, "a");
  EXPECT_EQ(f[0].share_percent, 36u);
  EXPECT_EQ(f[0].limit_percent, 30u);
  EXPECT_THAT(f[0].pids, ElementsAre(100u, 101u));
  EXPECT_THAT(signaller_.sent, IsEmpty()) << "report only";
  // It clears after more than 5 s within.
  t += 500 * kMs;
  const int64_t under = t;
  for (; t <= under + 5 * kS; t += 500 * kMs) {
    ASSERT_THAT(Check(b, t, {{100, 20}}), IsEmpty()) << t;
  }
  f = Check(b, t, {{100, 20}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kBackUnder));
  EXPECT_EQ(f[0].share_percent, 20u);
}

TEST_F(ComputeBackstopTest, ASampleWithinRestartsTheFiveSeconds) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kReport);
  for (int64_t t = 0; t < 10 * kS; t += 500 * kMs) {
    // Within every 4 s: never 5 s over in a row.
    const uint32_t share = (t % (4 * kS)) == 0 ? 30 : 80;
    ASSERT_THAT(Check(b, t, {{200, share + 20}}), IsEmpty()) << t;
  }
  // Unreadable samples neither start nor clear anything.
  EXPECT_THAT(b.Check(11 * kS, 0, kUuid, {{200, 1}}, std::nullopt), IsEmpty());
}

// NVML as on an H100 (r580) with time-sliced contexts: each 200 ms window
// goes to ONE process with the whole window's busy percent (98 here). Group
// a (limit 30) runs a quarter of the device, 24.5 %: one window in four;
// group b the rest. Each check reads the last second (five windows): a's
// one sample of 98 % is a fifth or two of the device, not 98 %. A group
// that keeps its limit is never reported; one that runs two windows in
// four (49 %) is.
TEST_F(ComputeBackstopTest, UnderWindowAttributionAWindowIsNotTheGroupsShare) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kReport);
  limit_of_["b"] = 100;
  auto window_owner = [](int64_t k, int64_t of_four) { return k % 4 < of_four ? 100u : 200u; };
  auto check = [&](int64_t t, int64_t of_four) {
    std::vector<ProcessUtilization> samples;
    for (int64_t k = t / (200 * kMs) - 4; k <= t / (200 * kMs); ++k) {
      samples.push_back(
          {window_owner(k, of_four), static_cast<uint64_t>(k * 200 * kMs / 1000), 98});
    }
    return b.Check(t, 0, kUuid, {{100, 1 << 20}, {200, 1 << 20}}, samples);
  };
  for (int64_t t = 2 * kS; t <= 20 * kS; t += 500 * kMs) {
    ASSERT_THAT(check(t, 1), IsEmpty()) << t;
  }
  int64_t t = 20 * kS + 500 * kMs;
  std::vector<Finding> found;
  for (; t <= 30 * kS && found.empty(); t += 500 * kMs) found = check(t, 2);
  ASSERT_THAT(KindsOf(found), ElementsAre(Kind::kOverLimit));
  EXPECT_EQ(found[0].group, "a");
  EXPECT_NEAR(found[0].share_percent, 49, 10);
}

TEST(WindowAttributionWindows, OnlyWindowsOfOneSampleEachOfSeveralProcesses) {
  EXPECT_EQ(WindowAttributionWindows({{1, 200'000, 90}, {2, 400'000, 90}, {1, 600'000, 90}}), 3u);
  // Each process's own part of each window (samples of a window a few us apart).
  EXPECT_EQ(WindowAttributionWindows({{1, 200'000, 60}, {2, 200'005, 30}, {1, 400'000, 60}}), 0u);
  // One process alone: its mean is its share either way.
  EXPECT_EQ(WindowAttributionWindows({{1, 200'000, 90}, {1, 400'000, 90}}), 0u);
  EXPECT_EQ(WindowAttributionWindows({{1, 200'000, 90}}), 0u);
}

TEST_F(ComputeBackstopTest, ThrottleHoldsAGroupToItsLimitAndContinuesItWhenItClears) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  int64_t t = 0;
  std::vector<Finding> f;
  for (; f.empty(); t += 500 * kMs) f = Check(b, t, {{100, 45}, {101, 45}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kOverLimit, Kind::kThrottleStarted));
  EXPECT_EQ(f[1].run_percent, 33u) << "30 of 90";
  EXPECT_THAT(persisted_.back(), ElementsAre(ProcessRef{100, 1100}, ProcessRef{101, 1101}));
  EXPECT_TRUE(b.Throttled(kUuid, "a"));
  throttler_.Advance(t);
  EXPECT_THAT(signaller_.stopped, ElementsAre(100, 101));

  // Throttled at its limit it stays over (unthrottled it would not be within).
  for (int i = 0; i < 20; ++i, t += 500 * kMs) {
    ASSERT_THAT(Check(b, t, {{100, 15}, {101, 15}}), IsEmpty()) << t;
  }
  // Idle: the run fraction opens up, and after more than 5 s within it clears.
  int64_t idle = t;
  for (f.clear(); f.empty() && t < idle + 20 * kS; t += 500 * kMs) {
    throttler_.Advance(t);
    f = Check(b, t, {{100, 0}, {101, 0}});
  }
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kThrottleStopped, Kind::kBackUnder));
  EXPECT_GT(t - idle, 5 * kS);
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  EXPECT_EQ(signaller_.To(100).back(), SIGCONT);
  EXPECT_EQ(signaller_.To(101).back(), SIGCONT);
  EXPECT_THAT(persisted_.back(), IsEmpty());
  EXPECT_FALSE(b.Throttled(kUuid, "a"));
}

// A process model on simulated time: it keeps `demand` % of the GPU busy
// while it runs, nothing while stopped; each 500 ms sample averages the last
// second, as NVML's windows do. The duty cycle brings it to its limit.
TEST_F(ComputeBackstopTest, TheDutyCycleBringsAGroupToItsLimit) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  const double demand = 90;
  std::deque<bool> running;  // the last second, per ms
  int64_t next_switch = 0;
  std::vector<uint32_t> shares;
  for (int64_t t = 0; t < 40 * kS; t += kMs) {
    if (t >= next_switch) next_switch = throttler_.Advance(t);
    running.push_back(!signaller_.stopped.contains(200));
    if (running.size() > 1000) running.pop_front();
    if (t % (500 * kMs) == 0) {
      const auto on = static_cast<double>(std::count(running.begin(), running.end(), true));
      const auto share = static_cast<uint32_t>(demand * on / static_cast<double>(running.size()));
      Check(b, t, {{200, share}});
      shares.push_back(share);
      next_switch = std::min(next_switch, t);  // a new fraction applies from the next switch
    }
  }
  ASSERT_TRUE(b.Throttled(kUuid, "b"));
  // The last 10 s: within 5 points of its limit of 50.
  for (size_t i = shares.size() - 20; i < shares.size(); ++i) {
    EXPECT_NEAR(shares[i], 50, 5) << "sample " << i;
  }
}

// The same with work queued on the GPU: while it runs, the process keeps
// 500 ms of kernels queued (a deep launch queue), which run on while it is
// stopped. A short period cannot hold it (the queue outlasts every stop);
// the period grows until it can, and the run fraction settles.
TEST_F(ComputeBackstopTest, ThePeriodGrowsUntilTheStopsOutlastTheQueuedWork) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  const int64_t queue_cap_ns = 500 * kMs;
  int64_t queued_ns = 0;
  std::deque<bool> busy;  // the GPU, the last second, per ms
  int64_t next_switch = 0;
  int64_t busy_late_ms = 0, late_ms = 0;
  for (int64_t t = 0; t < 90 * kS; t += kMs) {
    if (t >= next_switch) next_switch = throttler_.Advance(t);
    if (!signaller_.stopped.contains(200)) queued_ns = queue_cap_ns;  // refilled at once
    const bool gpu_busy = queued_ns > 0;
    if (gpu_busy) queued_ns -= kMs;
    busy.push_back(gpu_busy);
    if (busy.size() > 1000) busy.pop_front();
    if (t >= 60 * kS) {
      ++late_ms;
      busy_late_ms += gpu_busy ? 1 : 0;
    }
    if (t % (500 * kMs) == 0) {
      const auto on = static_cast<double>(std::count(busy.begin(), busy.end(), true));
      Check(b, t, {{200, static_cast<uint32_t>(100 * on / static_cast<double>(busy.size()))}});
      next_switch = std::min(next_switch, t);
    }
  }
  ASSERT_TRUE(b.Throttled(kUuid, "b"));
  EXPECT_GT(throttler_.Period(kUuid + "/group:b"), 200 * kMs);
  // The last 30 s, by the GPU's own count: near its limit of 50.
  EXPECT_NEAR(100.0 * static_cast<double>(busy_late_ms) / static_cast<double>(late_ms), 50, 10);
}

TEST_F(ComputeBackstopTest, ProcessesLeavingAThrottledGroupAreContinuedAndItIsBackUnder) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  int64_t t = 0;
  for (std::vector<Finding> f; f.empty(); t += 500 * kMs) f = Check(b, t, {{100, 90}});
  throttler_.Advance(t);
  ASSERT_THAT(signaller_.stopped, ElementsAre(100));
  auto f = Check(b, t, {});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kThrottleStopped, Kind::kBackUnder));
  EXPECT_EQ(f[1].detail, "its processes left the GPU");
  EXPECT_THAT(signaller_.stopped, IsEmpty());
}

TEST_F(ComputeBackstopTest, AnUnreadableGpuHoldsNothingStopped) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  int64_t t = 0;
  for (std::vector<Finding> f; f.empty(); t += 500 * kMs) f = Check(b, t, {{100, 90}});
  throttler_.Advance(t);
  ASSERT_THAT(signaller_.stopped, ElementsAre(100));
  auto f = b.Unreadable(kUuid);
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kThrottleStopped, Kind::kBackUnder));
  EXPECT_EQ(f[1].detail, "its GPU could not be read");
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  EXPECT_THAT(b.Unreadable(kUuid), IsEmpty()) << "once";
  // Readable again and still over: found again after the 5 s.
  std::vector<Finding> again;
  const int64_t back = t;
  for (; again.empty(); t += 500 * kMs) again = Check(b, t, {{100, 90}});
  EXPECT_GT(t - back, 5 * kS);
  EXPECT_THAT(KindsOf(again), ElementsAre(Kind::kOverLimit, Kind::kThrottleStarted));
}

TEST_F(ComputeBackstopTest, ReleaseAllContinuesEveryThrottledProcess) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  int64_t t = 0;
  for (; t <= 6 * kS; t += 500 * kMs) Check(b, t, {{100, 90}, {200, 90}, {300, 90}});
  throttler_.Advance(t);
  ASSERT_THAT(signaller_.stopped, ElementsAre(100, 200, 300));
  auto f = b.ReleaseAll("the daemon stops");
  EXPECT_THAT(KindsOf(f),
              ElementsAre(Kind::kThrottleStopped, Kind::kThrottleStopped, Kind::kThrottleStopped));
  EXPECT_EQ(f[0].detail, "the daemon stops");
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  EXPECT_EQ(throttler_.Advance(t + kS), INT64_MAX);
}

TEST_F(ComputeBackstopTest, AnUnregisteredProcessIsThrottledToTheUnregisteredShare) {
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  auto f = Check(b, 0, {{300, 80}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kUnregistered));
  int64_t t = 500 * kMs;
  for (f.clear(); f.empty(); t += 500 * kMs) f = Check(b, t, {{300, 80}});
  EXPECT_GT(t, 5 * kS);
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kThrottleStarted));
  EXPECT_EQ(f[0].limit_percent, 10u);
  EXPECT_EQ(f[0].run_percent, 13u) << "10 of 80";
  throttler_.Advance(t);
  EXPECT_THAT(signaller_.To(300), ElementsAre(SIGSTOP));
  f = Check(b, t, {});
  EXPECT_THAT(KindsOf(f), ElementsAre(Kind::kThrottleStopped, Kind::kUnregisteredGone));
  EXPECT_THAT(signaller_.To(300), ElementsAre(SIGSTOP, SIGCONT));
}

TEST_F(ComputeBackstopTest, AnMpsGroupsClientsAreTerminatedNotSignalled) {
  mps_groups_.insert("a");
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  std::vector<Finding> f;
  for (int64_t t = 0; f.empty(); t += 500 * kMs) f = Check(b, t, {{100, 50}, {101, 50}});
  ASSERT_THAT(KindsOf(f), ElementsAre(Kind::kOverLimit, Kind::kMpsClientTerminated,
                                      Kind::kMpsClientTerminated));
  EXPECT_THAT(f[1].pids, ElementsAre(100u));
  EXPECT_THAT(f[2].pids, ElementsAre(101u));
  EXPECT_THAT(terminated_, ElementsAre(std::pair<std::string, pid_t>{kUuid, 100},
                                       std::pair<std::string, pid_t>{kUuid, 101}));
  EXPECT_THAT(signaller_.sent, IsEmpty());
  EXPECT_THAT(Check(b, 100 * kS, {{100, 50}, {101, 50}}), IsEmpty()) << "once per finding";
}

TEST_F(ComputeBackstopTest, AGroupWithoutALimitIsNeverOver) {
  limit_of_.erase("a");
  ComputeBackstop b = Make(ComputeBackstop::Action::kThrottle);
  for (int64_t t = 0; t < 20 * kS; t += 500 * kMs) {
    ASSERT_THAT(Check(b, t, {{100, 100}, {101, 100}}), IsEmpty());
  }
}

}  // namespace
}  // namespace gpuslice::daemon
