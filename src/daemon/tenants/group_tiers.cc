#include "daemon/tenants/group_tiers.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

// The MPS quantity of a pinned limit: whole MiB, at least one.
std::string MpsBytes(uint64_t bytes) {
  const uint64_t mib = std::max<uint64_t>(bytes / kMiB, 1);
  if (mib % 1024 == 0) return std::to_string(mib / 1024) + "G";
  return std::to_string(mib) + "M";
}

// The group's limits on its MPS GPUs, the tightest of each, and its compute
// request as the share of a static SM partition (rules 1 and 5).
mps::TenantSettings SettingsFor(const Group& group, const std::vector<std::string>& gpus) {
  mps::TenantSettings settings;
  for (const std::string& uuid : gpus) {
    const GpuLimit l = LimitOn(group.limits, uuid);
    if (l.compute_percent) {
      settings.active_thread_percentage =
          std::min(settings.active_thread_percentage.value_or(100), *l.compute_percent);
    }
    if (l.memory_bytes) {
      const uint64_t mib = std::max<uint64_t>(*l.memory_bytes / kMiB, 1) * kMiB;
      settings.pinned_memory_limit = std::min(settings.pinned_memory_limit.value_or(mib), mib);
    }
    // The compute request: a static SM partition where MPS v3 has them.
    if (const auto request = ScheduleEntryOn(group.schedule, uuid).request_percent;
        request && *request > 0) {
      settings.sm_partition_percent =
          std::min(settings.sm_partition_percent.value_or(100), *request);
    }
  }
  return settings;
}

}  // namespace

GroupTiers::GroupTiers(TenantRegistry& registry, mps::MpsManager& mps, EventListener events,
                       MigManager* mig)
    : registry_(registry), mps_(mps), events_(std::move(events)), mig_(mig) {}

GroupTiers::~GroupTiers() { Stop(); }

GroupTiers::GroupTurn::GroupTurn(GroupTiers& tiers, std::string id)
    : tiers_(tiers), id_(std::move(id)) {
  MutexLock lock(tiers_.mu_);
  tiers_.turn_cv_.wait(lock, [this]() REQUIRES(tiers_.mu_) { return !tiers_.busy_.contains(id_); });
  tiers_.busy_.insert(id_);
}

GroupTiers::GroupTurn::~GroupTurn() {
  {
    MutexLock lock(tiers_.mu_);
    tiers_.busy_.erase(id_);
  }
  tiers_.turn_cv_.notify_all();
}

void GroupTiers::Start() {
  MutexLock lock(queue_mu_);
  if (running_) return;
  running_ = true;
  stopping_ = false;
  worker_ = std::thread([this] { Run(); });
}

