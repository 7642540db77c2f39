#include "daemon/kubelet/allocation_store.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "limiter/core/limit_config.h"

namespace gpuslice::daemon::kubelet {

using nlohmann::json;

json AllocationJson(const Allocation& a) {
  json devices = json::array();
  for (const DeviceShare& d : a.devices) {
    json j{{"uuid", d.uuid}, {"pool", d.pool}, {"device", d.device}, {"request", d.request}};
    if (d.memory_bytes) j["memory_bytes"] = *d.memory_bytes;
    if (d.cores_percent) j["cores_percent"] = *d.cores_percent;
    devices.push_back(std::move(j));
  }
  return json{{"claim_uid", a.claim_uid}, {"namespace", a.claim_namespace},
              {"name", a.claim_name},     {"pod_uids", a.pod_uids},
              {"devices", devices},       {"source", a.source},
              {"tier", TierName(a.tier)}};
}

StatusOr<Allocation> AllocationFromJson(const json& j) {
  try {
    Allocation a;
    a.claim_uid = j.at("claim_uid").get<std::string>();
    a.claim_namespace = j.value("namespace", "");
    a.claim_name = j.value("name", "");
    a.pod_uids = j.value("pod_uids", std::vector<std::string>{});
    a.source = j.value("source", "");
    GS_ASSIGN_OR_RETURN(a.tier, ParseTier(j.value("tier", "shared")));
    for (const json& d : j.at("devices")) {
      DeviceShare s;
      s.uuid = d.at("uuid").get<std::string>();
      s.pool = d.value("pool", "");
      s.device = d.value("device", "");
      s.request = d.value("request", "");
      if (d.contains("memory_bytes")) s.memory_bytes = d["memory_bytes"].get<uint64_t>();
      if (d.contains("cores_percent")) s.cores_percent = d["cores_percent"].get<uint32_t>();
      a.devices.push_back(std::move(s));
    }
    return a;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("allocation record: ") + e.what());
  }
}

Limits LimitsOf(const Allocation& a) {
  Limits limits;
  for (const DeviceShare& d : a.devices) {
    GpuLimit& l = limits[d.uuid];
    if (d.memory_bytes) l.memory_bytes = l.memory_bytes.value_or(0) + *d.memory_bytes;
    if (d.cores_percent) {
      l.compute_percent = std::min<uint32_t>(100, l.compute_percent.value_or(0) + *d.cores_percent);
    }
  }
  return limits;
}

Status RegistryLimitSink::SetLimits(const std::string& group, const Limits& limits) {
  TenantRegistry::GroupChange change;
  change.limits = limits;
  auto updated = registry_.UpdateGroup(group, change);
  return updated.ok() ? Status::Ok() : updated.status();
}

Status RegistryLimitSink::SetSettings(const std::string& group,
                                      const TenantRegistry::GroupChange& change) {
  auto updated = registry_.UpdateGroup(group, change);
  return updated.ok() ? Status::Ok() : updated.status();
}

Status RegistryLimitSink::ClearLimits(const std::string& group) {
  const auto g = registry_.GroupOf(group);
  if (!g) return Status::Ok();
  TenantRegistry::GroupChange change;
  change.limits = Limits{};
  if (!g->schedule.empty()) change.schedule = ScheduleSettings{};
  if (auto updated = registry_.UpdateGroup(group, change); !updated.ok()) return updated.status();
  // Members the liveness watcher has not yet seen exit (it looks every
  // second): the group goes with the last of them.
  return registry_.ForgetWhenEmpty(group);
}

