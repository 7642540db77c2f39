// ControlRole: who controls a group (include/gpuslice/group_segment.h,
// "Control"): the controller lock one of its handles holds, the
// controller's heartbeat, and gpusliced's claim (DESIGN.md section 3). One
// per GroupSegment handle (segment.control()): holding the role is this
// handle's state, dropped with its file description.
//
// Thread-compatible for the role (one thread takes and resigns it); the
// claim and heartbeat calls are atomic on the shared fields.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "gpuslice/group_segment.h"
#include "shm/segment_os.h"

namespace gpuslice {

class GroupSegment;

class ControlRole {
 public:
  // `fd` and `path` are the segment handle's, which owns this role: the
  // references follow its file description across ReopenAfterFork.
  ControlRole(SegmentOs& os, const int& fd, const std::string& path, GroupSegmentLayout& layout)
      : os_(os), fd_(fd), path_(path), layout_(layout) {}
  ControlRole(const ControlRole&) = delete;
  ControlRole& operator=(const ControlRole&) = delete;

  // Takes the controller role if nobody holds it; true if this handle holds it.
  bool TryBecomeController();
  // Blocks until this handle holds the controller role (or an error).
  Status WaitToBecomeController();
  // Gives up the controller role if this handle holds it.
  void ResignController();
  bool is_controller() const { return held_; }
  // Records a heartbeat of the controller.
  void Beat(int64_t now_ns);

  // gpusliced (`pid`) controls, or wants to control, the group at `now_ns`.
  void BeatAsDaemon(pid_t pid, int64_t now_ns);
  // True if gpusliced beat within kDaemonStaleNs before `now_ns`.
  bool DaemonClaims(int64_t now_ns) const;
  // Ends `pid`'s claim (a daemon stopping cleanly): members take over at once.
  void EndDaemonClaim(pid_t pid);
  // True if the controller role is held by the daemon that claims the group.
  bool ControllerIsDaemon() const;
  // The pid of the daemon that claims (or last claimed) the group; 0: none.
  int32_t DaemonPid() const;

 private:
  friend class GroupSegment;  // a forked child's handle holds no role (ReopenAfterFork)

  void Took();

  SegmentOs& os_;
  const int& fd_;
  const std::string& path_;
  GroupSegmentLayout& layout_;
  bool held_ = false;  // this handle holds the controller lock
};

}  // namespace gpuslice
