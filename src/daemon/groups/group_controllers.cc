#include "daemon/groups/group_controllers.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "common/log.h"
#include "daemon/groups/member_slots.h"
#include "shm/segment_dirs.h"

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
  Adopt(/*all=*/true);
}

bool GroupControllers::Adopt(bool all) {
  if (all) idle_files_.clear();
  bool adopted = false;
  // A claim's own directory first (segment_dirs.h): a file under the same
  // name in the shared directory does not stand in for the claim's segment.
  std::set<std::string> seen;
  for (const std::string& dir : GroupSegmentDirs(options_.shm_dir)) {
    for (const std::string& name : GroupSegment::ListGroups(dir)) {
      if (!seen.insert(name).second) continue;
      if (groups_.contains(name) || (!all && idle_files_.contains(name))) continue;
      auto segment = GroupSegment::Open(dir, name, /*create=*/false);
      if (!segment.ok() || !(*segment)->HasAttachedProcess()) {  // idle or not a segment
        idle_files_.insert(name);
        continue;
      }
      idle_files_.erase(name);
      Group g;
      g.inode = InodeOf((*segment)->path());
      g.segment = std::move(segment).value();
      GroupSegment* seg = g.segment.get();
      g.compute = std::make_unique<control::ComputeController>(
          *seg, source_,
          [this, name, seg] {
            // Each host pid with its slot: members are charged by their own launches.
            return MatchSlots(
                MembersOf(name, *seg),
                options_.proc_root.empty() ? std::vector<SlotOwner>{} : SlotOwners(*seg),
                options_.proc_root);
          },
          control::ComputeController::Clocks{clocks_.realtime, clocks_.monotonic});
      g.keeper = std::make_unique<control::GroupKeeper>(*seg, *g.compute, clocks_.monotonic);
      GS_LOG(kInfo, "gpusliced", "event=group_adopted group=%s", name.c_str());
      groups_.emplace(name, std::move(g));
      adopted = true;
    }
  }
  return adopted;
}

int64_t GroupControllers::Tick() {
  const int64_t now = clocks_.monotonic.NowNs();
  const bool rescanned = !scanned_ || now - last_scan_ns_ >= options_.rescan_ns;
  bool adopted = false;
  if (rescanned) {
    Rescan();
    scanned_ = true;
    last_scan_ns_ = now;
    last_adopt_ns_ = now;
  } else if (now - last_adopt_ns_ >= options_.adopt_ns) {
    adopted = Adopt(/*all=*/false);
    last_adopt_ns_ = now;
  }
  int64_t next = std::chrono::nanoseconds(control::GroupKeeper::kPeriod).count();
  next = std::min(next, std::max<int64_t>(0, last_adopt_ns_ + options_.adopt_ns - now));
  bool changed = rescanned || adopted;
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
  if (schedule_of_) {
    const int64_t t = clocks_.monotonic.NowNs();
    // Asked for (a pause through the API): now, and the next period from now.
    if (schedule_soon_.exchange(false, std::memory_order_acq_rel) || t >= next_schedule_ns_) {
      Schedule();
      next_schedule_ns_ = t + std::chrono::nanoseconds(control::ShareScheduler::kPeriod).count();
    }
    next = std::min(next, std::max<int64_t>(0, next_schedule_ns_ - t));
  }
  if (changed) {
    // Readers get a copy refreshed at rescans (1 s): cheap enough for
    // hundreds of groups, fresh enough for metrics.
    std::vector<GroupControl> snapshot;
    snapshot.reserve(groups_.size());
    for (auto& [name, g] : groups_) {
      snapshot.push_back({.group = name,
                          .controlling = g.segment->is_controller(),
                          .segment = g.segment->Snapshot(),
                          .paused = false,
                          .grants = {}});
    }
    MutexLock lock(snapshot_mu_);
    snapshot_ = std::move(snapshot);
  }
  return next;
}

