#include "control/group_keeper.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::control {

GroupKeeper::GroupKeeper(GroupSegment& segment, ComputeControl& compute, const Clock& monotonic)
    : segment_(segment), compute_(compute), clock_(monotonic) {}

int64_t GroupKeeper::Step() {
  const int64_t period_ns = std::chrono::nanoseconds(kPeriod).count();
  const int64_t now = clock_.NowNs();
  if (now >= next_reap_ns_) {
    if (int n = segment_.ReapDead(); n > 0) {
      GS_LOG(kInfo, "control", "group '%s': reclaimed the memory of %d departed member(s)",
             segment_.group().c_str(), n);
    }
    segment_.control().Beat(now);
    next_reap_ns_ = now + period_ns;
  }
  const int64_t tick_ns =
      compute_.Tick() ? std::chrono::nanoseconds(ComputeControl::kPeriod).count() : period_ns;
  return std::max<int64_t>(0, std::min(tick_ns, next_reap_ns_ - clock_.NowNs()));
}

void GroupKeeper::GrantProvisionally(GroupSegment& segment) {
  for (int d = 0; d < segment.device_count(); ++d) {
    if (segment.schedule().ComputeGrant(d) == 0)
      segment.schedule().SetComputeGrant(d, kProvisionalGrantBp);
  }
}

int64_t GroupKeeper::MemberStep() {
  const int64_t period_ns = std::chrono::nanoseconds(kPeriod).count();
  if (segment_.control().DaemonClaims(clock_.NowNs())) {
    if (role_ != Role::kDaemon) {
      GS_LOG(kInfo, "control", "gpusliced controls group '%s'", segment_.group().c_str());
      role_ = Role::kDaemon;
    }
    segment_.control().ResignController();
    return period_ns;
  }
  // A daemon that holds the role but no longer claims the group (hung)
  // does not block it: members step without the role.
  if (segment_.control().TryBecomeController() || segment_.control().ControllerIsDaemon()) {
    if (role_ != Role::kThisProcess) {
      GS_LOG(kInfo, "control", "this process now keeps group '%s'", segment_.group().c_str());
      role_ = Role::kThisProcess;
      // The daemon's scheduler no longer runs: pace by the limits alone, or
      // provisionally while a daemon is expected to adopt the group.
      segment_.schedule().ClearSchedule();
      if (daemon_expected_ && daemon_expected_()) GrantProvisionally(segment_);
    }
    return Step();
  }
  // Another member keeps the group: look again within a period (if it
  // dies, its lock is gone and the next look takes the role).
  role_ = Role::kNone;
  return period_ns;
}

void GroupKeeper::RunForever() {
  for (;;) {
    // Read before deciding, so a limit set meanwhile ends the wait at once.
    const uint32_t seen = segment_.ChangeWord();
    segment_.WaitForChange(seen, MemberStep());
  }
}

}  // namespace gpuslice::control
