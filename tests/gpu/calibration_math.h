// The calibration's arithmetic (programs/gpu_calibrate.cu), host-only and
// C++17 so that nvcc compiles it for the program and the host compiler for
// calibration_math_test (which runs without a GPU).
//
// A timeline is what one context's spin kernel recorded: the global timer
// (ns) just before and just after every gap in its progress, i.e. every time
// its context was switched out: {before0, after0, before1, after1, …}.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpuslice::gpu_tier {

// The median (upper middle for an even count); -1 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The runs (µs) between consecutive gaps; the partial first and last runs
// (before the first gap, after the last) are left out.
inline std::vector<double> RunsUs(const std::vector<uint64_t>& timeline) {
  std::vector<double> runs;
  for (size_t i = 1; i + 2 < timeline.size(); i += 2) {
    runs.push_back(static_cast<double>(timeline[i + 1] - timeline[i]) / 1000.0);
  }
  return runs;
}

// The gaps (µs).
inline std::vector<double> GapsUs(const std::vector<uint64_t>& timeline) {
  std::vector<double> gaps;
  for (size_t i = 0; i + 1 < timeline.size(); i += 2) {
    gaps.push_back(static_cast<double>(timeline[i + 1] - timeline[i]) / 1000.0);
  }
  return gaps;
}

struct SliceEstimate {
  double timeslice_us = -1;  // the mean of the two contexts' median runs
  double switch_us = -1;     // one context switch
};

// Two contexts sharing the GPU alone: each gap of one is the other's run plus
// two switches, so switch = (median gap − other's median run) / 2, averaged
// over both. -1 where a timeline has too few gaps to tell.
inline SliceEstimate EstimateSlices(const std::vector<uint64_t>& a,
                                    const std::vector<uint64_t>& b) {
  SliceEstimate e;
  const double run_a = Median(RunsUs(a)), run_b = Median(RunsUs(b));
  const double gap_a = Median(GapsUs(a)), gap_b = Median(GapsUs(b));
  if (run_a <= 0 || run_b <= 0 || gap_a <= 0 || gap_b <= 0) return e;
  e.timeslice_us = (run_a + run_b) / 2;
  e.switch_us = ((gap_a - run_b) + (gap_b - run_a)) / 4.0;
  return e;
}

// NVML's sampling window (µs): the median spacing of distinct sample
// timestamps, given sorted; -1 for fewer than two.
inline double SampleWindowUs(const std::vector<unsigned long long>& sorted_stamps) {
  std::vector<double> spacing;
  for (size_t i = 1; i < sorted_stamps.size(); ++i) {
    spacing.push_back(static_cast<double>(sorted_stamps[i] - sorted_stamps[i - 1]));
  }
  return Median(spacing);
}

}  // namespace gpuslice::gpu_tier
