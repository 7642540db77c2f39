#include "daemon/backstop/duty_cycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <csignal>

#include "daemon/backstop/fake_signaller.h"

namespace gpuslice::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
constexpr int64_t kMs = 1'000'000;

class DutyCycleTest : public ::testing::Test {
 protected:
  DutyCycleThrottler Make() {
    return DutyCycleThrottler(
        {.period_ns = 100 * kMs, .min_run_fraction = 0.05}, signaller_,
        [this](const std::vector<ProcessRef>& p) { persisted_.push_back(p); });
  }
  FakeSignaller signaller_;
  std::vector<std::vector<ProcessRef>> persisted_;
};

TEST_F(DutyCycleTest, StopsForTheRestOfEachPeriodAfterRunningItsFraction) {
  DutyCycleThrottler t = Make();
  EXPECT_EQ(t.Advance(0), INT64_MAX) << "nothing throttled";
  t.Set("g", {{10, 1}, {11, 2}}, 0.3, 0);
  // Recorded before anything is stopped.
  ASSERT_EQ(persisted_.size(), 1u);
  EXPECT_THAT(persisted_[0], ElementsAre(ProcessRef{10, 1}, ProcessRef{11, 2}));
  EXPECT_THAT(signaller_.sent, IsEmpty());

  // Stopped at once for 70 ms, then running 30 ms, and so on.
  EXPECT_EQ(t.Advance(0), 70 * kMs);
  EXPECT_TRUE(t.Stopped("g"));
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGSTOP));
  EXPECT_THAT(signaller_.To(11), ElementsAre(SIGSTOP));
  EXPECT_EQ(t.Advance(69 * kMs), 70 * kMs) << "not due yet";
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGSTOP));
  EXPECT_EQ(t.Advance(70 * kMs), 100 * kMs);
  EXPECT_FALSE(t.Stopped("g"));
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGSTOP, SIGCONT));
  EXPECT_EQ(t.Advance(100 * kMs), 170 * kMs);
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGSTOP, SIGCONT, SIGSTOP));

  // Run time over 10 periods: 30 %.
  int64_t now = 170 * kMs, running_ns = 0;
  const int64_t end = now + 1000 * kMs;
  while (now < end) {
    const int64_t next = std::min(t.Advance(now), end);
    if (!t.Stopped("g")) running_ns += next - now;
    now = next;
  }
  EXPECT_NEAR(static_cast<double>(running_ns) / (1000 * kMs), 0.3, 0.01);
}

TEST_F(DutyCycleTest, ReleaseContinuesEveryProcessAndForgetsThem) {
  DutyCycleThrottler t = Make();
  t.Set("g", {{10, 1}}, 0.5, 0);
  t.Advance(0);
  ASSERT_TRUE(signaller_.stopped.contains(10));
  t.Release("g");
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  EXPECT_FALSE(t.Throttling("g"));
  EXPECT_EQ(t.Advance(1000 * kMs), INT64_MAX);
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGSTOP, SIGCONT));
  ASSERT_EQ(persisted_.size(), 2u);
  EXPECT_THAT(persisted_[1], IsEmpty()) << "the record is cleared once they run";
}

TEST_F(DutyCycleTest, ReleaseAllContinuesEveryThrottleEvenWhileRunning) {
  DutyCycleThrottler t = Make();
  t.Set("a", {{10, 1}}, 0.5, 0);
  t.Set("b", {{20, 1}}, 0.5, 0);
  t.Advance(0);
  t.Advance(50 * kMs);  // both running again
  t.Set("c", {{30, 1}}, 0.5, 60 * kMs);
  t.Advance(60 * kMs);  // c stopped
  ASSERT_THAT(signaller_.stopped, ElementsAre(30));
  t.ReleaseAll();
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  for (pid_t pid : {10, 20, 30}) EXPECT_EQ(signaller_.To(pid).back(), SIGCONT) << pid;
  EXPECT_THAT(t.Processes(), IsEmpty());
}

TEST_F(DutyCycleTest, AProcessThatLeavesTheSetIsContinuedAtOnce) {
  DutyCycleThrottler t = Make();
  t.Set("g", {{10, 1}, {11, 1}}, 0.5, 0);
  t.Advance(0);
  t.Set("g", {{11, 1}}, 0.5, 10 * kMs);
  EXPECT_FALSE(signaller_.stopped.contains(10));
  EXPECT_TRUE(signaller_.stopped.contains(11));
  EXPECT_THAT(persisted_.back(), ElementsAre(ProcessRef{11, 1}));
}

TEST_F(DutyCycleTest, AFractionOfOneNeverStopsAndATinyOneIsClamped) {
  DutyCycleThrottler t = Make();
  t.Set("full", {{10, 1}}, 1.0, 0);
  t.Set("tiny", {{11, 1}}, 0.0, 0);
  EXPECT_DOUBLE_EQ(t.RunFraction("tiny"), 0.05);
  for (int64_t now = 0; now < 1000 * kMs; now += kMs) t.Advance(now);
  EXPECT_THAT(signaller_.To(10), IsEmpty());
  EXPECT_EQ(signaller_.To(11).size(), 20u) << "10 stops and 10 continues in 10 periods";
}

TEST_F(DutyCycleTest, RecoverContinuesWhatARecordNamesAndSkipsProcessesThatWentAway) {
  signaller_.gone.insert(11);
  const auto continued = DutyCycleThrottler::Recover({{10, 1}, {11, 2}}, signaller_);
  EXPECT_THAT(continued, ElementsAre(ProcessRef{10, 1}));
  EXPECT_THAT(signaller_.To(10), ElementsAre(SIGCONT));
}

TEST(ProcessRefsJsonTest, RoundTripsAndRejectsBadRecords) {
  const std::vector<ProcessRef> refs = {{10, 123}, {4000000, 1ull << 40}};
  auto back = ProcessRefsFromJson(ProcessRefsJson(refs));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, refs);
  EXPECT_FALSE(ProcessRefsFromJson(nlohmann::json::object()).ok());
  EXPECT_FALSE(ProcessRefsFromJson({{"processes", {{{"pid", "x"}}}}}).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
