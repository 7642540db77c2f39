#include "tests/gpu/calibration_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace gpuslice::gpu_tier {
namespace {

// Two contexts alternating alone on the GPU: runs of `slice` ns, A, B, A, B…,
// each followed by a switch of `sw` ns. Each context's timeline records a gap
// from the end of one of its runs to the start of its next.
void Alternate(uint64_t slice, uint64_t sw, int rounds, std::vector<uint64_t>* a,
               std::vector<uint64_t>* b) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  uint64_t t = 1'000'000;
  for (int i = 0; i < 2 * rounds; ++i, t += slice + sw) runs.emplace_back(t, t + slice);
  for (size_t k = 0; k + 2 < runs.size(); ++k) {
    std::vector<uint64_t>* timeline = k % 2 == 0 ? a : b;
    timeline->push_back(runs[k].second);
    timeline->push_back(runs[k + 2].first);
  }
}

TEST(CalibrationMathTest, RecoversSliceAndSwitchFromAlternatingTimelines) {
  std::vector<uint64_t> a, b;
  Alternate(/*slice=*/2'000'000, /*sw=*/30'000, /*rounds=*/20, &a, &b);
  const SliceEstimate e = EstimateSlices(a, b);
  EXPECT_NEAR(e.timeslice_us, 2000.0, 0.01);
  EXPECT_NEAR(e.switch_us, 30.0, 0.01);
}

TEST(CalibrationMathTest, TooFewGapsTellNothing) {
  EXPECT_EQ(EstimateSlices({}, {}).timeslice_us, -1);
  EXPECT_EQ(EstimateSlices({10, 20}, {10, 20}).switch_us, -1);  // one gap, no whole run
}

// A missed sample (the last spacing is doubled) does not move the median.
TEST(CalibrationMathTest, SampleWindowIsTheMedianSpacing) {
  EXPECT_DOUBLE_EQ(SampleWindowUs({100, 166766, 333432, 500098, 900000}), 166666);
  EXPECT_EQ(SampleWindowUs({5}), -1);
}

TEST(CalibrationMathTest, RunsLeaveOutThePartialEnds) {
  EXPECT_EQ(RunsUs({1000, 2000, 5000, 6000, 9000, 10000}), (std::vector<double>{3, 3}));
  EXPECT_EQ(GapsUs({1000, 2000, 5000, 6000}), (std::vector<double>{1, 1}));
}

}  // namespace
}  // namespace gpuslice::gpu_tier