void GroupTiers::Stop() {
  {
    MutexLock lock(queue_mu_);
    if (!running_) return;
    stopping_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
  MutexLock lock(queue_mu_);
  running_ = false;
}

void GroupTiers::Run() {
  for (;;) {
    std::pair<Job, std::string> job;
    {
      MutexLock lock(queue_mu_);
      queue_cv_.wait(lock, [this]() REQUIRES(queue_mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (job.first == Job::kRelease) {
      ReleaseIfUnused(job.second);
    } else {
      ApplyLimits(job.second);
    }
  }
}

bool GroupTiers::Enqueue(Job job, const std::string& group) {
  MutexLock lock(queue_mu_);
  if (!running_ || stopping_) return false;
  queue_.emplace_back(job, group);
  queue_cv_.notify_one();
  return true;
}

void GroupTiers::TenantLeft(const std::string& group) {
  if (!Enqueue(Job::kRelease, group)) ReleaseIfUnused(group);
}

void GroupTiers::LimitsChanged(const std::string& group) {
  if (!Enqueue(Job::kLimits, group)) ApplyLimits(group);
}

void GroupTiers::ApplyLimits(const std::string& id) {
  GroupTurn turn(*this, id);
  const std::optional<GroupGrant> grant = GroupState(id);
  if (!grant || !grant->held || grant->tier != Tier::kMps) return;
  const std::optional<Group> group = registry_.GroupOf(id);
  if (!group) return;
  const mps::TenantSettings settings = SettingsFor(*group, grant->uuids);
  auto updated = mps_.UpdateSettings(id, settings);
  auto text = [](const auto& v) { return v ? std::to_string(*v) : std::string("-"); };
  GS_LOG(kInfo, "gpusliced",
         "event=tier_limits_applied group=%s active_thread_percentage=%s pinned_memory_limit=%s "
         "sm_partition_percent=%s error=\"%s\"",
         id.c_str(), text(settings.active_thread_percentage).c_str(),
         text(settings.pinned_memory_limit).c_str(), text(settings.sm_partition_percent).c_str(),
         updated.status().message().c_str());
}

std::vector<std::string> GroupTiers::TierConflicts(
    const std::string& group, Tier tier, const std::vector<std::string>& uuids,
    const std::vector<Tenant>& live, const std::map<std::string, GroupGrant>& mps_groups) {
  auto overlaps = [&uuids](const std::vector<std::string>& other) {
    return std::ranges::any_of(other, [&uuids](const std::string& u) {
      return std::ranges::find(uuids, u) != uuids.end();
    });
  };
  std::set<std::string> conflicts;
  if (tier == Tier::kMps) {
    for (const Tenant& t : live) {
      if (t.group != group && t.tier == Tier::kShared && overlaps(t.devices)) {
        conflicts.insert(t.group);
      }
    }
  } else {
    for (const auto& [id, grant] : mps_groups) {
      if (id != group && grant.tier == Tier::kMps && overlaps(grant.uuids)) conflicts.insert(id);
    }
  }
  return {conflicts.begin(), conflicts.end()};
}

Status GroupTiers::CheckPlacement(const std::string& group, Tier tier,
                                  const std::vector<std::string>& uuids) {
  if (tier == Tier::kMig) return Status::Ok();  // an instance of its own meets no one
  const auto conflicts = tier == Tier::kMps
                             ? TierConflicts(group, tier, uuids, registry_.Tenants(), {})
                             : TierConflicts(group, tier, uuids, {}, GroupStates());
  if (conflicts.empty()) return Status::Ok();
  const std::string names = Join(conflicts);
  const std::string tier_name(TierName(tier));
  conflicts_[static_cast<size_t>(tier)].fetch_add(1, std::memory_order_relaxed);
  GS_LOG(kWarn, "gpusliced", "event=tier_conflict group=%s tier=%s conflicting_groups=%s",
         group.c_str(), tier_name.c_str(), names.c_str());
  if (events_) {
    events_("tier_conflict", {{"group", group},
                              {"tier", tier_name},
                              {"gpus", uuids},
                              {"conflicting_groups", conflicts}});
  }
  return FailedPrecondition(
      "a " + tier_name + " tenant of group " + group + " cannot run on these GPUs: groups " +
      names + (tier == Tier::kMps ? " run shared tenants there" : " run an MPS server there") +
      " (MPS makes the GPU EXCLUSIVE_PROCESS)");
}

std::string GroupTiers::FormatMetrics() const {
  std::string out =
      "# HELP gpuslice_tier_conflicts_total Placements refused because shared and MPS tenants "
      "would meet on one GPU, by the tier asked for.\n"
      "# TYPE gpuslice_tier_conflicts_total counter\n";
  for (const Tier tier : {Tier::kShared, Tier::kMps}) {
    out += "gpuslice_tier_conflicts_total{tier=\"" + std::string(TierName(tier)) + "\"} " +
           std::to_string(conflicts_[static_cast<size_t>(tier)].load(std::memory_order_relaxed)) +
           "\n";
  }
  return out;
}

void GroupTiers::ReleaseIfUnused(const std::string& group) {
  GroupTurn turn(*this, group);
  if (registry_.MemberCount(group) > 0) return;
  GroupGrant grant;
  {
    MutexLock lock(mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) return;
    grant = it->second;
    groups_.erase(it);
  }
  if (!grant.held) return;
  const Status s = grant.tier == Tier::kMig && mig_ != nullptr ? mig_->Release(MigOwner(group))
                                                               : mps_.Release(group);
  GS_LOG(kInfo, "gpusliced", "event=tier_released group=%s tier=%s error=\"%s\"", group.c_str(),
         std::string(TierName(grant.tier)).c_str(), s.message().c_str());
}

void GroupTiers::Reconcile() {
  std::map<std::string, Group> groups;
  for (Group& g : registry_.Groups()) groups.emplace(g.id, std::move(g));
  if (mig_ != nullptr) {
    auto group_of = [](const std::string& owner) {
      return owner.starts_with("group/") ? owner.substr(6) : std::string();
    };
    mig_->Reconcile([&](const std::string& owner) {
      auto g = groups.find(group_of(owner));
      return g != groups.end() && g->second.tier == Tier::kMig &&
             registry_.MemberCount(g->first) > 0;
    });
    for (const MigGrant& m : mig_->Grants()) {
      if (m.state != MigGrant::State::kHeld || group_of(m.owner).empty()) continue;
      MutexLock lock(mu_);
      groups_[group_of(m.owner)] = GroupGrant{
          .tier = Tier::kMig, .reason = "", .uuids = {m.gpu_uuid}, .held = true, .mig = m};
    }
  }
  for (const mps::TenantInfo& t : mps_.Tenants()) {
    auto g = groups.find(t.name);
    if (g == groups.end() || g->second.tier != Tier::kMps) continue;  // not a group's
    GroupTurn turn(*this, t.name);
    if (registry_.MemberCount(t.name) == 0) {
      const Status s = mps_.Release(t.name);
      GS_LOG(kInfo, "gpusliced",
             "event=tier_released group=%s reason=no_member_at_restart error=\"%s\"",
             t.name.c_str(), s.message().c_str());
      continue;
    }
    MutexLock lock(mu_);
    groups_[t.name] = GroupGrant{
        .tier = t.tier, .reason = t.reason, .uuids = t.uuids, .held = true, .mig = std::nullopt};
  }
}

std::optional<GroupTiers::GroupGrant> GroupTiers::GroupState(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, GroupTiers::GroupGrant> GroupTiers::GroupStates() const {
  MutexLock lock(mu_);
  return groups_;
}

GroupTiers::Grant GroupTiers::Describe(const Tenant& tenant, const Group& group,
                                       const std::optional<GroupGrant>& grant) {
  Grant out;
  if (group.tier == Tier::kMig) {
    if (!grant || grant->tier != Tier::kMig || !grant->mig) {
      out.reason = "no MIG instance is held for the group";
      out.refusal = FailedPrecondition(out.reason);
      return out;
    }
    if (std::ranges::find(tenant.devices, grant->mig->gpu_uuid) == tenant.devices.end()) {
      out.reason = "group \"" + tenant.group + "\"'s MIG instance is on GPU " +
                   grant->mig->gpu_uuid + ", which the tenant does not use";
      out.refusal = FailedPrecondition(out.reason);
      return out;
    }
    out.tier = Tier::kMig;
    out.mig = grant->mig;
    return out;
  }
  if (group.tier != Tier::kMps) return out;
  if (!grant) {
    out.reason = "no MPS tenant is held for the group";
    return out;
  }
  if (grant->tier != Tier::kMps) {
    out.reason = grant->reason;
    return out;
  }
  for (const std::string& uuid : tenant.devices) {
    if (std::find(grant->uuids.begin(), grant->uuids.end(), uuid) == grant->uuids.end()) {
      out.reason = "GPU " + uuid + " is not among group \"" + tenant.group + "\"'s MPS GPUs (" +
                   Join(grant->uuids) +
                   ", fixed by its first registrant while a member is registered)";
      return out;
    }
  }
  out.tier = Tier::kMps;
  return out;
}

GroupTiers::Grant GroupTiers::Current(const Tenant& tenant) const {
  auto group = registry_.GroupOf(tenant.group);
  if (!group) return Grant{};
  return Describe(tenant, *group, GroupState(tenant.group));
}

GroupTiers::Grant GroupTiers::GrantMig(const Tenant& tenant, const Group& group) {
  GroupTurn turn(*this, tenant.group);
  std::optional<GroupGrant> held = GroupState(tenant.group);
  if (!held) {
    if (mig_ == nullptr) {
      Grant refused;
      refused.reason = "this daemon does not manage MIG";
      refused.refusal = FailedPrecondition(refused.reason);
      return refused;
    }
    // The instance must hold the group's limits wherever it lands.
    MigRequest request{.owner = MigOwner(group.id),
                       .gpus = tenant.devices,
                       .memory_bytes = std::nullopt,
                       .compute_percent = std::nullopt};
    for (const std::string& uuid : tenant.devices) {
      const GpuLimit l = LimitOn(group.limits, uuid);
      if (l.memory_bytes) {
        request.memory_bytes = std::max(request.memory_bytes.value_or(0), *l.memory_bytes);
      }
      if (l.compute_percent) {
        request.compute_percent = std::max(request.compute_percent.value_or(0), *l.compute_percent);
      }
    }
    auto made = mig_->Acquire(request);
    if (!made.ok()) {
      Grant refused;
      refused.reason = "MIG refused the group: " + made.status().message();
      refused.refusal = Status(made.status().code(), refused.reason);
      GS_LOG(kWarn, "gpusliced", "event=tier_refused group=%s pid=%d tier=mig reason=\"%s\"",
             tenant.group.c_str(), tenant.host_pid, refused.reason.c_str());
      return refused;
    }
    MutexLock lock(mu_);
    held = groups_[tenant.group] = GroupGrant{
        .tier = Tier::kMig, .reason = "", .uuids = {made->gpu_uuid}, .held = true, .mig = *made};
  }
  Grant grant = Describe(tenant, group, held);
  if (grant.mig) grant.env["CUDA_VISIBLE_DEVICES"] = grant.mig->instance.uuid;
  return grant;
}

GroupTiers::Grant GroupTiers::GrantFor(const Tenant& tenant) {
  auto group = registry_.GroupOf(tenant.group);
  if (group && group->tier == Tier::kMig) return GrantMig(tenant, *group);
  if (!group || group->tier != Tier::kMps) return Grant{};
  GroupTurn turn(*this, tenant.group);
  std::optional<GroupGrant> held = GroupState(tenant.group);
  const std::vector<std::string>& gpus = held ? held->uuids : tenant.devices;

  const mps::TenantSettings settings = SettingsFor(*group, gpus);

  mps::AcquireResult result;
  std::string refused;  // why the manager refused a group that holds a grant
  if (!held || held->tier == Tier::kMps) {
    auto acquired = mps_.Acquire(
        mps::AcquireRequest{.tenant = tenant.group, .gpus = Join(gpus), .settings = settings});
    if (acquired.ok()) {
      result = std::move(*acquired);
      // The manager's word (it may have fallen back since, had its tenant
      // been released through /v1/mps).
      GroupGrant g{.tier = result.tier,
                   .reason = result.reason,
                   .uuids = {},
                   .held = true,
                   .mig = std::nullopt};
      for (const mps::GpuEnv& e : result.per_gpu) g.uuids.push_back(e.uuid);
      MutexLock lock(mu_);
      held = groups_[tenant.group] = std::move(g);
    } else if (!held) {
      // Refused (another MPS tenant of this name, a bad setting): shared, and
      // nothing of the manager's is ours to release.
      MutexLock lock(mu_);
      held = groups_[tenant.group] =
          GroupGrant{.tier = Tier::kShared,
                     .reason = "MPS refused the group: " + acquired.status().message(),
                     .uuids = {},
                     .held = false,
                     .mig = std::nullopt};
    } else {
      refused = "MPS refused the group: " + acquired.status().message();
    }
  }

  Grant grant = Describe(tenant, *group, held);
  if (grant.tier == Tier::kMps && !refused.empty()) {
    grant = Grant{};
    grant.reason = refused;
  }
  if (grant.tier == Tier::kMps) {
    const std::map<std::string, GpuLimit> limits = registry_.EffectiveLimits(tenant);
    for (const mps::GpuEnv& e : result.per_gpu) {
      if (std::find(tenant.devices.begin(), tenant.devices.end(), e.uuid) == tenant.devices.end()) {
        continue;
      }
      mps::GpuEnv own = e;
      if (auto l = limits.find(e.uuid); l != limits.end()) {
        if (l->second.compute_percent) {
          own.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(*l->second.compute_percent);
        }
        // Each daemon sees one GPU: to its clients it is device 0.
        if (l->second.memory_bytes) {
          own.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + MpsBytes(*l->second.memory_bytes);
        }
      }
      grant.per_gpu.push_back(std::move(own));
    }
    if (!grant.per_gpu.empty()) grant.env = grant.per_gpu.front().env;
  } else {
    GS_LOG(kWarn, "gpusliced", "event=tier_fallback group=%s pid=%d tier=shared reason=\"%s\"",
           tenant.group.c_str(), tenant.host_pid, grant.reason.c_str());
  }
  return grant;
}

}  // namespace gpuslice::daemon
