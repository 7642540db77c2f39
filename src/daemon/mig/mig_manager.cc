#include "daemon/mig/mig_manager.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

constexpr const char* kRecord = "mig";
constexpr uint64_t kGiB = 1ull << 30;

std::string GiB(uint64_t bytes) {
  const uint64_t tenths = (bytes * 10 + kGiB / 2) / kGiB;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") +
         " GiB";
}

std::string Describe(const MigRequest& r) {
  std::string out;
  if (r.memory_bytes) out += GiB(*r.memory_bytes);
  if (r.compute_percent)
    out += (out.empty() ? "" : " and ") + std::to_string(*r.compute_percent) + " % of the compute";
  return out.empty() ? "the smallest instance" : out;
}

StatusOr<MigGrant> GrantOf(const json& j) {
  try {
    MigGrant g;
    g.owner = j.at("owner").get<std::string>();
    g.gpu_uuid = j.at("gpu").get<std::string>();
    const std::string state = j.at("state").get<std::string>();
    if (state == "creating") {
      g.state = MigGrant::State::kCreating;
    } else if (state == "held") {
      g.state = MigGrant::State::kHeld;
    } else if (state == "releasing") {
      g.state = MigGrant::State::kReleasing;
    } else {
      return InvalidArgument("unknown state \"" + state + "\"");
    }
    MigInstance& m = g.instance;
    m.profile_id = j.at("profile_id").get<uint32_t>();
    m.profile = j.at("profile").get<std::string>();
    m.placement = {.start = j.at("placement").at("start").get<uint32_t>(),
                   .size = j.at("placement").at("size").get<uint32_t>()};
    m.gpu_instance_id = j.at("gpu_instance_id").get<uint32_t>();
    if (!j.at("compute_instance_id").is_null()) {
      m.compute_instance_id = j.at("compute_instance_id").get<uint32_t>();
    }
    m.uuid = j.at("uuid").get<std::string>();
    m.memory_bytes = j.at("memory_bytes").get<uint64_t>();
    return g;
  } catch (const json::exception& e) {
    return InvalidArgument(e.what());
  }
}

// The instance of `instances` that `g` names: its GPU instance id once
// made, its profile and placement while creating.
const MigInstance* Find(const std::vector<MigInstance>& instances, const MigGrant& g) {
  for (const MigInstance& m : instances) {
    if (g.state == MigGrant::State::kCreating
            ? m.profile_id == g.instance.profile_id && m.placement == g.instance.placement
            : m.gpu_instance_id == g.instance.gpu_instance_id) {
      return &m;
    }
  }
  return nullptr;
}

}  // namespace

nlohmann::json MigGrantJson(const MigGrant& g) {
  using nlohmann::json;
  const MigInstance& m = g.instance;
  return {{"owner", g.owner},
          {"gpu", g.gpu_uuid},
          {"state", MigStateName(g.state)},
          {"profile_id", m.profile_id},
          {"profile", m.profile},
          {"placement", {{"start", m.placement.start}, {"size", m.placement.size}}},
          {"gpu_instance_id", m.gpu_instance_id},
          {"compute_instance_id", m.compute_instance_id ? json(*m.compute_instance_id) : json()},
          {"uuid", m.uuid},
          {"memory_bytes", m.memory_bytes}};
}

std::string_view MigStateName(MigGrant::State state) {
  switch (state) {
    case MigGrant::State::kCreating:
      return "creating";
    case MigGrant::State::kHeld:
      return "held";
    case MigGrant::State::kReleasing:
      return "releasing";
  }
  return "held";
}

std::vector<MigProfile> CoveringProfiles(const std::vector<MigProfile>& profiles,
                                         std::optional<uint64_t> memory_bytes,
                                         std::optional<uint32_t> compute_percent) {
  uint32_t all_slices = 0;
  for (const MigProfile& p : profiles) all_slices = std::max(all_slices, p.slices);
  std::vector<MigProfile> out;
  for (const MigProfile& p : profiles) {
    if (memory_bytes && p.memory_bytes < *memory_bytes) continue;
    if (compute_percent && uint64_t{p.slices} * 100 < uint64_t{*compute_percent} * all_slices) {
      continue;
    }
    out.push_back(p);
  }
  std::ranges::stable_sort(out, [](const MigProfile& a, const MigProfile& b) {
    return std::pair(a.slices, a.memory_bytes) < std::pair(b.slices, b.memory_bytes);
  });
  return out;
}

