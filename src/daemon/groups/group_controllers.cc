#include "daemon/groups/group_controllers.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "common/log.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon {
namespace {

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

GroupControllers::GroupControllers(Options options, control::DeviceBusySource& busy, WordOf word_of,
                                   Clocks clocks)
    : options_(std::move(options)), busy_(busy), word_of_(std::move(word_of)), clocks_(clocks) {}

void GroupControllers::ApplyLimits(const std::string& name, GroupSegment& segment,
                                   const Word& word) {
  if (!word.limits_of) return;
  for (int d = 0; d < segment.device_count(); ++d) {
    const std::string uuid = segment.DeviceUuid(d);
    const std::optional<DeviceLimit> want = word.limits_of(name, uuid);
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
    segment.control().EndDaemonClaim(options_.self);
    segment.control().ResignController();
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
      g.compute = std::make_unique<control::LaunchCostMeter>(*seg, clocks_.monotonic);
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
  std::optional<Word> word;  // asked for once, when first needed
  auto word_now = [this, &word]() -> const Word& {
    if (!word) word = word_of_ ? word_of_() : Word{};
    return *word;
  };
  for (auto& [name, g] : groups_) {
    g.segment->control().BeatAsDaemon(options_.self, clocks_.monotonic.NowNs());
    const bool was = g.segment->control().is_controller();
    if (g.segment->control().TryBecomeController()) {
      if (!was) {
        GS_LOG(kInfo, "gpusliced", "event=group_controlled group=%s", name.c_str());
        changed = true;
      }
      if (rescanned || !was) ApplyLimits(name, *g.segment, word_now());
      next = std::min(next, g.keeper->Step());
    }
  }
  if (options_.schedule) {
    const int64_t t = clocks_.monotonic.NowNs();
    // Asked for (a pause through the API): now, and the next period from now.
    if (schedule_soon_.exchange(false, std::memory_order_acq_rel) || t >= next_schedule_ns_) {
      Schedule(word_now());
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
                          .controlling = g.segment->control().is_controller(),
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
    if (options_.schedule && g.segment->control().is_controller())
      g.segment->schedule().ClearSchedule();
    g.segment->control().EndDaemonClaim(options_.self);
    g.segment->control().ResignController();
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

std::optional<int32_t> GroupControllers::ShareOf(const std::string& group,
                                                 const std::string& uuid) const {
  MutexLock lock(snapshot_mu_);
  if (auto it = grants_.find(group); it != grants_.end()) {
    for (const DeviceGrant& g : it->second.second) {
      if (g.uuid == uuid) return static_cast<int32_t>(g.used_bp);
    }
  }
  for (const GroupControl& g : snapshot_) {
    if (g.group != group) continue;
    for (const GroupSnapshot::Device& d : g.segment.devices) {
      if (d.uuid == uuid) return d.share_bp;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> GroupControllers::LedgerEvictionsOf(const std::string& group) const {
  MutexLock lock(snapshot_mu_);
  for (const GroupControl& g : snapshot_) {
    if (g.group == group) return g.segment.ledger_evictions;
  }
  return std::nullopt;
}

std::vector<control::UsageMeter::BusyWindow> GroupControllers::BusyWindows(
    const std::string& uuid) {
  if (busy_unavailable_.contains(uuid)) return {};
  auto [seen, fresh] = busy_seen_us_.try_emplace(uuid, 0);
  // The first read asks for the last few seconds only.
  const int64_t real_now = clocks_.realtime.NowNs();
  const uint64_t since =
      fresh ? static_cast<uint64_t>(std::max<int64_t>(0, real_now - 5'000'000'000) / 1000)
            : seen->second;
  StatusOr<std::vector<control::DeviceBusySample>> samples = busy_.BusySince(uuid, since);
  if (!samples.ok()) {
    if (samples.status().code() == StatusCode::kUnimplemented ||
        samples.status().code() == StatusCode::kUnavailable) {
      GS_LOG(kWarn, "gpusliced",
             "event=device_busy_unavailable gpu=%s error=\"%s\" (latency groups are charged by "
             "their own measurements)",
             uuid.c_str(), samples.status().ToString().c_str());
      busy_unavailable_.insert(uuid);
    }
    return {};
  }
  // Each sample closes a window that began where the one before it ended.
  const int64_t offset = real_now - clocks_.monotonic.NowNs();
  std::vector<control::UsageMeter::BusyWindow> out;
  uint64_t previous = fresh ? 0 : seen->second;
  for (const control::DeviceBusySample& b : *samples) {
    if (b.timestamp_us <= previous && previous != 0) continue;
    if (previous != 0) {
      out.push_back({.end_ns = static_cast<int64_t>(b.timestamp_us) * 1000 - offset,
                     .length_ns = static_cast<int64_t>(b.timestamp_us - previous) * 1000,
                     .busy = std::min(b.percent, 100u) / 100.0});
    }
    previous = b.timestamp_us;
  }
  seen->second = std::max(seen->second, previous);
  return out;
}

void GroupControllers::Schedule(const Word& word) {
  using control::ShareScheduler;
  struct Gpu {
    std::vector<ShareScheduler::Input> inputs;
    std::vector<std::pair<Group*, int>> devices;  // parallel to inputs
  };
  std::map<std::string, Gpu> gpus;
  std::map<std::string, std::pair<bool, std::vector<DeviceGrant>>> grants;
  // Unpaused once their grants are written.
  std::vector<std::pair<GroupSegment*, std::string>> resumed;
  for (auto& [name, g] : groups_) {
    GroupSegment& segment = *g.segment;
    if (!segment.control().is_controller()) continue;  // a member still controls it
    bool paused = false;
    std::vector<std::pair<std::string, ShareScheduler::Input>> mine;
    for (int d = 0; d < segment.device_count(); ++d) {
      std::string uuid = segment.DeviceUuid(d);
      const GroupSchedule schedule = word.schedule_of
                                         ? word.schedule_of(name, uuid).value_or(GroupSchedule{})
                                         : GroupSchedule{};
      paused = paused || schedule.paused;
      ShareScheduler::Input in;
      in.group = name;
      in.request_percent = schedule.request_percent;
      const uint32_t segment_limit = segment.ComputeLimit(d);
      in.limit_percent = std::min<uint32_t>(
          schedule.limit_percent, segment_limit >= 1 && segment_limit <= 100 ? segment_limit : 100);
      in.weight = schedule.weight;
      in.latency = schedule.priority == Priority::kLatency;
      const ComputeCounters c = segment.schedule().Counters(d);
      in.counters = {.launches = c.launches,
                     .completed = g.compute->CompletedLaunches(d),
                     .waits = c.waits,
                     .cut_off = c.cut_off,
                     .waiting = c.waiting,
                     .charge_ns = g.compute->GroupCharge(d),
                     .probe_ns = segment.usage().MaxMemberCharge(d),
                     .bound_ns = g.compute->BoundCharge(d),
                     .bound_floor_ns = g.compute->BoundFloor(d)};
      mine.emplace_back(std::move(uuid), std::move(in));
    }
    // Paused is the group's, on every GPU.
    for (int d = 0; d < static_cast<int>(mine.size()); ++d) {
      mine[d].second.paused = paused;
      Gpu& gpu = gpus[mine[d].first];
      gpu.inputs.push_back(std::move(mine[d].second));
      gpu.devices.emplace_back(&g, d);
    }
    // A pause at once (its launches stop before anything else is done); a
    // resume once its grants are written (below): a paused group's segment
    // grant is 0 ("no grant": paced by its limit alone, often none), and a
    // launch that found it unpaused before its grant was written ran unpaced
    // and uncounted, as did every launch after it until the grant came: one
    // filled the driver's queue (1,024 launches, 2 s of 2 ms kernels) that
    // way, which then ran for seconds.
    if (paused && !segment.schedule().Paused()) {
      segment.schedule().SetPaused(true);
      GS_LOG(kInfo, "gpusliced", "event=group_paused group=%s", name.c_str());
    } else if (!paused && segment.schedule().Paused()) {
      resumed.emplace_back(&segment, name);
    }
    grants[name].first = paused;
  }
  for (auto it = schedulers_.begin(); it != schedulers_.end();) {
    it = gpus.contains(it->first) ? std::next(it) : schedulers_.erase(it);
  }
  const int64_t now = clocks_.monotonic.NowNs();
  for (auto& [uuid, gpu] : gpus) {
    auto& scheduler = schedulers_[uuid];
    if (!scheduler) scheduler = std::make_unique<ShareScheduler>(clocks_.monotonic);
    const uint64_t joined = scheduler->takers_joined();
    const std::vector<ShareScheduler::Output> out = scheduler->Tick(gpu.inputs, BusyWindows(uuid));
    if (scheduler->takers_joined() != joined) {
      // A group began taking turns: the holders' measurements since it ran
      // beside them are stretched.
      for (auto [group, d] : gpu.devices) group->compute->ForgetEvidence(d);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      auto [group, d] = gpu.devices[i];
      GroupSegment* segment = group->segment.get();
      const ShareScheduler::Output& o = out[i];
      const ShareScheduler::Counters& c = gpu.inputs[i].counters;
      const uint32_t turn_bp =
          o.turn.period_ns > 0
              ? static_cast<uint32_t>(std::min<int64_t>(o.turn.length_ns, o.turn.period_ns) *
                                      10000 / o.turn.period_ns)
              : 0;
      // What each tick decided and from what (--log-level trace): how the
      // bench's misses are traced (bench/scheduler --trace DIR).
      GS_LOG(
          kTrace, "gpusliced",
          "event=schedule_tick t_ms=%lld gpu=%s group=%s capacity_bp=%u busy_bp=%d "
          "grant_bp=%u turn_bp=%u turn_ms=%.1f+%.1f@%lld queue_ns=%lld used_bp=%u "
          "wants_more=%d launches=%llu completed=%llu waits=%llu cut_off=%llu waiting=%u "
          "charge_ns=%lld latency_charge_ns=%lld paused=%d",
          static_cast<long long>(now / 1'000'000), uuid.c_str(), o.group.c_str(),
          scheduler->capacity_bp(), scheduler->device_busy_bp(), o.grant_bp, turn_bp,
          static_cast<double>(o.turn.begin_ns) / 1e6, static_cast<double>(o.turn.length_ns) / 1e6,
          static_cast<long long>(o.turn.epoch_ns / 1'000'000), static_cast<long long>(o.queue_ns),
          o.used_bp, o.wants_more ? 1 : 0, static_cast<unsigned long long>(c.launches),
          static_cast<unsigned long long>(c.completed), static_cast<unsigned long long>(c.waits),
          static_cast<unsigned long long>(c.cut_off), c.waiting,
          static_cast<long long>(c.charge_ns), static_cast<long long>(o.latency_charge_ns),
          o.paused ? 1 : 0);
      // Below the whole device even when alone, so that its launches stay on
      // the paced path, which counts them (what the scheduler reads).
      const uint32_t grant = std::min(o.grant_bp, kFullGrantBp - 1);
      if (segment->schedule().ComputeGrant(d) != grant)
        segment->schedule().SetComputeGrant(d, grant);
      if (segment->schedule().ComputeBurst(d) != o.burst_ns)
        segment->schedule().SetComputeBurst(d, o.burst_ns);
      if (segment->schedule().QueueBound(d) != o.queue_ns)
        segment->schedule().SetQueueBound(d, o.queue_ns);
      // A new plan takes effect at its epoch (a cycle boundary); the plan
      // in effect now stands until then.
      const auto [current, next] = segment->schedule().Turns(d);
      const TurnPlan& pending = next.epoch_ns != 0 ? next : current;
      const bool same = pending.period_ns == o.turn.period_ns &&
                        pending.begin_ns == o.turn.begin_ns &&
                        pending.length_ns == o.turn.length_ns &&
                        (o.turn.period_ns == 0 || pending.epoch_ns == o.turn.epoch_ns);
      if (!same) {
        const TurnPlan now_plan = segment->schedule().TurnAt(d, now);
        if (o.turn.period_ns == 0 || now_plan.period_ns == 0 || o.turn.epoch_ns <= now) {
          segment->schedule().SetTurns(d, o.turn,
                                       TurnPlan{});  // at once: no turns, or none to wait for
        } else {
          segment->schedule().SetTurns(d, now_plan, o.turn);
        }
      }
      group->compute->SetFallbackCharge(d, o.latency_charge_ns);
      segment->usage().PublishEstimate(
          d,
          ComputeUsage::Estimate{
              .charge_ns = 0, .share_bp = static_cast<int32_t>(o.used_bp), .measured_at_ns = now});
      grants[o.group].second.push_back({.uuid = uuid,
                                        .grant_bp = o.grant_bp,
                                        .burst_ns = o.burst_ns,
                                        .used_bp = o.used_bp,
                                        .wants_more = o.wants_more,
                                        .turn_bp = turn_bp});
    }
  }
  for (auto& [segment, name] : resumed) {
    segment->schedule().SetPaused(false);
    GS_LOG(kInfo, "gpusliced", "event=group_resumed group=%s", name.c_str());
  }
  MutexLock lock(snapshot_mu_);
  grants_ = std::move(grants);
}

}  // namespace gpuslice::daemon
