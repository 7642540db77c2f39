// Where group segments live (DESIGN.md section 3; docs/security.md "Pods are
// kept apart by their segment directories").
//
// The segment directory (GPUSLICE_SHM_DIR, default /dev/shm/gpuslice) holds
// the segments of local groups and the node segment. A group the kubelet
// handed out (a DRA claim, a device-plugin allocation) gets a directory of
// its own, `<shm_dir>/claims/<group>/`, and its containers mount only that
// one (as GPUSLICE_SHM_DIR, at the same path), so a tenant cannot open,
// list or corrupt another group's segment whatever uid it runs as:
//   <shm_dir>/              1777  local groups, node.v1
//   <shm_dir>/claims/       0711  traversable, not listable
//   <shm_dir>/claims/<id>/  1777  the group's segment
// The daemon finds segments in every one of these directories
// (GroupSegmentDirs), a claim's own directory first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice {

inline constexpr char kClaimDirsName[] = "claims";

// `<shm_dir>/claims/<group>`.
std::string ClaimSegmentDir(const std::string& shm_dir, std::string_view group);

// Creates ClaimSegmentDir(shm_dir, group) and its parents with the modes
// above (existing ones are kept). kInvalidArgument for a group that is not a
// single path component; kUnavailable naming the directory on failure.
Status MakeClaimSegmentDir(const std::string& shm_dir, std::string_view group);

// Removes the claim's directory with the segments in it that no process is
// attached to. OK when it is gone; kFailedPrecondition when a segment is
// still in use (the directory stays; the collector removes the segment once
// it is abandoned and a later call the directory).
Status RemoveClaimSegmentDir(const std::string& shm_dir, std::string_view group);

// The directories that may hold group segments: each claim directory
// (sorted), then `shm_dir` itself.
std::vector<std::string> GroupSegmentDirs(const std::string& shm_dir);

// The directory of `group`'s segment: its claim directory when the segment
// file is there, else `shm_dir` (local groups). Readers outside the daemon
// (`gpuslice status`, `top`, `limit set`) find a claim's group through it.
std::string SegmentDirOf(const std::string& shm_dir, std::string_view group);

// Every group with a segment in GroupSegmentDirs(shm_dir), once (a claim's
// own directory wins, as the daemon adopts them), sorted. Only root can list
// `claims/` (0711): others see the groups of `shm_dir` itself.
std::vector<std::string> ListAllGroups(const std::string& shm_dir);

}  // namespace gpuslice
