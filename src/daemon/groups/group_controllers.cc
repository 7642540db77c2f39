#include "daemon/groups/group_controllers.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

GroupControllers::GroupControllers(Options options, control::UtilizationSource& source,
                                   HostPids host_pids, LimitsOf limits_of, Clocks clocks)
    : options_(std::move(options)),
      source_(source),
      host_pids_(std::move(host_pids)),
      limits_of_(std::move(limits_of)),
      clocks_(clocks) {}

void GroupControllers::ApplyLimits(const std::string& name, GroupSegment& segment) {
  if (!limits_of_) return;
  for (int d = 0; d < segment.device_count(); ++d) {
    const std::string uuid = segment.DeviceUuid(d);
    const std::optional<DeviceLimit> want = limits_of_(name, uuid);
    if (!want) continue;
    const bool memory = want->memory_bytes && segment.MemoryLimit(d) != *want->memory_bytes;
    const bool compute = want->compute_percent && segment.ComputeLimit(d) != *want->compute_percent;
    if (!memory && !compute) continue;
    if (memory) segment.SetMemoryLimit(d, *want->memory_bytes);
    if (compute) segment.SetComputeLimit(d, *want->compute_percent);
    const std::string bytes = memory ? std::to_string(*want->memory_bytes) : "-";
    const std::string percent = compute ? std::to_string(*want->compute_percent) : "-";
    GS_LOG(kInfo, "gpusliced", "event=group_limits_applied group=%s gpu=%s memory=%s compute=%s",
           name.c_str(), uuid.c_str(), bytes.c_str(), percent.c_str());
  }
}

GroupControllers::~GroupControllers() { Stop(); }

std::vector<int32_t> GroupControllers::MembersOf(const std::string& group,
                                                 const GroupSegment& segment) const {
  if (host_pids_) {
    if (std::optional<std::vector<int32_t>> pids = host_pids_(group)) return *pids;
  }
  return segment.MemberPids();
}

void GroupControllers::Rescan() {
  // Release groups nobody is attached to any more (so that they go idle and
  // are collected) and those whose file is gone or was replaced.
  for (auto it = groups_.begin(); it != groups_.end();) {
    GroupSegment& segment = *it->second.segment;
    const char* reason = InodeOf(segment.path()) != it->second.inode ? "segment_gone"
                         : !segment.HasAttachedProcess()             ? "idle"
                                                                     : nullptr;
    if (reason == nullptr) {
      ++it;
      continue;
    }
    GS_LOG(kInfo, "gpusliced", "event=group_released group=%s reason=%s", it->first.c_str(),
           reason);
    segment.EndDaemonClaim(options_.self);
    segment.ResignController();
    it = groups_.erase(it);
  }
  for (const std::string& name : GroupSegment::ListGroups(options_.shm_dir)) {
    if (groups_.contains(name)) continue;
    auto segment = GroupSegment::Open(options_.shm_dir, name, /*create=*/false);
    if (!segment.ok() || !(*segment)->HasAttachedProcess()) continue;  // idle or not a segment
    Group g;
    g.inode = InodeOf((*segment)->path());
    g.segment = std::move(segment).value();
    GroupSegment* seg = g.segment.get();
    g.compute = std::make_unique<control::ComputeController>(
        *seg, source_, [this, name, seg] { return MembersOf(name, *seg); },
        control::ComputeController::Clocks{clocks_.realtime, clocks_.monotonic});
    g.keeper = std::make_unique<control::GroupKeeper>(*seg, *g.compute, clocks_.monotonic);
    GS_LOG(kInfo, "gpusliced", "event=group_adopted group=%s", name.c_str());
    groups_.emplace(name, std::move(g));
  }
}

int64_t GroupControllers::Tick() {
  const int64_t now = clocks_.monotonic.NowNs();
  const bool rescanned = !scanned_ || now - last_scan_ns_ >= options_.rescan_ns;
  if (rescanned) {
    Rescan();
    scanned_ = true;
    last_scan_ns_ = now;
  }
  int64_t next = std::chrono::nanoseconds(control::GroupKeeper::kPeriod).count();
  bool changed = rescanned;
  for (auto& [name, g] : groups_) {
    g.segment->BeatAsDaemon(options_.self, clocks_.monotonic.NowNs());
    const bool was = g.segment->is_controller();
    if (g.segment->TryBecomeController()) {
      if (!was) {
        GS_LOG(kInfo, "gpusliced", "event=group_controlled group=%s", name.c_str());
        changed = true;
      }
      if (rescanned || !was) ApplyLimits(name, *g.segment);
      next = std::min(next, g.keeper->Step());
    }
  }
  if (changed) {
    // Readers get a copy refreshed at rescans (1 s): cheap enough for
    // hundreds of groups, fresh enough for metrics.
    std::vector<GroupControl> snapshot;
    snapshot.reserve(groups_.size());
    for (auto& [name, g] : groups_) {
      snapshot.push_back({name, g.segment->is_controller(), g.segment->Snapshot()});
    }
    std::lock_guard lock(snapshot_mu_);
    snapshot_ = std::move(snapshot);
  }
  return next;
}

void GroupControllers::Stop() {
  for (auto& [name, g] : groups_) {
    g.segment->EndDaemonClaim(options_.self);
    g.segment->ResignController();
  }
  groups_.clear();
  std::lock_guard lock(snapshot_mu_);
  snapshot_.clear();
}

std::vector<GroupControllers::GroupControl> GroupControllers::Snapshot() const {
  std::lock_guard lock(snapshot_mu_);
  return snapshot_;
}

}  // namespace gpuslice::daemon
