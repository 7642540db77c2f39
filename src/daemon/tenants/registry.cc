#include "daemon/tenants/registry.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

}  // namespace

namespace {

// True when every part of the schedule `asked` sets is already the group's
// (`schedule`, an unset part counting as its default) on every GPU asked for:
// `devices`, else the node's `gpus`, else (neither known) the entry for all
// GPUs. A registration asking for the schedule in effect is not refused: the
// same process registered by `gpuslice run` and again by its limiter, or a
// second member started the same way, asks for what it has.
bool ScheduleInEffect(const ScheduleSettings& schedule, const ScheduleEntry& asked,
                      const std::vector<std::string>& devices,
                      const std::vector<std::string>& gpus) {
  auto holds = [&](const std::string& uuid) {
    const ScheduleEntry e = ScheduleEntryOn(schedule, uuid);
    return (!asked.request_percent || e.request_percent.value_or(0) == *asked.request_percent) &&
           (!asked.priority || e.priority.value_or(Priority::kBatch) == *asked.priority) &&
           (!asked.weight || e.weight.value_or(1) == *asked.weight) &&
           (!asked.memory_request_bytes ||
            e.memory_request_bytes.value_or(0) == *asked.memory_request_bytes);
  };
  const std::vector<std::string>& on = !devices.empty() ? devices : gpus;
  if (on.empty()) return holds(kAllGpus);
  return std::all_of(on.begin(), on.end(), holds);
}

}  // namespace

TenantRegistry::TenantRegistry(Options options, const Clock& clock, LivenessWatcher& watcher,
                               StateStore* store, EventSink sink)
    : options_(std::move(options)),
      clock_(clock),
      watcher_(watcher),
      store_(store),
      json_(sink ? std::make_unique<RegistryEventJson>(std::move(sink)) : nullptr),
      observers_(std::make_shared<const std::vector<RegistryObserver*>>()) {
  if (json_) AddObserver(json_.get());
}

void TenantRegistry::AddObserver(RegistryObserver* observer) {
  MutexLock lock(observers_mu_);
  auto next = std::make_shared<std::vector<RegistryObserver*>>(*observers_);
  next->push_back(observer);
  observers_ = std::move(next);
}

void TenantRegistry::RemoveObserver(RegistryObserver* observer) {
  MutexLock lock(observers_mu_);
  auto next = std::make_shared<std::vector<RegistryObserver*>>(*observers_);
  std::erase(*next, observer);
  observers_ = std::move(next);
}

template <typename Event>
void TenantRegistry::Notify(void (RegistryObserver::*on)(const Event&), const Event& event) const {
  std::shared_ptr<const std::vector<RegistryObserver*>> observers;
  {
    MutexLock lock(observers_mu_);
    observers = observers_;
  }
  for (RegistryObserver* o : *observers) (o->*on)(event);
}

Status TenantRegistry::Restore() {
  if (store_ == nullptr) return Status::Ok();
  std::vector<Group> groups;
  std::vector<Tenant> saved;
  auto load = [&](const char* record, const char* key, auto parse, auto& out) {
    auto data = store_->Load(record);
    if (!data.ok()) {
      if (data.status().code() != StatusCode::kNotFound) {
        GS_LOG(kError, "gpusliced", "event=state_unreadable record=%s error=\"%s\"", record,
               data.status().message().c_str());
      }
      return;
    }
    auto list = data->find(key);
    if (list == data->end() || !list->is_array()) return;
    for (const json& item : *list) {
      auto v = parse(item);
      if (v.ok()) {
        out.push_back(std::move(*v));
      } else {
        GS_LOG(kWarn, "gpusliced", "event=state_record_skipped record=%s error=\"%s\"", record,
               v.status().message().c_str());
      }
    }
  };
  load("groups", "groups", GroupFromJson, groups);
  load("tenants", "tenants", TenantFromJson, saved);
  std::vector<Tenant> dropped;
  std::vector<std::string> forgotten;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    for (Group& g : groups) groups_[g.id] = std::move(g);
    for (Tenant& t : saved) {
      // Alive and the same process (a reused pid has another start time).
      const bool same = ReadStartTime(options_.proc_root, t.host_pid) == t.start_time &&
                        watcher_.Watch(t.host_pid, t.start_time).ok();
      if (!same) {
        dropped.push_back(std::move(t));
        continue;
      }
      if (!groups_.contains(t.group)) {  // a groups record older than the tenants one
        Group g;
        g.id = t.group;
        g.tier = t.tier;
        g.owner_uid = t.uid;
        g.owner_pod_uid = t.cgroup.pod_uid;
        g.created_at_ns = clock_.NowNs();
        groups_[g.id] = std::move(g);
      }
      GS_LOG(kInfo, "gpusliced", "event=tenant_readopted pid=%d group=%s", t.host_pid,
             t.group.c_str());
      PutTenantLocked(t);
    }
    forgotten = ForgetEmptyMarkedLocked();
    version = ++version_;
    groups_version_ = version_;
  }
  for (const Tenant& t : dropped) {
    GS_LOG(kInfo, "gpusliced", "event=tenant_exited pid=%d group=%s reason=gone_at_restart",
           t.host_pid, t.group.c_str());
    Notify(&RegistryObserver::OnTenantExited,
           TenantExited{
               .host_pid = t.host_pid, .group = t.group, .reason = ExitReason::kGoneAtRestart});
  }
  NotifyForgotten(forgotten, "last_member_gone");
  return Persist(version);
}

