// GroupKeeper: the background thread a member runs for its group
// (DESIGN.md section 3). It waits, blocked on the segment's controller lock,
// until it holds the controller role (at once if nobody does; the moment the
// holder dies otherwise); then, every kPeriod, it reclaims the memory of
// members that died and beats the group's heartbeat. So a SIGKILLed member's
// memory returns to the group within one period while any member lives.
// While a device has a compute limit it also runs the group's
// ComputeController every ComputeController::kPeriod; a limit change wakes it
// at once (it sleeps on the segment's change word).
//
// The thread blocks every signal (the host's handlers never run on it) and
// is detached: it never delays the host's exit.
#pragma once

#include <chrono>

#include "shm/group_segment.h"

namespace gpuslice::limiter {

class GroupKeeper {
 public:
  static constexpr std::chrono::milliseconds kPeriod{200};

  // Starts the keeper of `segment` on a new thread. `segment` must outlive
  // the process (the limiter never frees it). Returns false if no thread
  // could be started (the group then relies on other members and on
  // reclamation when an allocation would fail).
  static bool Start(GroupSegment* segment);
};

}  // namespace gpuslice::limiter