namespace {

Status Validate(const Allocation& a) {
  if (!limiter::ValidGroupId(a.claim_uid)) {
    return InvalidArgument("claim uid \"" + a.claim_uid +
                           "\" is not a valid group id (1-100 of A-Z a-z 0-9 . _ -)");
  }
  if (a.devices.empty()) return InvalidArgument("claim " + a.claim_uid + " names no device");
  for (const DeviceShare& d : a.devices) {
    if (d.uuid.empty()) return InvalidArgument("claim " + a.claim_uid + ": a device has no GPU");
    if (d.cores_percent && (*d.cores_percent == 0 || *d.cores_percent > 100)) {
      return InvalidArgument("claim " + a.claim_uid + ": cores " +
                             std::to_string(*d.cores_percent) + " is not in 1..100");
    }
    if (d.memory_bytes && *d.memory_bytes == 0) {
      return InvalidArgument("claim " + a.claim_uid + ": memory 0 bytes");
    }
  }
  return Status::Ok();
}

void AddPods(std::vector<std::string>& into, const std::vector<std::string>& pods) {
  for (const std::string& p : pods) {
    if (!p.empty()) into.push_back(p);
  }
  std::sort(into.begin(), into.end());
  into.erase(std::unique(into.begin(), into.end()), into.end());
}

}  // namespace

Status AllocationStore::SaveLocked() {
  if (store_ == nullptr) return Status::Ok();
  json list = json::array();
  for (const auto& [uid, a] : allocations_) list.push_back(AllocationJson(a));
  Status s = store_->Save(record_, json{{"allocations", list}});
  if (s.ok() && !unsaved_removals_.empty()) {
    GS_LOG(kInfo, "kubelet", "event=allocation_removals_saved record=%s count=%zu", record_.c_str(),
           unsaved_removals_.size());
    unsaved_removals_.clear();
  }
  return s;
}

Status AllocationStore::RetryCheckpoint() {
  if (store_ == nullptr) return Status::Ok();
  MutexLock lock(mu_);
  if (!store_->Stale(record_)) return Status::Ok();
  return SaveLocked();
}

Status AllocationStore::SetGroup(const Allocation& a) {
  if (a.tier != Tier::kMps) return sink_.SetLimits(a.claim_uid, LimitsOf(a));
  TenantRegistry::GroupChange change;
  change.limits = LimitsOf(a);
  change.tier = Tier::kMps;
  return sink_.SetSettings(a.claim_uid, change);
}

Status AllocationStore::Restore() {
  if (store_ == nullptr) return Status::Ok();
  auto record = store_->Load(record_);
  if (!record.ok()) {
    return record.status().code() == StatusCode::kNotFound ? Status::Ok() : record.status();
  }
  MutexLock lock(mu_);
  allocations_.clear();
  Status first_error;
  for (const json& j : record->value("allocations", json::array())) {
    auto a = AllocationFromJson(j);
    if (!a.ok()) {
      if (first_error.ok()) first_error = a.status();
      continue;
    }
    // The registry may have lost the group (its own record set aside): the
    // allocation is the truth, its limits are set again.
    if (Status s = SetGroup(*a); !s.ok()) {
      GS_LOG(kError, "kubelet", "event=allocation_restore_failed claim=%s error=\"%s\"",
             a->claim_uid.c_str(), s.message().c_str());
      if (first_error.ok()) first_error = s;
    }
    allocations_[a->claim_uid] = std::move(*a);
  }
  GS_LOG(kInfo, "kubelet", "event=allocations_restored count=%zu", allocations_.size());
  return first_error;
}

StatusOr<Allocation> AllocationStore::Prepare(const Allocation& a) {
  GS_RETURN_IF_ERROR(Validate(a));
  MutexLock lock(mu_);
  auto it = allocations_.find(a.claim_uid);
  if (it != allocations_.end()) {
    if (it->second.devices != a.devices) {
      return FailedPrecondition("claim " + a.claim_uid +
                                " is already prepared with other devices; unprepare it first");
    }
    const Allocation before = it->second;
    AddPods(it->second.pod_uids, a.pod_uids);
    if (it->second == before) return before;
    if (Status s = SaveLocked(); !s.ok()) {
      it->second = before;
      return s;
    }
    return it->second;
  }
  Allocation recorded = a;
  recorded.pod_uids.clear();
  AddPods(recorded.pod_uids, a.pod_uids);
  GS_RETURN_IF_ERROR(SetGroup(recorded));
  allocations_[recorded.claim_uid] = recorded;
  if (Status s = SaveLocked(); !s.ok()) {
    allocations_.erase(recorded.claim_uid);
    if (Status c = sink_.ClearLimits(recorded.claim_uid); !c.ok()) {
      GS_LOG(kError, "kubelet", "event=allocation_rollback_failed claim=%s error=\"%s\"",
             recorded.claim_uid.c_str(), c.message().c_str());
    }
    return s;
  }
  GS_LOG(kInfo, "kubelet", "event=allocation_prepared claim=%s source=%s devices=%zu",
         recorded.claim_uid.c_str(), recorded.source.c_str(), recorded.devices.size());
  return recorded;
}