std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         const std::vector<MigInstance>& existing) {
  std::vector<MigPlacement> out;
  for (const MigPlacement& p : profile.placements) {
    if (std::ranges::none_of(existing,
                             [&p](const MigInstance& m) { return m.placement.Overlaps(p); })) {
      out.push_back(p);
    }
  }
  std::ranges::sort(out, {}, &MigPlacement::start);
  return out;
}

MigManager::MigManager(GpuBackend& backend, StateStore* state) : backend_(backend), state_(state) {
  for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) {
    auto info = backend_.Read(i);
    uuids_.push_back(info.ok() ? info->uuid : "");
  }
}

std::optional<uint32_t> MigManager::IndexOf(const std::string& uuid) const {
  for (uint32_t i = 0; i < uuids_.size(); ++i) {
    if (uuids_[i] == uuid) return i;
  }
  return std::nullopt;
}

Status MigManager::SaveLocked() {
  if (state_ == nullptr) return Status::Ok();
  json all = json::array();
  for (const auto& [owner, g] : grants_) all.push_back(MigGrantJson(g));
  if (Status s = state_->Save(kRecord, json{{"instances", std::move(all)}}); !s.ok()) {
    return Unavailable("cannot save the MIG record: " + s.message());
  }
  return Status::Ok();
}

StatusOr<MigGrant> MigManager::CreateLocked(const std::string& owner, uint32_t index,
                                            const MigProfile& p, MigPlacement at) {
  MigGrant g{.owner = owner,
             .gpu_index = index,
             .gpu_uuid = uuids_[index],
             .instance = {.gpu_instance_id = 0,
                          .compute_instance_id = std::nullopt,
                          .profile_id = p.id,
                          .profile = p.name,
                          .placement = at,
                          .uuid = "",
                          .memory_bytes = p.memory_bytes,
                          .memory_used_bytes = std::nullopt},
             .state = MigGrant::State::kCreating};
  grants_[owner] = g;
  if (Status s = SaveLocked(); !s.ok()) {
    grants_.erase(owner);
    return s;  // nothing made that a restart could not find
  }
  auto made = backend_.CreateMigInstance(index, p.id, at);
  if (!made.ok()) {
    grants_.erase(owner);
    (void)SaveLocked();  // a "creating" entry left by a failed save is resolved at restart
    return Status(made.status().code(),
                  p.name + " at " + std::to_string(at.start) + ": " + made.status().message());
  }
  g.instance = *made;
  g.state = MigGrant::State::kHeld;
  grants_[owner] = g;
  const Status saved = SaveLocked();  // else the restart finds it by its placement
  GS_LOG(kInfo, "gpusliced",
         "event=mig_instance_created owner=%s gpu=%u profile=%s placement=%u+%u gpu_instance=%u "
         "uuid=%s record_error=\"%s\"",
         owner.c_str(), index, p.name.c_str(), at.start, at.size, made->gpu_instance_id,
         made->uuid.c_str(), saved.message().c_str());
  return g;
}

StatusOr<MigGrant> MigManager::AcquireOnLocked(const MigRequest& request, uint32_t index) {
  GS_ASSIGN_OR_RETURN(const std::vector<MigProfile> profiles, backend_.MigProfiles(index));
  GS_ASSIGN_OR_RETURN(const std::vector<MigInstance> existing, backend_.MigInstances(index));
  const std::vector<MigProfile> covering =
      CoveringProfiles(profiles, request.memory_bytes, request.compute_percent);
  if (covering.empty()) return ResourceExhausted("no profile is that large");
  for (const MigProfile& p : covering) {
    for (const MigPlacement& at : FreePlacements(p, existing)) {
      auto made = CreateLocked(request.owner, index, p, at);
      // Taken meanwhile: the next placement; any other error ends this GPU.
      if (made.ok() || made.status().code() != StatusCode::kResourceExhausted) return made;
    }
  }
  return ResourceExhausted("no free placement of " + covering.front().name +
                           " or a larger profile");
}

