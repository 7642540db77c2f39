// GroupKeeper: the periodic work of whoever controls a group (DESIGN.md
// section 3): every kPeriod it reclaims the memory of members that died and
// beats the group's heartbeat; while a device has a compute limit it runs the
// group's ComputeControl every ComputeControl::kPeriod.
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
#include <functional>

#include "common/clock.h"
#include "control/compute_control.h"
#include "shm/group_segment.h"

namespace gpuslice::control {

class GroupKeeper {
 public:
  static constexpr std::chrono::milliseconds kPeriod{200};

  // REQUIRES: `segment`, `compute` and `monotonic` outlive the keeper;
  // `monotonic` is on CLOCK_MONOTONIC's time base (the segment's).
  GroupKeeper(GroupSegment& segment, ComputeControl& compute, const Clock& monotonic);

  // Does what is due now; returns the nanoseconds until the next step is due.
  int64_t Step();

  // A member's loop, forever: while gpusliced's claim is fresh the member
  // does not control the group (it gives the role up if it held it); when
  // the claim is absent or stale it takes the role as soon as nobody else
  // holds it and steps, sleeping between steps on the segment's change word.
  // A daemon that holds the role but stopped beating (hung) does not block
  // the group: members step without the role until it beats again.
  void RunForever();

  // One pass of RunForever's loop at the clock's now: returns the
  // nanoseconds to wait (on the segment's change word) before the next.
  int64_t MemberStep();

  // A grant just below the whole device: launches take the paced path (they
  // are counted and their queue stays within the burst) while costing
  // nothing when the group is alone.
  static constexpr uint32_t kProvisionalGrantBp = kFullGrantBp - 1;

  // Writes kProvisionalGrantBp on every attached device of `segment` that
  // has no grant. A member does this while gpusliced is expected (its socket
  // exists) but does not control the group yet, so that the group is paced
  // from its first launch: an unpaced group fills the driver's queue (up to
  // 1024 launches, seconds of long kernels) before the daemon adopts it, and
  // its first grant then waits for that queue to drain.
  static void GrantProvisionally(GroupSegment& segment);

  // Whether gpusliced is expected on this node (a member's keeper: its
  // socket exists). When it says so, a member taking the controller role
  // paces provisionally (GrantProvisionally) rather than by the limits alone.
  void set_daemon_expected(std::function<bool()> expected) {
    daemon_expected_ = std::move(expected);
  }

 private:
  enum class Role { kNone, kDaemon, kThisProcess };
  GroupSegment& segment_;
  ComputeControl& compute_;
  const Clock& clock_;
  int64_t next_reap_ns_ = 0;
  std::function<bool()> daemon_expected_;
  Role role_ = Role::kNone;  // RunForever's, last logged
};

}  // namespace gpuslice::control
