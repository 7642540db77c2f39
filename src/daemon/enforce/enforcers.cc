#include "daemon/enforce/enforcers.h"

#include <set>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

bool UsesGpu(const Tenant& t, const std::string& uuid) {
  return t.devices.empty() ||
         std::find(t.devices.begin(), t.devices.end(), uuid) != t.devices.end();
}

}  // namespace

Enforcers::Enforcers(Options options, GpuBackend& backend, const TenantRegistry& registry,
                     Sources sources, StateStore* store)
    : options_(std::move(options)),
      backend_(backend),
      registry_(registry),
      sources_(std::move(sources)),
      store_(store) {
  if (store_ == nullptr) return;
  auto record = store_->Load(kDriverLimitsRecordName);
  if (!record.ok()) {
    if (record.status().code() != StatusCode::kNotFound) {
      GS_LOG(kWarn, "gpusliced", "event=driver_limits_unreadable error=\"%s\"",
             record.status().message().c_str());
    }
    return;
  }
  for (const auto& e : record->value("limits", nlohmann::json::array())) {
    if (!e.is_object()) continue;
    Held h{.gpu_index = e.value("gpu_index", 0u),
           .cgroup = e.value("cgroup", ""),
           .soft_bytes = e.value("soft_bytes", uint64_t{0}),
           .hard_bytes = e.value("hard_bytes", uint64_t{0})};
    const std::string group = e.value("group", "");
    const std::string uuid = e.value("uuid", "");
    if (group.empty() || uuid.empty() || h.cgroup.empty()) continue;
    held_[{group, uuid}] = std::move(h);
  }
}

void Enforcers::Reconcile() { Reconcile(registry_.TakeView()); }

