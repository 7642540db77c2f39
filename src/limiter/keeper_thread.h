// The keeper thread a member runs for its group (DESIGN.md section 3): it
// runs control::GroupKeeper::RunForever with NVML read in-process, so that
// while gpusliced does not control the group one member does (the role passes
// within a keeper period when its holder dies), and a SIGKILLed member's
// memory returns to the group within a keeper period or two while any member
// lives.
//
// The thread blocks every signal (the host's handlers never run on it) and is
// detached: it never delays the host's exit.
#pragma once

#include <string>

#include "shm/group_segment.h"

namespace gpuslice::limiter {

// Starts the keeper of `segment` on a new thread. `segment` must outlive the
// process (the limiter never frees it). Returns false if no thread could be
// started (the group then relies on other members and on reclamation when an
// allocation would fail).
// `daemon_socket`: gpusliced's socket when this process registers with it
// (empty: it does not). While that file exists and the daemon does not
// control the group, the keeper paces it provisionally
// (control::GroupKeeper::GrantProvisionally).
bool StartKeeperThread(GroupSegment* segment, std::string daemon_socket = {});

}  // namespace gpuslice::limiter
