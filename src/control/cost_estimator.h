// CostEstimator: how much device time one launch of a group costs, learned
// from what the device reports (DESIGN.md section 2, compute limits).
//
// Peers charge a launch by its grid size and are wrong by the kernel's length.
// We divide what NVML says the group's processes kept the device busy by how
// many launches the group made over the same spans (a ratio of sums over a
// horizon of recent spans), so every kernel length, graph and cooperative
// launch is charged what it really costs on average, and other tenants'
// time slices (which stretch a kernel's wall time, not its busy time) do not
// count against the group.
//
// Inputs arrive on one time base (the controller uses CLOCK_REALTIME, the
// base of NVML's sample timestamps):
//  - RecordLaunches(t, total): the group's cumulative launch count at t, every
//    controller tick;
//  - AddBusy(start, end, fraction): NVML saw the group busy for `fraction` of
//    (start, end]. Spans arrive late (NVML closes its sampling windows every
//    1/6 s to 1 s) and in order.
// The launch count of a span is interpolated from the recorded history. The
// queue between launch and execution is bounded by the pacer's burst, so in
// a steady state it biases nothing; the horizon absorbs transients.
//
// Not thread-safe: owned by the group controller's thread.
#pragma once

#include <cstdint>
#include <deque>

namespace gpuslice::control {

class CostEstimator {
 public:
  struct Options {
    int64_t horizon_ns = 2'000'000'000;       // at least this much recent busy evidence...
    uint64_t horizon_launches = 32;           // ...and at least this many launches...
    int64_t max_horizon_ns = 10'000'000'000;  // ...but never older than this
    int64_t min_span_ns = 400'000'000;        // evidence needed before any estimate
    uint64_t min_launches = 4;
    int64_t history_ns = 30'000'000'000;  // launch history kept
  };

  CostEstimator() : CostEstimator(Options{}) {}
  explicit CostEstimator(const Options& options) : options_(options) {}

  // REQUIRES: t_ns does not decrease between calls; total never decreases.
  void RecordLaunches(int64_t t_ns, uint64_t total);
  // REQUIRES: start_ns < end_ns; 0 <= busy_fraction <= 1; spans do not overlap
  // earlier ones.
  void AddBusy(int64_t start_ns, int64_t end_ns, double busy_fraction);

  // Estimated device ns per launch; 0 while the evidence is too thin (less
  // than min_span_ns of spans with launches, or fewer than min_launches).
  int64_t CostNs() const;
  // The group's busy share over the spans of the last `window_ns` (0..1);
  // -1 when no span ended in that window.
  double RecentShare(int64_t window_ns) const;
  // End of the latest span (0: none yet).
  int64_t last_span_end() const { return spans_.empty() ? 0 : spans_.back().end_ns; }

  // Launches the group made in (start_ns, end_ns], interpolated.
  double LaunchesBetween(int64_t start_ns, int64_t end_ns) const;

 private:
  struct Point {
    int64_t t_ns;
    uint64_t total;
  };
  struct Span {
    int64_t start_ns, end_ns;
    double busy_ns;
    double launches;
  };
  double LaunchesAt(int64_t t_ns) const;

  Options options_;
  std::deque<Point> history_;
  std::deque<Span> spans_;
};

}  // namespace gpuslice::control
