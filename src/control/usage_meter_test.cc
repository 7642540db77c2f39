#include "control/usage_meter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace gpuslice::control {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kTick = 100 * kMs;
constexpr int64_t kWindow = 200 * kMs;  // the H100's NVML window

// Groups that run a steady share on simulated time: each tick they complete
// share x tick / kernel launches; the device's windows say what all ran.
struct Plant {
  struct G {
    UsageMeter::Group group;
    double share;       // of the device's time
    int64_t kernel_ns;  // its true device time per launch
    double done = 0;    // fractional launches
  };
  std::vector<G> groups;
  UsageMeter meter;
  int64_t now = 1'000'000 * kMs;
  int64_t window_start = now;
  double window_busy = 0;  // device ns in the open window

  void Add(const std::string& name, double share, int64_t kernel_ns, bool latency = false,
           bool charge_known = true) {
    G g;
    g.group = {.name = name, .latency = latency, .charge_ns = charge_known ? kernel_ns : 0};
    g.share = share;
    g.kernel_ns = kernel_ns;
    groups.push_back(g);
  }
  void Run(int ticks) {
    for (int i = 0; i < ticks; ++i) {
      now += kTick;
      std::vector<UsageMeter::Group> in;
      for (G& g : groups) {
        g.done += g.share * static_cast<double>(kTick) / static_cast<double>(g.kernel_ns);
        g.group.launches = g.group.completed = static_cast<uint64_t>(g.done);
        window_busy += g.share * static_cast<double>(kTick);
        in.push_back(g.group);
      }
      std::vector<UsageMeter::BusyWindow> closed;
      if (now - window_start >= kWindow) {
        // NVML rounds each window to a whole percent.
        const double percent = std::round(100 * window_busy / static_cast<double>(kWindow));
        closed.push_back({.end_ns = now, .length_ns = kWindow, .busy = percent / 100});
        window_start = now;
        window_busy = 0;
      }
      meter.Tick(now, in, closed);
    }
  }
};

TEST(UsageMeter, ABatchGroupRanItsLaunchesSeenCompleteTimesTheirCharge) {
  Plant p;
  p.Add("fast", 0.30, 200'000);
  p.Add("slow", 0.60, 20 * kMs);  // few launches: the window stretches to hold 16
  p.Run(50);
  EXPECT_NEAR(p.meter.Of("fast").used_bp, 3000, 30);
  EXPECT_NEAR(p.meter.Of("slow").used_bp, 6000, 100);
  EXPECT_NEAR(p.meter.Of("fast").used_fast_bp, 3000, 60);
  EXPECT_TRUE(p.meter.Of("fast").launched);
  EXPECT_NEAR(p.meter.device_busy_bp(), 9000, 60);
  EXPECT_EQ(p.meter.Of("nobody").used_bp, 0u);
}

TEST(UsageMeter, ALatencyGroupsChargeIsWhatTheDeviceRanBesideTheBatchGroups) {
  Plant p;
  p.Add("batch", 0.70, 2 * kMs);
  // Its launches are each waited for: no measured charge of its own.
  p.Add("latency", 0.12, 50'000, /*latency=*/true, /*charge_known=*/false);
  p.Run(50);
  const UsageMeter::Reading r = p.meter.Of("latency");
  EXPECT_NEAR(static_cast<double>(r.charge_ns), 50'000, 50'000 * 0.05);
  EXPECT_NEAR(r.used_bp, 1200, 60);
}

TEST(UsageMeter, TwoLatencyGroupsSplitTheResidualByTheirOwnCharges) {
  Plant p;
  p.Add("batch", 0.50, 1 * kMs);
  p.Add("short", 0.10, 100'000, true);
  p.Add("long", 0.20, 1 * kMs, true);
  p.Run(50);
  EXPECT_NEAR(p.meter.Of("short").used_bp, 1000, 60);
  EXPECT_NEAR(p.meter.Of("long").used_bp, 2000, 100);
}

TEST(UsageMeter, AGroupThatStopsIsNotLaunchedASecondLater) {
  Plant p;
  p.Add("g", 0.5, 1 * kMs);
  p.Run(20);
  p.groups[0].share = 0;
  p.Run(12);
  EXPECT_FALSE(p.meter.Of("g").launched);
  EXPECT_EQ(p.meter.Of("g").used_fast_bp, 0u);
}

// A group of short launches that goes quiet reads 0 a second later, and
// no more while quiet: its window does not stretch back to when it ran (the
// bench's idle case read a 66 % group at 20-40 % for 4 s after it stopped).
TEST(UsageMeter, AGroupOfShortLaunchesThatGoesQuietReadsNothingASecondLater) {
  Plant p;
  p.Add("g", 0.66, 20'000);
  p.Run(30);
  EXPECT_NEAR(p.meter.Of("g").used_bp, 6600, 70);
  p.groups[0].share = 0;
  for (int tick = 1; tick <= 40; ++tick) {
    p.Run(1);
    if (tick >= 11) {
      EXPECT_EQ(p.meter.Of("g").used_bp, 0u) << tick;
    }
  }
}

TEST(UsageMeter, CountsThatGoBackStartAGroupOver) {
  Plant p;
  p.Add("g", 0.5, 1 * kMs);
  p.Run(20);
  p.groups[0].done = 0;  // a new segment under the same name
  p.Run(1);
  EXPECT_EQ(p.meter.Of("g").used_bp, 0u);
  p.Run(15);
  EXPECT_NEAR(p.meter.Of("g").used_bp, 5000, 100);
}

}  // namespace
}  // namespace gpuslice::control