Status AllocationStore::Unprepare(const std::string& claim_uid) {
  MutexLock lock(mu_);
  auto it = allocations_.find(claim_uid);
  if (it == allocations_.end()) {
    // The kubelet's retry of a removal not saved yet: save it now.
    if (unsaved_removals_.contains(claim_uid)) return SaveLocked();
    return Status::Ok();
  }
  // Limits first: a crash after this leaves the record, whose Restore sets
  // the limits again until the kubelet's retry removes it.
  GS_RETURN_IF_ERROR(sink_.ClearLimits(claim_uid));
  allocations_.erase(it);
  if (Status s = SaveLocked(); !s.ok()) {
    // No pod uses the claim: the removal stands, the record is saved later.
    unsaved_removals_.insert(claim_uid);
    GS_LOG(kWarn, "kubelet", "event=allocation_removal_unsaved claim=%s error=\"%s\"",
           claim_uid.c_str(), s.message().c_str());
    return Unavailable("allocation " + claim_uid +
                       " removed, but the record could not be saved (saved again at every "
                       "sample and by a retry): " +
                       s.message());
  }
  GS_LOG(kInfo, "kubelet", "event=allocation_unprepared claim=%s", claim_uid.c_str());
  return Status::Ok();
}

StatusOr<bool> AllocationStore::Release(const std::string& claim_uid, const std::string& pod_uid) {
  {
    MutexLock lock(mu_);
    auto it = allocations_.find(claim_uid);
    if (it == allocations_.end()) return true;
    std::vector<std::string>& pods = it->second.pod_uids;
    if (pods.size() > 1 || (pods.size() == 1 && pods[0] != pod_uid)) {
      const Allocation before = it->second;
      std::erase(pods, pod_uid);
      if (it->second == before) return false;
      if (Status s = SaveLocked(); !s.ok()) {
        it->second = before;
        return s;
      }
      return false;
    }
  }
  GS_RETURN_IF_ERROR(Unprepare(claim_uid));
  return true;
}

Status AllocationStore::SetOwner(const std::string& claim_uid, const std::string& owner_namespace,
                                 const std::string& owner_name) {
  MutexLock lock(mu_);
  auto it = allocations_.find(claim_uid);
  if (it == allocations_.end()) return NotFound("no allocation " + claim_uid);
  if (it->second.claim_namespace == owner_namespace && it->second.claim_name == owner_name) {
    return Status::Ok();
  }
  const Allocation before = it->second;
  it->second.claim_namespace = owner_namespace;
  it->second.claim_name = owner_name;
  if (Status s = SaveLocked(); !s.ok()) {
    it->second = before;
    return s;
  }
  return Status::Ok();
}

bool AllocationStore::IfUnrecorded(const std::string& claim_uid, const std::function<void()>& fn) {
  MutexLock lock(mu_);
  if (allocations_.contains(claim_uid)) return false;
  fn();
  return true;
}

std::optional<Allocation> AllocationStore::Get(const std::string& claim_uid) const {
  MutexLock lock(mu_);
  auto it = allocations_.find(claim_uid);
  if (it == allocations_.end()) return std::nullopt;
  return it->second;
}

std::vector<Allocation> AllocationStore::All() const {
  MutexLock lock(mu_);
  std::vector<Allocation> out;
  for (const auto& [uid, a] : allocations_) out.push_back(a);
  return out;
}

}  // namespace gpuslice::daemon::kubelet