StatusOr<MigGrant> MigManager::Acquire(const MigRequest& request) {
  MutexLock lock(mu_);
  if (auto held = grants_.find(request.owner); held != grants_.end()) {
    if (held->second.state == MigGrant::State::kHeld) return held->second;
    return FailedPrecondition("the owner's previous MIG instance is still being released");
  }
  std::string reasons;  // per GPU, why it could not hold the request
  bool any_mig = false;
  for (const std::string& uuid : request.gpus) {
    const std::optional<uint32_t> index = IndexOf(uuid);
    if (!index) continue;
    auto made = AcquireOnLocked(request, *index);
    if (made.ok() || made.status().code() == StatusCode::kUnavailable) return made;
    // Not in MIG mode (kFailedPrecondition), or no MIG API (kUnimplemented).
    const StatusCode code = made.status().code();
    any_mig |= code != StatusCode::kFailedPrecondition && code != StatusCode::kUnimplemented;
    reasons += (reasons.empty() ? "GPU " : "; GPU ") + std::to_string(*index) + ": " +
               made.status().message();
  }
  ++refusals_;
  if (!any_mig) {
    return FailedPrecondition("no GPU of the request is in MIG mode" +
                              (reasons.empty() ? std::string() : " (" + reasons + ")"));
  }
  return ResourceExhausted("no MIG instance of " + Describe(request) + " fits: " + reasons);
}

Status MigManager::ReleaseLocked(const std::string& owner) {
  auto it = grants_.find(owner);
  if (it == grants_.end()) return Status::Ok();
  MigGrant& g = it->second;
  Status s = backend_.DestroyMigInstance(g.gpu_index, g.instance.gpu_instance_id);
  GS_LOG(kInfo, "gpusliced",
         "event=mig_instance_destroyed owner=%s gpu=%u gpu_instance=%u error=\"%s\"", owner.c_str(),
         g.gpu_index, g.instance.gpu_instance_id, s.message().c_str());
  if (s.ok() || s.code() == StatusCode::kNotFound) {
    grants_.erase(it);
    s = Status::Ok();
  } else {
    g.state = MigGrant::State::kReleasing;  // retried (rule 4)
  }
  const Status saved = SaveLocked();
  return s.ok() ? saved : s;
}

Status MigManager::Release(const std::string& owner) {
  MutexLock lock(mu_);
  return ReleaseLocked(owner);
}

void MigManager::RetryReleases() {
  MutexLock lock(mu_);
  std::vector<std::string> releasing;
  for (const auto& [owner, g] : grants_) {
    if (g.state == MigGrant::State::kReleasing) releasing.push_back(owner);
  }
  for (const std::string& owner : releasing) (void)ReleaseLocked(owner);
}

void MigManager::Reconcile(const std::function<bool(const std::string& owner)>& wanted) {
  MutexLock lock(mu_);
  if (state_ == nullptr) return;
  auto record = state_->Load(kRecord);
  if (!record.ok()) {
    if (record.status().code() != StatusCode::kNotFound) {
      GS_LOG(kError, "gpusliced", "event=mig_record_unreadable error=\"%s\"",
             record.status().message().c_str());
    }
    return;
  }
  std::map<uint32_t, std::vector<MigInstance>> on_gpu;
  for (const json& j : record->value("instances", json::array())) {
    auto g = GrantOf(j);
    if (!g.ok()) {
      GS_LOG(kError, "gpusliced", "event=mig_record_entry_skipped error=\"%s\"",
             g.status().message().c_str());
      continue;
    }
    const std::optional<uint32_t> index = IndexOf(g->gpu_uuid);
    if (!index) continue;  // the GPU is gone, and its instances with it
    g->gpu_index = *index;
    if (!on_gpu.contains(*index)) {
      auto listed = backend_.MigInstances(*index);
      on_gpu[*index] = listed.ok() ? *listed : std::vector<MigInstance>{};
    }
    const MigInstance* found = Find(on_gpu[*index], *g);
    const char* outcome = "forgotten";  // its instance is gone
    if (found != nullptr) {
      g->instance = *found;
      const bool whole = found->compute_instance_id.has_value();
      if (wanted(g->owner) && whole && g->state != MigGrant::State::kReleasing) {
        g->state = MigGrant::State::kHeld;
        grants_[g->owner] = *g;
        outcome = "adopted";
      } else {
        grants_[g->owner] = *g;
        (void)ReleaseLocked(g->owner);
        outcome = grants_.contains(g->owner) ? "releasing" : "destroyed";
      }
    }
    GS_LOG(kInfo, "gpusliced", "event=mig_reconciled owner=%s gpu=%u profile=%s outcome=%s",
           g->owner.c_str(), *index, g->instance.profile.c_str(), outcome);
  }
  (void)SaveLocked();
}

