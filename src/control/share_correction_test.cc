// ShareCorrection's contract, window by window (simulated time: the caller
// passes each window's end).
#include "control/share_correction.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace gpuslice::control {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kWindow = 166'666'667;  // NVML's shortest window
constexpr int64_t kCharge = 2 * kMs;      // tolerance: 3 points + 1.2

// Feeds `n` windows from `*t` on.
void Feed(ShareCorrection& c, int64_t* t, int n, double share, double rate, bool held) {
  for (int i = 0; i < n; ++i) {
    *t += kWindow;
    c.Update(*t, share, rate, kCharge, held);
  }
}

TEST(ShareCorrection, AGroupUnderItsRateWhileHeldBackIsSpedUpBounded) {
  ShareCorrection c;
  int64_t t = 0;
  Feed(c, &t, 1, 0.70, 0.70, true);  // the first window sets the rate
  Feed(c, &t, 5, 0.56, 0.70, true);  // settled (kSettleDownNs), then held
  EXPECT_LT(c.factor(), 0.95);
  Feed(c, &t, 30, 0.20, 0.70, true);
  EXPECT_DOUBLE_EQ(c.factor(), ShareCorrection::kMinFactor);
}

TEST(ShareCorrection, AGroupUnderItsRateThatDoesNotWaitIsLeftAlone) {
  ShareCorrection c;
  int64_t t = 0;
  Feed(c, &t, 1, 0.70, 0.70, false);
  Feed(c, &t, 20, 0.50, 0.70, false);
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
}

// A group that resumes waits for budget at once, while the windows measured
// still hold its pause: one held window is not enough.
TEST(ShareCorrection, OneHeldWindowAfterAnIdleOneIsNoEvidence) {
  ShareCorrection c;
  int64_t t = 0;
  Feed(c, &t, 1, 0.30, 0.30, false);
  Feed(c, &t, 10, 0.0, 0.30, false);  // paused
  Feed(c, &t, 1, 0.10, 0.30, true);   // resumes
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  Feed(c, &t, 1, 0.20, 0.30, true);  // held for a whole kWindowNs now
  EXPECT_LT(c.factor(), 1.0);
}

// Within the noise nothing starts; once lowered, the factor follows the
// share to the rate itself (not the noise's edge), and goes back to 1 once
// the group stops waiting.
TEST(ShareCorrection, ALoweredFactorTracksTheRateAndRelaxes) {
  ShareCorrection c;
  int64_t t = 0;
  Feed(c, &t, 1, 0.70, 0.70, true);
  Feed(c, &t, 10, 0.67, 0.70, true);  // within 4.2 points: noise
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  Feed(c, &t, 2, 0.60, 0.70, true);
  const double lowered = c.factor();
  EXPECT_LT(lowered, 1.0);
  Feed(c, &t, 1, 0.68, 0.70, true);  // under, within the noise: on down
  EXPECT_LT(c.factor(), lowered);
  Feed(c, &t, 10, 0.70, 0.70, false);  // no longer held
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
}

// A change of workload resets the factor; a group held back by its budget
// is corrected again after kSettleDownNs (either way), any group after
// kSettleNs.
TEST(ShareCorrection, AWorkloadChangeResetsAndSettles) {
  ShareCorrection c;
  int64_t t = 0;
  Feed(c, &t, 1, 0.70, 0.70, true);
  Feed(c, &t, 4, 0.50, 0.70, true);
  EXPECT_LT(c.factor(), 1.0);
  c.Hold(t);
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  const int64_t held_at = t;
  while (t + kWindow < held_at + ShareCorrection::kSettleDownNs) {
    Feed(c, &t, 1, 0.50, 0.70, true);
    EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  }
  Feed(c, &t, 2, 0.50, 0.70, true);
  EXPECT_LT(c.factor(), 1.0);
  c.Hold(t);
  Feed(c, &t, 5, 0.95, 0.70, false);  // over, not held (a backlog drains): within kSettleNs
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  Feed(c, &t, 10, 0.95, 0.70, false);
  EXPECT_GT(c.factor(), 1.0);
  c.Hold(t);
  Feed(c, &t, 2, 0.95, 0.70, true);
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  Feed(c, &t, 2, 0.95, 0.70, true);  // held throughout, kSettleDownNs after
  EXPECT_GT(c.factor(), 1.0);
}

}  // namespace
}  // namespace gpuslice::control
