// Which segment slot each host pid of a group holds: gpusliced knows its
// tenants by host pid (the registry), a segment's slots by the pid in the
// member's own namespace and its start time. A host process matches a slot
// when the last pid of its NSpid line (its pid in its innermost namespace)
// and its /proc/<pid>/stat start time equal the slot's owner_pid and
// start_time. The ComputeController charges a matched member by its own
// launches; an unmatched one (gone, not yet joined, unreadable) keeps slot -1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/compute_controller.h"
#include "shm/group_segment.h"

namespace gpuslice::daemon {

// One slot's owner as the segment records it.
struct SlotOwner {
  int slot;
  int32_t pid;          // in the owner's namespace
  uint64_t start_time;  // /proc/<pid>/stat field 22 (clock ticks since boot)
};

// The live slots' owners of `segment`.
std::vector<SlotOwner> SlotOwners(const GroupSegment& segment);

// `host_pids` as Members, each with the slot it owns among `owners` (read
// under `proc_root`, "/proc" on a host), or -1.
std::vector<control::ComputeController::Member> MatchSlots(const std::vector<int32_t>& host_pids,
                                                           const std::vector<SlotOwner>& owners,
                                                           const std::string& proc_root);

}  // namespace gpuslice::daemon
