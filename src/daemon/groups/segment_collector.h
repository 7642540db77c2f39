// SegmentCollector: removes the segments of groups that have been idle for a
// grace period (issue 12, DESIGN.md section 3): no process attached to the
// group, and no controller heartbeat for `grace`. GroupSegment::
// RemoveIfAbandoned makes each removal safe against a process attaching at
// the same moment.
//
// Thread-compatible: one caller (the daemon's monitor tick) at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"

namespace gpuslice::daemon {

class SegmentCollector {
 public:
  // Sweeps `dir` at most once per `period_ns` of `clock`, a CLOCK_MONOTONIC
  // clock (segment heartbeats are on it). REQUIRES: `clock` outlives this.
  SegmentCollector(std::string dir, int64_t grace_ns, int64_t period_ns, const Clock& clock);

  struct Sweep {
    std::vector<std::string> removed;  // groups whose segments were removed
    std::vector<std::string> errors;   // segments that could not be examined or removed
  };
  // Sweeps if a period has passed since the last sweep (the first call
  // always sweeps); an empty result otherwise.
  Sweep MaybeSweep();
  // Sweeps now.
  Sweep SweepNow();

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int64_t grace_ns_;
  int64_t period_ns_;
  const Clock& clock_;
  bool swept_ = false;
  int64_t last_sweep_ns_ = 0;
};

}  // namespace gpuslice::daemon