std::optional<MigGrant> MigManager::Held(const std::string& owner) const {
  MutexLock lock(mu_);
  auto it = grants_.find(owner);
  if (it == grants_.end()) return std::nullopt;
  return it->second;
}

std::vector<MigGrant> MigManager::Grants() const {
  MutexLock lock(mu_);
  std::vector<MigGrant> out;
  for (const auto& [owner, g] : grants_) out.push_back(g);
  return out;
}

StatusOr<std::vector<MigInstanceView>> MigManager::Instances(uint32_t index) const {
  GS_ASSIGN_OR_RETURN(const std::vector<MigInstance> listed, backend_.MigInstances(index));
  const std::vector<MigGrant> grants = Grants();
  std::vector<MigInstanceView> out;
  for (const MigInstance& m : listed) {
    MigInstanceView v{.instance = m, .owner = ""};
    for (const MigGrant& g : grants) {
      if (g.gpu_index == index && g.state != MigGrant::State::kCreating &&
          g.instance.gpu_instance_id == m.gpu_instance_id) {
        v.owner = g.owner;
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

json MigManager::GpuJson(uint32_t index) const {
  auto views = Instances(index);
  if (!views.ok()) {
    if (views.status().code() == StatusCode::kFailedPrecondition) return {{"mode", "disabled"}};
    return {{"mode", "unsupported"}, {"reason", views.status().message()}};
  }
  json instances = json::array();
  for (const MigInstanceView& v : *views) {
    const MigInstance& m = v.instance;
    instances.push_back(
        {{"gpu_instance_id", m.gpu_instance_id},
         {"compute_instance_id", m.compute_instance_id ? json(*m.compute_instance_id) : json()},
         {"profile", m.profile},
         {"placement", {{"start", m.placement.start}, {"size", m.placement.size}}},
         {"uuid", m.uuid},
         {"memory_bytes", m.memory_bytes},
         {"memory_used_bytes", m.memory_used_bytes ? json(*m.memory_used_bytes) : json()},
         {"owner", v.owner.empty() ? json() : json(v.owner)}});
  }
  return {{"mode", "enabled"}, {"instances", std::move(instances)}};
}

std::string MigManager::FormatMetrics() const {
  std::map<std::tuple<std::string, std::string, bool>, int> counts;
  for (uint32_t i = 0; i < uuids_.size(); ++i) {
    auto views = Instances(i);
    if (!views.ok()) continue;
    for (const MigInstanceView& v : *views) {
      ++counts[{uuids_[i], v.instance.profile, !v.owner.empty()}];
    }
  }
  std::string out =
      "# HELP gpuslice_mig_instances MIG GPU instances on each GPU, by profile and whether "
      "gpusliced made them for a group.\n"
      "# TYPE gpuslice_mig_instances gauge\n";
  for (const auto& [key, n] : counts) {
    const auto& [gpu, profile, owned] = key;
    out += "gpuslice_mig_instances{gpu=\"";
    out += gpu;
    out += "\",profile=\"";
    out += profile;
    out += owned ? R"(",owned="true"} )" : R"(",owned="false"} )";
    out += std::to_string(n) + "\n";
  }
  MutexLock lock(mu_);
  out +=
      "# HELP gpuslice_mig_refusals_total MIG requests refused (no GPU in MIG mode, or no free "
      "placement of a covering profile).\n"
      "# TYPE gpuslice_mig_refusals_total counter\n"
      "gpuslice_mig_refusals_total " +
      std::to_string(refusals_) + "\n";
  return out;
}

}  // namespace gpuslice::daemon