void GroupControllers::Stop() {
  for (auto& [name, g] : groups_) {
    // Members pace by their limits alone again (the paused flag stays: the
    // registry's checkpoint re-applies it when a daemon comes back).
    if (schedule_of_ && g.segment->is_controller()) g.segment->ClearSchedule();
    g.segment->EndDaemonClaim(options_.self);
    g.segment->ResignController();
  }
  groups_.clear();
  MutexLock lock(snapshot_mu_);
  snapshot_.clear();
}

std::vector<GroupControllers::GroupControl> GroupControllers::Snapshot() const {
  MutexLock lock(snapshot_mu_);
  std::vector<GroupControl> out = snapshot_;
  for (GroupControl& g : out) {
    auto it = grants_.find(g.group);
    if (it == grants_.end()) continue;
    g.paused = it->second.first;
    g.grants = it->second.second;
    // The segment's part is as of the last rescan; its grants are newer here.
    for (GroupSnapshot::Device& d : g.segment.devices) {
      for (const DeviceGrant& grant : g.grants) {
        if (grant.uuid == d.uuid) d.grant_bp = std::min(grant.grant_bp, kFullGrantBp - 1);
      }
    }
  }
  return out;
}

std::optional<uint32_t> GroupControllers::GrantOf(const std::string& group,
                                                  const std::string& uuid) const {
  MutexLock lock(snapshot_mu_);
  auto it = grants_.find(group);
  if (it == grants_.end()) return std::nullopt;
  for (const DeviceGrant& g : it->second.second) {
    if (g.uuid == uuid) return g.grant_bp;
  }
  return std::nullopt;
}