Status TenantRegistry::Refuse(const Registration& reg, Status why) {
  {
    MutexLock lock(mu_);
    ++refused_;
  }
  GS_LOG(kInfo, "gpusliced", "event=registration_refused pid=%d uid=%d group=%s reason=\"%s\"",
         reg.pid, reg.uid ? static_cast<int>(*reg.uid) : -1, reg.group.c_str(),
         why.message().c_str());
  Notify(&RegistryObserver::OnRegistrationRefused,
         RegistrationRefused{.pid = reg.pid, .uid = reg.uid, .group = reg.group, .why = why});
  return why;
}

StatusOr<Tenant> TenantRegistry::Register(const Registration& reg, std::string* schedule_refused) {
  if (schedule_refused != nullptr) schedule_refused->clear();
  if (Status s = ValidateGroupId(reg.group); !s.ok()) return Refuse(reg, s);
  if (const uint32_t p = reg.limits.compute_percent.value_or(100); p < 1 || p > 100) {
    return Refuse(reg, InvalidArgument("limits.compute_percent must be 1-100"));
  }
  for (const auto& [gpu, l] : reg.gpu_limits) {
    if (const uint32_t p = l.compute_percent.value_or(100); p < 1 || p > 100) {
      return Refuse(reg, InvalidArgument("limits." + gpu + ".compute_percent must be 1-100"));
    }
  }
  auto identity = IdentifyProcess(options_.proc_root, reg.pid);
  if (!identity.ok()) return Refuse(reg, identity.status());
  Tenant t;
  t.host_pid = reg.pid;
  t.container_pid = identity->container_pid;
  t.start_time = identity->start_time;
  t.uid = reg.uid.value_or(identity->uid);
  t.group = reg.group;
  t.cgroup = identity->cgroup;
  t.hints = ShownHints(*identity, reg.hints);
  t.hint_conflicts = CheckHints(*identity, reg.hints);
  t.devices = reg.devices;
  t.requested = reg.gpu_limits;
  if (reg.limits != GpuLimit{}) t.requested = LowerLimits(t.requested, {{kAllGpus, reg.limits}});
  t.registered_at_ns = clock_.NowNs();

  uint64_t version = 0;
  bool created = false;
  std::optional<Tenant> replaced;
  std::string refused_schedule;    // why reg.schedule was not applied
  std::optional<Group> scheduled;  // the group, when reg.schedule was applied
  const std::vector<std::string> gpus =
      reg.schedule && node_gpus_ ? node_gpus_() : std::vector<std::string>{};
  {
    MutexLock lock(mu_);
    auto g = groups_.find(reg.group);
    if (g != groups_.end()) {
      const Group& group = g->second;
      if (group.owner_uid &&
          (*group.owner_uid != t.uid || group.owner_pod_uid != t.cgroup.pod_uid)) {
        auto who = [](uid_t uid, const std::string& pod) {
          return "uid " + std::to_string(uid) + (pod.empty() ? " (no pod)" : " in pod " + pod);
        };
        lock.Unlock();
        return Refuse(
            reg, PermissionDenied("group \"" + reg.group + "\" belongs to " +
                                  who(*group.owner_uid, group.owner_pod_uid) + "; a process of " +
                                  who(t.uid, t.cgroup.pod_uid) + " may not join it"));
      }
      if (reg.tier && *reg.tier != group.tier) {
        lock.Unlock();
        return Refuse(reg, FailedPrecondition("group \"" + reg.group + "\" is of tier " +
                                              std::string(TierName(group.tier)) + ", not " +
                                              std::string(TierName(*reg.tier))));
      }
    }
    if (auto old = tenants_.find(reg.pid); old != tenants_.end()) {
      if (old->second.start_time == t.start_time && old->second.group != reg.group) {
        lock.Unlock();
        return Refuse(reg, FailedPrecondition("process " + std::to_string(reg.pid) +
                                              " is registered in group \"" + old->second.group +
                                              "\"; DELETE /v1/tenants/" + std::to_string(reg.pid) +
                                              " first"));
      }
      replaced = old->second;
    }
    if (Status s = watcher_.Watch(reg.pid, t.start_time); !s.ok()) {
      lock.Unlock();
      return Refuse(reg, s);
    }
    if (g == groups_.end()) {
      Group group;
      group.id = reg.group;
      group.tier = reg.tier.value_or(Tier::kShared);
      group.created_at_ns = t.registered_at_ns;
      if (reg.schedule) {
        // The first registrant's word on the group's schedule, if admissible.
        Group candidate = group;
        if (reg.devices.empty()) {
          candidate.schedule[kAllGpus] = *reg.schedule;
        } else {
          for (const std::string& uuid : reg.devices) candidate.schedule[uuid] = *reg.schedule;
        }
        Status admit = ValidateScheduleEntry(*reg.schedule, "schedule");
        if (admit.ok()) admit = AdmitLocked(candidate, gpus);
        if (admit.ok()) {
          group = std::move(candidate);
          scheduled = group;
        } else {
          refused_schedule = admit.message();
        }
      }
      g = groups_.emplace(reg.group, std::move(group)).first;
      created = true;
    } else if (reg.schedule &&
               !ScheduleInEffect(g->second.schedule, *reg.schedule, reg.devices, gpus)) {
      refused_schedule = "group \"" + reg.group +
                         "\" exists: only its first registrant sets its schedule (else an admin, "
                         "PUT /v1/groups/" +
                         reg.group + ")";
    }
    bool group_changed = created;
    if (!g->second.owner_uid) {
      g->second.owner_uid = t.uid;
      g->second.owner_pod_uid = t.cgroup.pod_uid;
      group_changed = true;
    }
    t.tier = g->second.tier;
    PutTenantLocked(t);
    version = ++version_;
    if (group_changed) groups_version_ = version_;
  }
  if (Status s = Persist(version); !s.ok()) {
    // Not durable: not promised. Undo what this call added.
    {
      MutexLock lock(mu_);
      auto it = tenants_.find(t.host_pid);
      if (it != tenants_.end() && it->second.registered_at_ns == t.registered_at_ns) {
        if (replaced) {
          PutTenantLocked(*replaced);
        } else {
          EraseTenantLocked(t.host_pid);
          watcher_.Unwatch(t.host_pid);
        }
      }
      if (created && CountMembersLocked(reg.group) == 0) groups_.erase(reg.group);
      groups_version_ = ++version_;
    }
    return Refuse(reg, Unavailable("the registration could not be saved: " + s.message()));
  }
  GS_LOG(kInfo, "gpusliced",
         "event=tenant_registered pid=%d container_pid=%d uid=%u group=%s pod_uid=%s conflicts=%zu",
         t.host_pid, t.container_pid, t.uid, t.group.c_str(), t.cgroup.pod_uid.c_str(),
         t.hint_conflicts.size());
  Notify(&RegistryObserver::OnTenantRegistered, TenantRegistered{.tenant = t});
  if (scheduled) {
    GS_LOG(kInfo, "gpusliced", "event=group_schedule_changed group=%s schedule=%s by=registration",
           reg.group.c_str(), GroupJson(*scheduled)["schedule"].dump().c_str());
    Notify(&RegistryObserver::OnScheduleChanged, GroupScheduleChanged{.group = *scheduled});
  }
  if (!refused_schedule.empty()) {
    GS_LOG(kInfo, "gpusliced", "event=schedule_refused pid=%d group=%s reason=\"%s\"", t.host_pid,
           reg.group.c_str(), refused_schedule.c_str());
  }
  if (schedule_refused != nullptr) *schedule_refused = std::move(refused_schedule);
  return t;
}