void Enforcers::Reconcile(const RegistryView& registry) {
  std::lock_guard reconcile_lock(reconcile_mu_);
  if (stopped_ || registry.version < reconciled_version_) return;
  reconciled_version_ = registry.version;
  const std::shared_ptr<const Snapshot> gpus = sources_.gpus ? sources_.gpus() : nullptr;

  std::map<Key, EnforcerChoice> next;
  if (gpus != nullptr) {
    for (const auto& [id, g] : registry.groups) {
      const std::vector<const Tenant*> members = registry.MembersOf(id);
      for (const GpuInfo& gpu : gpus->gpus) {
        if (gpu.uuid.empty()) continue;
        ChoiceInput in;
        in.gpu_index = gpu.index;
        in.features = gpu.features;
        in.cgroup_root = options_.cgroup_root;
        const GpuLimit limit = LimitOn(g.limits, gpu.uuid);
        in.memory_limit_bytes = limit.memory_bytes;
        in.memory_request_bytes = ScheduleEntryOn(g.schedule, gpu.uuid).memory_request_bytes;
        in.compute_limit_percent = limit.compute_percent;
        in.mps_granted = sources_.mps_granted && sources_.mps_granted(g.id, gpu.uuid);
        if (in.mps_granted && sources_.mps_partition_sms) {
          in.mps_partition_sms = sources_.mps_partition_sms(g.id, gpu.uuid);
        }
        if (sources_.mig_profile) in.mig_profile = sources_.mig_profile(g.id, gpu.uuid);
        for (const Tenant* t : members) {
          if (UsesGpu(*t, gpu.uuid)) in.member_cgroups.push_back(t->cgroup);
        }
        next[{g.id, gpu.uuid}] = ChooseEnforcers(in);
      }
    }
  }
  // Two groups on one cgroup of one GPU: the driver cannot tell them apart.
  std::map<std::pair<uint32_t, std::string>, std::vector<Key>> by_cgroup;
  for (const auto& [key, c] : next) {
    if (c.driver_limit)
      by_cgroup[{c.driver_limit->gpu_index, c.driver_limit->cgroup}].push_back(key);
  }
  for (const auto& [where, keys] : by_cgroup) {
    if (keys.size() < 2) continue;
    for (const Key& key : keys) {
      EnforcerChoice& c = next[key];
      c.memory = {Enforcer::kLimiter,
                  "limiter: cgroup " + where.second + " holds members of several groups",
                  "cgroup_shared_by_groups"};
      c.driver_limit.reset();
    }
  }

  uint64_t failures = 0;
  bool changed = false;
  // Rule 2 (and the first half of a moved limit): clear what no choice holds.
  for (auto it = held_.begin(); it != held_.end();) {
    const auto want = next.find(it->first);
    const bool keep = want != next.end() && want->second.driver_limit &&
                      want->second.driver_limit->cgroup == it->second.cgroup &&
                      want->second.driver_limit->gpu_index == it->second.gpu_index;
    if (keep) {
      ++it;
      continue;
    }
    const Status s =
        backend_.SetMemoryLimits(it->second.gpu_index, it->second.cgroup, 0, kNoMemoryLimit);
    // A cgroup removed took its limits with it (NVML reference).
    if (s.ok() || s.code() == StatusCode::kNotFound) {
      GS_LOG(kInfo, "gpusliced", "event=driver_limit_cleared group=%s gpu=%u cgroup=%s",
             it->first.first.c_str(), it->second.gpu_index, it->second.cgroup.c_str());
      it = held_.erase(it);
      changed = true;
    } else {
      ++failures;
      GS_LOG(kWarn, "gpusliced", "event=driver_limit_clear_failed group=%s gpu=%u error=\"%s\"",
             it->first.first.c_str(), it->second.gpu_index, s.message().c_str());
      ++it;
    }
  }
  // Rule 1 and 3.
  for (auto& [key, c] : next) {
    if (!c.driver_limit) continue;
    const auto held = held_.find(key);
    if (held != held_.end() && held->second == *c.driver_limit) continue;
    if (held != held_.end() && (held->second.cgroup != c.driver_limit->cgroup ||
                                held->second.gpu_index != c.driver_limit->gpu_index)) {
      // Rule 6: the old cgroup's limit could not be cleared above.
      GS_LOG(kWarn, "gpusliced",
             "event=driver_limit_move_deferred group=%s gpu=%u from=%s to=%s "
             "reason=old_limit_not_cleared",
             key.first.c_str(), c.driver_limit->gpu_index, held->second.cgroup.c_str(),
             c.driver_limit->cgroup.c_str());
      c.memory = {Enforcer::kLimiter,
                  "limiter: the driver still holds the limit of cgroup " + held->second.cgroup +
                      ", whose clear failed",
                  "old_limit_not_cleared"};
      c.driver_limit.reset();
      continue;
    }
    const DriverMemoryLimit& l = *c.driver_limit;
    const Status s = backend_.SetMemoryLimits(l.gpu_index, l.cgroup, l.soft_bytes, l.hard_bytes);
    if (s.ok()) {
      GS_LOG(kInfo, "gpusliced",
             "event=driver_limit_set group=%s gpu=%u cgroup=%s soft=%llu hard=%llu",
             key.first.c_str(), l.gpu_index, l.cgroup.c_str(),
             static_cast<unsigned long long>(l.soft_bytes),
             static_cast<unsigned long long>(l.hard_bytes));
      held_[key] = l;
      changed = true;
      continue;
    }
    ++failures;
    GS_LOG(kWarn, "gpusliced", "event=driver_limit_failed group=%s gpu=%u cgroup=%s error=\"%s\"",
           key.first.c_str(), l.gpu_index, l.cgroup.c_str(), s.message().c_str());
    c.memory = {Enforcer::kLimiter, "limiter: the driver refused the limit: " + s.message(),
                "driver_refused"};
    c.driver_limit.reset();
  }
  if (changed || save_pending_) Save();
  std::lock_guard lock(mu_);
  choices_ = std::move(next);
  driver_failures_ += failures;
}