void GroupControllers::Schedule() {
  using control::ShareScheduler;
  struct Gpu {
    std::vector<ShareScheduler::Input> inputs;
    std::vector<std::pair<GroupSegment*, int>> devices;  // parallel to inputs
  };
  std::map<std::string, Gpu> gpus;
  std::map<std::string, std::pair<bool, std::vector<DeviceGrant>>> grants;
  // Unpaused once their grants are written.
  std::vector<std::pair<GroupSegment*, std::string>> resumed;
  for (auto& [name, g] : groups_) {
    GroupSegment& segment = *g.segment;
    if (!segment.is_controller()) continue;  // a member still controls it
    bool paused = false;
    // Whether its processes get a CPU when they want one: a group that
    // cannot launch for want of CPU is no evidence of the device's capacity.
    const int32_t cpu_wait_bp =
        options_.proc_root.empty()
            ? -1
            : cpu_wait_.Sample(name, MembersOf(name, segment), clocks_.monotonic.NowNs());
    std::vector<std::pair<std::string, ShareScheduler::Input>> mine;
    for (int d = 0; d < segment.device_count(); ++d) {
      std::string uuid = segment.DeviceUuid(d);
      const GroupSchedule schedule = schedule_of_(name, uuid).value_or(GroupSchedule{});
      paused = paused || schedule.paused;
      ShareScheduler::Input in;
      in.group = name;
      in.request_percent = schedule.request_percent;
      const uint32_t segment_limit = segment.ComputeLimit(d);
      in.limit_percent = std::min<uint32_t>(
          schedule.limit_percent, segment_limit >= 1 && segment_limit <= 100 ? segment_limit : 100);
      in.weight = schedule.weight;
      in.latency = schedule.priority == Priority::kLatency;
      const GroupSegment::ComputeCounters c = segment.Counters(d);
      in.counters = {.launches = c.launches,
                     .waits = c.waits,
                     .wait_ns = c.wait_ns,
                     .charge_ns = static_cast<uint64_t>(std::max<int64_t>(0, c.charge_ns)),
                     .share_bp = c.share_bp,
                     .cpu_wait_bp = cpu_wait_bp,
                     .waiting = c.waiting,
                     .next_free_ns = c.next_free_ns,
                     .share_coarse = c.share_windowed};
      mine.emplace_back(std::move(uuid), std::move(in));
    }
    // Paused is the group's, on every GPU.
    for (int d = 0; d < static_cast<int>(mine.size()); ++d) {
      mine[d].second.paused = paused;
      Gpu& gpu = gpus[mine[d].first];
      gpu.inputs.push_back(std::move(mine[d].second));
      gpu.devices.emplace_back(&segment, d);
    }
    // A pause at once (its launches stop before anything else is done); a
    // resume once its grants are written (below): a paused group's segment
    // grant is 0 ("no grant": paced by its limit alone, often none), and a
    // launch that found it unpaused before its grant was written ran unpaced
    // and uncounted, as did every launch after it until the grant came: one
    // filled the driver's queue (1,024 launches, 2 s of 2 ms kernels) that
    // way, which then ran for seconds.
    if (paused && !segment.Paused()) {
      segment.SetPaused(true);
      GS_LOG(kInfo, "gpusliced", "event=group_paused group=%s", name.c_str());
    } else if (!paused && segment.Paused()) {
      resumed.emplace_back(&segment, name);
    }
    grants[name].first = paused;
  }
  std::vector<std::string> live;
  live.reserve(groups_.size());
  for (const auto& [name, g] : groups_) live.push_back(name);
  cpu_wait_.Retain(live);
  for (auto it = schedulers_.begin(); it != schedulers_.end();) {
    it = gpus.contains(it->first) ? std::next(it) : schedulers_.erase(it);
  }
  for (auto& [uuid, gpu] : gpus) {
    auto& scheduler = schedulers_[uuid];
    if (!scheduler) scheduler = std::make_unique<ShareScheduler>(clocks_.monotonic);
    const std::vector<ShareScheduler::Output> out = scheduler->Tick(gpu.inputs);
    for (size_t i = 0; i < out.size(); ++i) {
      auto [segment, d] = gpu.devices[i];
      // What each tick decided and from what (--log-level trace): how the
      // bench's misses are traced (bench/scheduler --trace DIR).
      GS_LOG(
          kTrace, "gpusliced",
          "event=schedule_tick t_ms=%lld gpu=%s group=%s capacity_bp=%u grant_bp=%u burst_ns=%lld "
          "hold=%d used_bp=%u wants_more=%d launches=%llu waits=%llu waiting=%u "
          "charge_ns=%llu share_bp=%d cpu_wait_bp=%d coarse=%d paused=%d",
          static_cast<long long>(clocks_.monotonic.NowNs() / 1'000'000), uuid.c_str(),
          out[i].group.c_str(), scheduler->capacity_bp(), out[i].grant_bp,
          static_cast<long long>(out[i].burst_ns), out[i].hold_until_ns != 0 ? 1 : 0,
          out[i].used_bp, out[i].wants_more ? 1 : 0,
          static_cast<unsigned long long>(gpu.inputs[i].counters.launches),
          static_cast<unsigned long long>(gpu.inputs[i].counters.waits),
          gpu.inputs[i].counters.waiting,
          static_cast<unsigned long long>(gpu.inputs[i].counters.charge_ns),
          gpu.inputs[i].counters.share_bp, gpu.inputs[i].counters.cpu_wait_bp,
          gpu.inputs[i].counters.share_coarse ? 1 : 0, out[i].paused ? 1 : 0);
      // Below the whole device even when alone, so that its launches stay on
      // the paced path, which counts them (what the scheduler reads).
      const uint32_t grant = std::min(out[i].grant_bp, kFullGrantBp - 1);
      if (segment->ComputeGrant(d) != grant) segment->SetComputeGrant(d, grant);
      if (segment->ComputeBurst(d) != out[i].burst_ns) segment->SetComputeBurst(d, out[i].burst_ns);
      if (segment->ComputeHold(d) != out[i].hold_until_ns) {
        segment->SetComputeHold(d, out[i].hold_until_ns);
      }
      grants[out[i].group].second.push_back({.uuid = uuid,
                                             .grant_bp = out[i].grant_bp,
                                             .burst_ns = out[i].burst_ns,
                                             .used_bp = out[i].used_bp,
                                             .wants_more = out[i].wants_more});
    }
  }
  for (auto& [segment, name] : resumed) {
    segment->SetPaused(false);
    GS_LOG(kInfo, "gpusliced", "event=group_resumed group=%s", name.c_str());
  }
  MutexLock lock(snapshot_mu_);
  grants_ = std::move(grants);
}

}  // namespace gpuslice::daemon
