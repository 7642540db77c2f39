#include "daemon/groups/segment_collector.h"

#include <utility>

#include "shm/group_segment.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon {

SegmentCollector::SegmentCollector(std::string dir, int64_t grace_ns, int64_t period_ns,
                                   const Clock& clock)
    : dir_(std::move(dir)), grace_ns_(grace_ns), period_ns_(period_ns), clock_(clock) {}

SegmentCollector::Sweep SegmentCollector::MaybeSweep() {
  if (swept_ && clock_.NowNs() - last_sweep_ns_ < period_ns_) return {};
  return SweepNow();
}

SegmentCollector::Sweep SegmentCollector::SweepNow() {
  Sweep sweep;
  const int64_t now = clock_.NowNs();
  swept_ = true;
  last_sweep_ns_ = now;
  for (const std::string& dir : GroupSegmentDirs(dir_)) {  // claims' own directories too
    for (const std::string& group : GroupSegment::ListGroups(dir)) {
      auto removed = GroupSegment::RemoveIfAbandoned(dir, group, grace_ns_, now);
      if (!removed.ok()) {
        sweep.errors.push_back(removed.status().message());
      } else if (*removed) {
        sweep.removed.push_back(group);
      }
    }
  }
  return sweep;
}

}  // namespace gpuslice::daemon
