// What the backlog watch's markers measure (shm/progress_watch.h): the
// device time of launches whose stream had work throughout, exact where the
// group holds the device alone and a bound elsewhere, brackets on an idle
// stream, and the least bounded launch of late.
#include "shm/progress_watch.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace gpuslice {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;

// A stream of markers the test completes at the GPU times it gives.
class Stream {
 public:
  explicit Stream(bool alone) : alone_(alone) {}

  // A launch at `now`: marked at once when the watch asks (every launch, as
  // a period of 0 makes it).
  void Launch(int64_t now, bool newest_pending) {
    const int i = watch.Launched(now, 100 * kUs, newest_pending, /*mark_period_ns=*/0, alone_);
    if (i < 0) return;
    complete_[i] = false;
    watch.Marked(now);
  }
  // A start marker on the idle stream at `now`, and the launch it brackets.
  void Bracketed(int64_t now) {
    const int i = watch.BracketIndex();
    ASSERT_GE(i, 0);
    complete_[i] = false;
    watch.BracketMarked(now, alone_);
    Launch(now, /*newest_pending=*/true);
  }
  // The oldest pending marker completes at GPU time `gpu_ns`.
  void Complete(int64_t gpu_ns) {
    const int head = Head();
    done_at_[head] = gpu_ns;
    complete_[head] = true;
    watch.Poll(
        gpu_ns, [&](int i) { return complete_[i]; },
        [&](int from, int to) { return done_at_[to] - done_at_[from]; });
  }

  ProgressWatch watch;

 private:
  int Head() const {
    const int newest = watch.newest();
    return (newest - watch.pending() + 1 + ProgressWatch::kMarkers) % ProgressWatch::kMarkers;
  }
  bool alone_;
  std::array<bool, ProgressWatch::kMarkers> complete_{};
  std::array<int64_t, ProgressWatch::kMarkers> done_at_{};
};

// Alone in its turn: a backlogged stream's intervals are its launches'
// device time exactly; the first launch after the stream ran dry measures
// nothing (its start is unknown).
TEST(ProgressWatchTest, BackloggedIntervalsAloneAreExact) {
  Stream s(/*alone=*/true);
  s.Launch(0, /*newest_pending=*/false);  // nothing before it: no interval
  s.Launch(1 * kUs, /*newest_pending=*/true);
  s.Launch(2 * kUs, /*newest_pending=*/true);
  s.Complete(200 * kUs);
  s.Complete(500 * kUs);  // 300 us
  s.Complete(700 * kUs);  // 200 us
  const ProgressWatch::Taken t = s.watch.TakeBusy();
  EXPECT_EQ(t.exact.ns, 500 * kUs);
  EXPECT_EQ(t.exact.launches, 2u);
  EXPECT_EQ(t.bound.launches, 0u);
  EXPECT_EQ(s.watch.TakeBusy().exact.launches, 0u);  // taken once
}

// Beside another group's context, the same intervals only bound; a
// bracket's interval (its queueing to its end) too.
TEST(ProgressWatchTest, IntervalsBesideOthersOnlyBound) {
  Stream s(/*alone=*/false);
  s.Bracketed(0);
  s.Complete(0);        // the start marker, timed as it was queued
  s.Complete(2 * kMs);  // the launch waited 1.9 ms for the other context
  const ProgressWatch::Taken t = s.watch.TakeBusy();
  EXPECT_EQ(t.exact.launches, 0u);
  EXPECT_EQ(t.bound.ns, 2 * kMs);
  EXPECT_EQ(t.bound.launches, 1u);
}

// The least of the last bounded launches, once there are enough of them:
// one that found the device free took about its own time; a launch long ago
// no longer counts.
TEST(ProgressWatchTest, TheBoundFloorIsTheLeastOfTheLastBoundedLaunches) {
  Stream s(/*alone=*/false);
  EXPECT_EQ(s.watch.BoundFloorNs(), 0);
  int64_t now = 0;
  auto bracket = [&](int64_t took) {
    s.Bracketed(now);
    s.Complete(now);
    s.Complete(now + took);
    now += 10 * kMs;
  };
  bracket(3 * kMs);
  bracket(1100 * kUs);  // the device was free
  for (int i = 2; i < ProgressWatch::kFloorMinLaunches; ++i) {
    EXPECT_EQ(s.watch.BoundFloorNs(), 0) << "too few yet: " << i;
    bracket(2500 * kUs);
  }
  EXPECT_EQ(s.watch.BoundFloorNs(), 1100 * kUs);
  for (int i = 0; i < ProgressWatch::kFloorLaunches; ++i) bracket(2 * kMs);
  EXPECT_EQ(s.watch.BoundFloorNs(), 2 * kMs);
}

}  // namespace
}  // namespace gpuslice
