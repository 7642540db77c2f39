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
// controller records the launches the GPU has run (as each member has seen
// them complete: SlotCompute::queued), so a backlog's or a drained queue's
// busy time and its launches fall in the same spans; a lump seen complete at
// once is spread over the stretch it ran in (RecordLaunches' spread_from_ns).
//
// Workload changes (kernels 100x longer, graphs in place of single launches,
// a member with other kernels joining): the newest evidence (at least
// recent_ns of spans and recent_launches launches) is compared with the
// evidence before it (up to a horizon) after every span. When the two differ by more than
// shift_factor the workload has changed: the older spans are dropped, so the estimate follows the
// new workload within a window or two instead of averaging the old one in for a whole horizon. A
// window that NVML rounds to 0 % while the group launched is taken as at most half a percent busy
// (an upper bound), so a group whose kernels became much shorter is not starved by its old charge.
// The evidence kept across a shift (the newest, that showed it) holds the span
// of the change itself, both workloads' launches (the old queue's short
// launches seen complete beside the first long ones): its ratio is off (kernels
// 100x longer: the new cost was estimated 10-25 % short for a whole horizon,
// and under a 70 % cap the group ran at 75-77 %). Once the spans since the
// shift was detected hold the newest evidence on their own, the spans from
// before go (once per shift).
// Evidence holding a span in which the group launched but had no sample (NVML gave that window
// to another process: window attribution, compute_controller.h) is no ground for a shift: such a
// span's busy time is right only on average, over many windows.
//
// Not thread-safe: owned by the group controller's thread.
#pragma once

#include <cstddef>
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
    int64_t recent_ns = 300'000'000;      // the newest evidence compared with the horizon...
    uint64_t recent_launches = 8;         // ...at least this many launches
    double shift_factor = 1.5;            // a ratio beyond this (either way) is a change
    // ...and at least this many spans in which the group had a sample and was
    // busy (NVML's window attribution: the group's busy time comes in whole
    // windows, and an estimate of a few of them is off by their number).
    uint32_t min_sampled_spans = 0;
  };

  CostEstimator() : CostEstimator(Options{}) {}
  explicit CostEstimator(const Options& options) : options_(options) {}

  // Takes `options` from now on (the evidence kept stays).
  void SetOptions(const Options& options) { options_ = options; }
  const Options& options() const { return options_; }

  // REQUIRES: t_ns does not decrease between calls; total never decreases.
  // `spread_from_ns` (>= 0): the launches added since the last record ran
  // over (spread_from_ns, t_ns] (seen complete in one lump after a stretch
  // in which none was): the records in between, which said none had, are
  // dropped and the spans since then recounted.
  void RecordLaunches(int64_t t_ns, uint64_t total, int64_t spread_from_ns = -1);
  // REQUIRES: start_ns < end_ns; 0 <= busy_fraction <= 1; spans do not overlap
  // earlier ones. `sampled`: some member of the group had a sample in the
  // span (a 0 is then NVML's rounding, not a missing sample).
  void AddBusy(int64_t start_ns, int64_t end_ns, double busy_fraction, bool sampled = true);

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

  // Workload changes detected so far (spans dropped for a new estimate).
  uint64_t shifts() const { return shifts_; }

 private:
  struct Point {
    int64_t t_ns;
    uint64_t total;
  };
  struct Span {
    int64_t start_ns, end_ns;
    double busy_ns;
    double launches;
    bool sampled;  // some member had a sample in it (AddBusy)
  };
  double LaunchesAt(int64_t t_ns) const;
  // Busy ns / launches over the newest spans with evidence, until they cover
  // `min_ns` and `min_launches` (or run out): the index of the oldest span
  // used in `first`, whether they covered both in `complete` (either may be
  // null). 0 when the evidence is too thin for any estimate.
  double RatioNewest(int64_t min_ns, double min_launches, size_t* first, bool* complete) const;
  // Drops the spans before the newest evidence when it disagrees with the horizon.
  void DetectShift();
  // After a shift, once the spans since its detection hold the newest
  // evidence, drops the spans kept from before it (see above).
  void ConfirmShift();

  Options options_;
  std::deque<Point> history_;
  std::deque<Span> spans_;
  uint64_t shifts_ = 0;
  // End of the newest span when the last shift was detected; spans ending
  // up to it are the evidence kept across the shift (0: none pending).
  int64_t shift_seen_ns_ = 0;
};

}  // namespace gpuslice::control