Status TenantRegistry::Unregister(pid_t pid) {
  std::optional<Tenant> gone;
  std::vector<std::string> forgotten;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    auto it = tenants_.find(pid);
    if (it == tenants_.end()) return NotFound("no tenant with pid " + std::to_string(pid));
    gone = std::move(it->second);
    EraseTenantLocked(pid);
    watcher_.Unwatch(pid);
    forgotten = ForgetEmptyMarkedLocked();
    version = ++version_;
    if (!forgotten.empty()) groups_version_ = version_;
  }
  Status s = Persist(version);
  Notify(&RegistryObserver::OnTenantExited,
         TenantExited{.host_pid = pid, .group = gone->group, .reason = ExitReason::kUnregistered});
  NotifyForgotten(forgotten, "last_member_gone");
  return s;
}

void TenantRegistry::OnExited(const std::vector<pid_t>& pids) {
  std::vector<Tenant> gone;
  std::vector<std::string> forgotten;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    for (pid_t pid : pids) {
      auto it = tenants_.find(pid);
      if (it == tenants_.end()) continue;
      gone.push_back(std::move(it->second));
      EraseTenantLocked(pid);
    }
    if (gone.empty()) return;
    forgotten = ForgetEmptyMarkedLocked();
    version = ++version_;
    if (!forgotten.empty()) groups_version_ = version_;
  }
  for (const Tenant& t : gone) {
    GS_LOG(kInfo, "gpusliced", "event=tenant_exited pid=%d group=%s", t.host_pid, t.group.c_str());
    Notify(&RegistryObserver::OnTenantExited,
           TenantExited{.host_pid = t.host_pid, .group = t.group, .reason = ExitReason::kExited});
  }
  NotifyForgotten(forgotten, "last_member_gone");
  // A failed save is logged by Persist and retried by RetryCheckpoint.
  (void)Persist(version);
}

