// GroupKeeper: the periodic work of whoever controls a group (DESIGN.md
// section 3): every kPeriod it reclaims the memory of members that died and
// beats the group's heartbeat; while a device has a compute limit it runs the
// group's ComputeController every ComputeController::kPeriod.
//
// Time is injected: Step() does what is due at the clock's now and says when
// the next step is due, so tests drive a SimulatedClock step by step and the
// daemon can run many groups from one loop. RunForever() is a member's loop
// (the limiter's keeper thread).
//
// Not thread-safe: one instance, on the controlling thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/clock.h"
#include "control/compute_controller.h"
#include "shm/group_segment.h"

namespace gpuslice::control {

class GroupKeeper {
 public:
  static constexpr std::chrono::milliseconds kPeriod{200};

  // REQUIRES: `segment`, `compute` and `monotonic` outlive the keeper;
  // `monotonic` is on CLOCK_MONOTONIC's time base (the segment's).
  GroupKeeper(GroupSegment& segment, ComputeController& compute, const Clock& monotonic);

  // Does what is due now; returns the nanoseconds until the next step is due.
  int64_t Step();

  // A member's loop, forever: while gpusliced's claim is fresh the member
  // does not control the group (it gives the role up if it held it); when
  // the claim is absent or stale it takes the role as soon as nobody else
  // holds it and steps, sleeping between steps on the segment's change word.
  // A daemon that holds the role but stopped beating (hung) does not block
  // the group: members step without the role until it beats again.
  void RunForever();

 private:
  GroupSegment& segment_;
  ComputeController& compute_;
  const Clock& clock_;
  int64_t next_reap_ns_ = 0;
};

}  // namespace gpuslice::control