Status Enforcers::ClearAll() {
  std::lock_guard reconcile_lock(reconcile_mu_);
  stopped_ = true;
  Status first;
  uint64_t failures = 0;
  const bool had_any = !held_.empty();
  for (auto it = held_.begin(); it != held_.end();) {
    const Status s =
        backend_.SetMemoryLimits(it->second.gpu_index, it->second.cgroup, 0, kNoMemoryLimit);
    if (s.ok() || s.code() == StatusCode::kNotFound) {
      GS_LOG(kInfo, "gpusliced", "event=driver_limit_cleared group=%s gpu=%u cgroup=%s reason=stop",
             it->first.first.c_str(), it->second.gpu_index, it->second.cgroup.c_str());
      it = held_.erase(it);
      continue;
    }
    ++failures;
    GS_LOG(kWarn, "gpusliced", "event=driver_limit_clear_failed group=%s gpu=%u error=\"%s\"",
           it->first.first.c_str(), it->second.gpu_index, s.message().c_str());
    if (first.ok()) first = s;
    ++it;
  }
  if (had_any) Save();
  std::lock_guard lock(mu_);
  choices_.clear();
  driver_failures_ += failures;
  return first;
}

void Enforcers::Save() {
  if (store_ == nullptr) return;
  nlohmann::json limits = nlohmann::json::array();
  for (const auto& [key, h] : held_) {
    limits.push_back({{"group", key.first},
                      {"uuid", key.second},
                      {"gpu_index", h.gpu_index},
                      {"cgroup", h.cgroup},
                      {"soft_bytes", h.soft_bytes},
                      {"hard_bytes", h.hard_bytes}});
  }
  if (Status s = store_->Save(kDriverLimitsRecordName, {{"limits", std::move(limits)}}); !s.ok()) {
    if (!save_pending_) {  // once per run of failures; every Reconcile retries (rule 4)
      GS_LOG(kError, "gpusliced", "event=driver_limits_save_failed error=\"%s\" action=retry",
             s.message().c_str());
    }
    save_pending_ = true;
    std::lock_guard lock(mu_);
    ++save_failures_;
  } else {
    save_pending_ = false;
  }
}

std::optional<EnforcerChoice> Enforcers::ChoiceOf(const std::string& group,
                                                  const std::string& uuid) const {
  std::lock_guard lock(mu_);
  auto it = choices_.find({group, uuid});
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

std::map<Enforcers::Key, EnforcerChoice> Enforcers::Choices() const {
  std::lock_guard lock(mu_);
  return choices_;
}

uint64_t Enforcers::driver_failures() const {
  std::lock_guard lock(mu_);
  return driver_failures_;
}

uint64_t Enforcers::save_failures() const {
  std::lock_guard lock(mu_);
  return save_failures_;
}

std::string Enforcers::FormatMetrics(const std::map<std::string, int>& gpu_index) const {
  std::lock_guard lock(mu_);
  std::string out =
      "# HELP gpuslice_group_enforcer The enforcer of a group's limit on a GPU, per dimension, "
      "and why (1 for the one in use).\n# TYPE gpuslice_group_enforcer gauge\n";
  for (const auto& [key, c] : choices_) {
    auto idx = gpu_index.find(key.second);
    const std::string gpu = idx == gpu_index.end() ? key.second : std::to_string(idx->second);
    for (const auto& [dimension, choice] :
         {std::pair{"memory", &c.memory}, std::pair{"compute", &c.compute}}) {
      out += "gpuslice_group_enforcer{group=\"" + key.first + "\",gpu=\"" + gpu +
             "\",dimension=\"" + dimension + "\",enforcer=\"" +
             std::string(EnforcerName(choice->enforcer)) + "\",reason=\"" + choice->code +
             "\"} 1\n";
    }
  }
  out +=
      "# HELP gpuslice_driver_limit_failures_total Driver memory limits the driver refused to set "
      "or clear.\n# TYPE gpuslice_driver_limit_failures_total counter\n"
      "gpuslice_driver_limit_failures_total " +
      std::to_string(driver_failures_) +
      "\n# HELP gpuslice_driver_limits_save_failures_total Saves of the driver limits record that "
      "failed.\n# TYPE gpuslice_driver_limits_save_failures_total counter\n"
      "gpuslice_driver_limits_save_failures_total " +
      std::to_string(save_failures_) + "\n";
  return out;
}

}  // namespace gpuslice::daemon