std::vector<Tenant> TenantRegistry::Tenants() const {
  MutexLock lock(mu_);
  std::vector<Tenant> out;
  out.reserve(tenants_.size());
  for (const auto& [pid, t] : tenants_) out.push_back(t);
  return out;
}

std::vector<std::pair<Tenant, std::string>> TenantRegistry::TenantsWithJson() const {
  MutexLock lock(mu_);
  std::vector<std::pair<Tenant, std::string>> out;
  out.reserve(tenants_.size());
  for (const auto& [pid, t] : tenants_) out.emplace_back(t, tenant_text_.at(pid));
  return out;
}

std::optional<Tenant> TenantRegistry::TenantOf(pid_t pid) const {
  MutexLock lock(mu_);
  auto it = tenants_.find(pid);
  if (it == tenants_.end()) return std::nullopt;
  return it->second;
}

std::vector<Group> TenantRegistry::Groups() const {
  MutexLock lock(mu_);
  std::vector<Group> out;
  out.reserve(groups_.size());
  for (const auto& [id, g] : groups_) out.push_back(g);
  return out;
}

std::optional<Group> TenantRegistry::GroupOf(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) return std::nullopt;
  return it->second;
}

size_t TenantRegistry::MemberCount(const std::string& group) const {
  MutexLock lock(mu_);
  return CountMembersLocked(group);
}

size_t TenantRegistry::CountMembersLocked(const std::string& group) const {
  size_t n = 0;
  for (const auto& [pid, t] : tenants_) n += t.group == group ? 1 : 0;
  return n;
}

std::map<std::string, GpuLimit> TenantRegistry::EffectiveLimits(const Tenant& tenant) const {
  MutexLock lock(mu_);
  auto group = groups_.find(tenant.group);
  return EffectiveLimitsOf(tenant, group == groups_.end() ? nullptr : &group->second);
}

std::optional<GroupControl> TenantRegistry::ControlOf(const std::string& id) const {
  MutexLock lock(mu_);
  return ControlLocked(id);
}

std::optional<GroupControl> TenantRegistry::ControlLocked(const std::string& id) const {
  auto group = groups_.find(id);
  if (group == groups_.end()) return std::nullopt;
  std::vector<const Tenant*> members;
  for (const auto& [pid, tenant] : tenants_) {
    if (tenant.group == id) members.push_back(&tenant);
  }
  return ControlOfGroup(group->second, members);
}

RegistryView TenantRegistry::TakeView() const {
  MutexLock lock(mu_);
  return RegistryView::Of(version_, tenants_, groups_);
}

StatusOr<Group> TenantRegistry::SetGroup(const std::string& id, const Limits& limits,
                                         std::optional<Tier> tier) {
  return UpdateGroup(id, GroupChange{.limits = limits, .tier = tier, .schedule = std::nullopt});
}

StatusOr<Group> TenantRegistry::UpdateGroup(const std::string& id, const GroupChange& change) {
  GS_RETURN_IF_ERROR(ValidateGroupId(id));
  if (change.limits) {
    for (const auto& [gpu, l] : *change.limits) {
      if (l.compute_percent && (*l.compute_percent < 1 || *l.compute_percent > 100)) {
        return InvalidArgument("limits." + gpu + ".compute_percent must be 1-100");
      }
    }
  }
  if (change.schedule) {
    for (const auto& [gpu, entry] : *change.schedule) {
      GS_RETURN_IF_ERROR(ValidateScheduleEntry(entry, "schedule." + gpu));
    }
  }
  const std::vector<std::string> gpus = node_gpus_ ? node_gpus_() : std::vector<std::string>{};
  Group result;
  bool schedule_changed = false;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    auto it = groups_.find(id);
    Group candidate;
    if (it == groups_.end()) {
      candidate.id = id;
      candidate.created_at_ns = clock_.NowNs();
    } else {
      candidate = it->second;
    }
    if (change.tier && *change.tier != candidate.tier && CountMembersLocked(id) > 0) {
      return FailedPrecondition("group \"" + id + "\" has live members: its tier cannot change");
    }
    if (change.tier) candidate.tier = *change.tier;
    if (change.limits) candidate.limits = *change.limits;
    candidate.forget_when_empty = false;  // someone wants the group again
    if (change.schedule) {
      schedule_changed = candidate.schedule != *change.schedule;
      candidate.schedule = *change.schedule;
    }
    GS_RETURN_IF_ERROR(AdmitLocked(candidate, gpus));
    result = candidate;
    groups_[id] = std::move(candidate);
    version = ++version_;
    groups_version_ = version_;
  }
  GS_RETURN_IF_ERROR(Persist(version));
  if (change.limits || change.tier) {
    GS_LOG(kInfo, "gpusliced", "event=group_limits_changed group=%s limits=%s", id.c_str(),
           GroupJson(result)["limits"].dump().c_str());
    Notify(&RegistryObserver::OnLimitsChanged, GroupLimitsChanged{.group = result});
  }
  if (schedule_changed) {
    GS_LOG(kInfo, "gpusliced", "event=group_schedule_changed group=%s schedule=%s", id.c_str(),
           GroupJson(result)["schedule"].dump().c_str());
    Notify(&RegistryObserver::OnScheduleChanged, GroupScheduleChanged{.group = result});
  }
  return result;
}

StatusOr<Group> TenantRegistry::SetPaused(const std::string& id, bool paused) {
  Group result;
  bool changed = false;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    auto it = groups_.find(id);
    if (it == groups_.end()) return NotFound("no group \"" + id + "\"");
    changed = it->second.paused != paused;
    it->second.paused = paused;
    result = it->second;
    version = ++version_;
    if (changed) groups_version_ = version_;
  }
  GS_RETURN_IF_ERROR(Persist(version));
  if (changed) {
    const char* event = paused ? "group_paused" : "group_resumed";
    GS_LOG(kInfo, "gpusliced", "event=%s group=%s", event, id.c_str());
    Notify(&RegistryObserver::OnPauseChanged, GroupPauseChanged{.group = id, .paused = paused});
  }
  return result;
}

namespace {

// The group's request on `uuid` as set (not capped by its limit).
uint32_t RawRequest(const Group& g, const std::string& uuid) {
  return ScheduleEntryOn(g.schedule, uuid).request_percent.value_or(0);
}

std::string GpuName(const std::string& uuid) {
  return uuid.empty() ? std::string("every GPU") : "GPU " + uuid;
}

}  // namespace

Status TenantRegistry::AdmitLocked(const Group& candidate,
                                   const std::vector<std::string>& gpus) const {
  // The node's GPUs, those the groups name, then "": a GPU no entry names
  // (only "all" entries apply there).
  std::set<std::string> named(gpus.begin(), gpus.end());
  auto names = [&named](const Group& g) {
    for (const auto& [gpu, entry] : g.schedule) {
      if (gpu != kAllGpus) named.insert(gpu);
    }
  };
  names(candidate);
  for (const auto& [gid, g] : groups_) names(g);
  std::vector<std::string> check(named.begin(), named.end());
  check.emplace_back();
  auto old = groups_.find(candidate.id);
  for (const std::string& uuid : check) {
    const uint32_t request = RawRequest(candidate, uuid);
    const uint32_t limit = LimitOn(candidate.limits, uuid).compute_percent.value_or(100);
    if (request > limit) {
      return InvalidArgument("group \"" + candidate.id + "\": its request of " +
                             std::to_string(request) + "% on " + GpuName(uuid) +
                             " is above its compute limit there (" + std::to_string(limit) + "%)");
    }
    const uint32_t before = old == groups_.end() ? 0 : RawRequest(old->second, uuid);
    if (request <= before) continue;  // asks no more there than it had
    uint32_t others = 0;
    for (const auto& [gid, g] : groups_) {
      if (gid != candidate.id) others += RawRequest(g, uuid);
    }
    if (others + request > 100) {
      return ResourceExhausted(
          "requests on " + GpuName(uuid) + " would sum to " + std::to_string(others + request) +
          "% (now " + std::to_string(others + before) + "% requested, " + std::to_string(before) +
          "% of it by group \"" + candidate.id + "\"); at most 100% can be requested: " +
          std::to_string(100 - others) + "% is left for this group");
    }
  }
  return Status::Ok();
}

std::optional<GroupSchedule> TenantRegistry::ScheduleOn(const std::string& id,
                                                        const std::string& uuid) const {
  MutexLock lock(mu_);
  const std::optional<GroupControl> control = ControlLocked(id);
  if (!control) return std::nullopt;
  return EffectiveSchedule(groups_.at(id), *control, uuid);
}

uint32_t TenantRegistry::RequestedOn(const std::string& uuid) const {
  MutexLock lock(mu_);
  uint32_t sum = 0;
  for (const auto& [id, g] : groups_) sum += RawRequest(g, uuid);
  return sum;
}

Status TenantRegistry::ForgetGroup(const std::string& id) {
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    auto it = groups_.find(id);
    if (it == groups_.end()) return NotFound("no group \"" + id + "\"");
    if (const size_t n = CountMembersLocked(id); n > 0) {
      return FailedPrecondition("group \"" + id + "\" has " + std::to_string(n) +
                                " live member(s); it is forgotten once they exit");
    }
    groups_.erase(it);
    version = ++version_;
    groups_version_ = version_;
  }
  GS_RETURN_IF_ERROR(Persist(version));
  Notify(&RegistryObserver::OnGroupForgotten, GroupForgotten{.group = id});
  return Status::Ok();
}

Status TenantRegistry::ForgetWhenEmpty(const std::string& id) {
  std::vector<std::string> forgotten;
  size_t members = 0;
  uint64_t version = 0;
  {
    MutexLock lock(mu_);
    auto it = groups_.find(id);
    if (it == groups_.end() || it->second.forget_when_empty) return Status::Ok();
    members = CountMembersLocked(id);
    if (members == 0) {
      groups_.erase(it);
      forgotten.push_back(id);
    } else {
      it->second.forget_when_empty = true;
    }
    version = ++version_;
    groups_version_ = version_;
  }
  Status s = Persist(version);
  if (members > 0) {
    GS_LOG(kInfo, "gpusliced", "event=group_forget_when_empty group=%s members=%zu", id.c_str(),
           members);
  }
  NotifyForgotten(forgotten, "no_member");
  return s;
}

std::vector<std::string> TenantRegistry::ForgetEmptyMarkedLocked() {
  std::vector<std::string> out;
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.forget_when_empty && CountMembersLocked(it->first) == 0) {
      out.push_back(it->first);
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void TenantRegistry::NotifyForgotten(const std::vector<std::string>& ids,
                                     const char* reason) const {
  for (const std::string& id : ids) {
    GS_LOG(kInfo, "gpusliced", "event=group_forgotten group=%s reason=%s", id.c_str(), reason);
    Notify(&RegistryObserver::OnGroupForgotten, GroupForgotten{.group = id});
  }
}

void TenantRegistry::PutTenantLocked(const Tenant& t) {
  tenants_[t.host_pid] = t;
  tenant_text_[t.host_pid] = TenantJson(t).dump();
}

void TenantRegistry::EraseTenantLocked(pid_t pid) {
  tenants_.erase(pid);
  tenant_text_.erase(pid);
}

uint64_t TenantRegistry::refused_count() const {
  MutexLock lock(mu_);
  return refused_;
}

Status TenantRegistry::RetryCheckpoint() {
  if (store_ == nullptr) return Status::Ok();
  uint64_t version = 0;
  {
    MutexLock state(mu_);
    version = version_;
  }
  {
    MutexLock lock(persist_mu_);
    if (failed_version_ <= saved_version_) return Status::Ok();  // none failed since the last
    failed_version_ = saved_version_;  // let Persist try again rather than repeat the error
  }
  Status s = Persist(version);
  if (s.ok()) GS_LOG(kInfo, "gpusliced", "event=checkpoint_saved_again");
  return s;
}

Status TenantRegistry::Persist(uint64_t version) {
  if (store_ == nullptr) return Status::Ok();
  MutexLock lock(persist_mu_);
  for (;;) {
    if (saved_version_ >= version) return Status::Ok();
    if (failed_version_ >= version) return last_error_;
    if (!saving_) break;
    persisted_.wait(lock);
  }
  saving_ = true;
  lock.Unlock();
  // Only the saver (saving_) touches groups_saved_version_.
  json groups = json::array();
  std::string tenants = "{\"tenants\":[";
  uint64_t snapshot = 0;
  bool save_groups = false;
  {
    MutexLock state(mu_);
    snapshot = version_;
    save_groups = groups_version_ > groups_saved_version_;
    if (save_groups) {
      for (const auto& [id, g] : groups_) groups.push_back(GroupJson(g));
    }
    size_t size = tenants.size() + 2;
    for (const auto& [pid, text] : tenant_text_) size += text.size() + 1;
    tenants.reserve(size);
    for (const auto& [pid, text] : tenant_text_) {
      if (tenants.back() != '[') tenants += ',';
      tenants += text;
    }
    tenants += "]}";
  }
  Status s;
  if (save_groups) s = store_->Save("groups", {{"groups", std::move(groups)}});
  if (s.ok()) s = store_->SaveSerialized("tenants", tenants);
  lock.Lock();
  saving_ = false;
  if (s.ok()) {
    if (save_groups) groups_saved_version_ = snapshot;
    saved_version_ = std::max(saved_version_, snapshot);
  } else {
    // Logged once per run of failures (RetryCheckpoint repeats it every sample).
    if (failed_version_ <= saved_version_) {
      GS_LOG(kError, "gpusliced", "event=checkpoint_failed error=\"%s\"", s.message().c_str());
    }
    failed_version_ = std::max(failed_version_, snapshot);
    last_error_ = s;
  }
  persisted_.notify_all();
  return s;
}

}  // namespace gpuslice::daemon
