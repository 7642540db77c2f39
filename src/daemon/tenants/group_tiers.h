// GroupTiers: a group's isolation tier made real (DESIGN.md sections 4-5;
// docs/api.md "Tenants and groups", docs/mps.md "Tiers").
//
// The registry records the tier a group asks for (`shared`, `mps` or `mig`) and stays
// the one source of truth for it; this class grants it. For an `mps` group it
// holds one MPS tenant per group, named by the group id, through the
// MpsManager (which persists its own tenants):
//  1. The group's first registrant acquires MPS on its devices; the thread
//     percentage comes from the group's compute limit and the pinned memory
//     limit from its memory limit (the tightest over those GPUs; the
//     environment of each GPU then carries the registrant's own effective
//     limit there: its group's, lowered by its own request).
//  2. Later registrants share it. A registrant whose devices are not all among
//     the group's MPS GPUs (an MPS tenant's GPUs are fixed while it is held)
//     gets `shared`, saying why.
//  3. Where MPS cannot run (the manager falls back, or refuses the request)
//     the group gets `shared` with the manager's reason, logged once per
//     registration as event=tier_fallback.
//  4. When the group's last member leaves (exit or unregister) the MPS tenant
//     is released, on a worker thread of this class (an MPS stop may take
//     seconds); a registration racing with it either keeps it or acquires it
//     again, never finds it released under it (the group's turn orders both;
//     other groups never wait for it).
//  5. When the group's limits change (PUT /v1/groups/{id}), the MPS tenant's
//     settings follow (LimitsChanged). Its compute request (the schedule's
//     request_percent) asks for a static SM partition of that share of the
//     GPU, made where the GPU's daemon speaks MPS v3 (docs/mps.md "SM
//     partitions"); a request change follows as a limit change does.
//  6. At start, Reconcile() reads what the manager kept across the restart:
//     grants of mps groups with live members are kept, those of mps groups
//     without one are released. MPS tenants that are no registry group's (made
//     through /v1/mps) are left alone.
//  7. A `mig` group (docs/mig.md) holds one MIG instance, owner "group/<id>",
//     through the MigManager: made for its first registrant on the first of
//     its GPUs in MIG mode with room (covering the group's memory and compute
//     limits), shared by later registrants on that GPU, destroyed when its
//     last member leaves (rule 4's worker), adopted at restart while the group
//     has a member (rule 6). Its members' environment names the instance
//     (CUDA_VISIBLE_DEVICES=MIG-...). There is no fallback: a GPU in MIG mode
//     runs no plain context, so a `mig` group that cannot have an instance
//     refuses the registration (Grant::refusal) with the reason. A limit
//     change takes effect with the next instance (an instance does not resize).
//
// Thread-safe. REQUIRES: the registry and the manager outlive this object;
// Stop() before they go.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/mig/mig_manager.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

// As a RegistryObserver (the daemon adds it): a tenant's exit is TenantLeft,
// a change of a group's limits or schedule (its request: an SM partition)
// LimitsChanged.
class GroupTiers final : public RegistryObserver {
 public:
  // What a tenant runs on.
  struct Grant {
    Tier tier = Tier::kShared;
    std::string reason;  // why `shared` although the group asks for `mps`; empty otherwise
    // The client environment: for `mps`, the first of the tenant's GPUs
    // (CUDA_MPS_PIPE_DIRECTORY, ...); `per_gpu` has one per GPU (an MPS client
    // talks to one daemon: one process per GPU). Empty for `shared`.
    std::map<std::string, std::string> env;
    std::vector<mps::GpuEnv> per_gpu;
    // For a `mig` group that cannot have its instance: why (the registration
    // is refused); OK otherwise.
    Status refusal;
    std::optional<MigGrant> mig;  // the group's instance, for `mig`
  };
  // What a group holds now.
  struct GroupGrant {
    Tier tier = Tier::kShared;
    std::string reason;
    std::vector<std::string> uuids;  // the MPS tenant's GPUs (empty when shared)
    bool held = false;               // an MPS tenant (MIG instance) of this name is ours to release
    std::optional<MigGrant> mig;     // the group's MIG instance (tier kMig)
  };

  // Receives each refused placement (CheckPlacement) as an event
  // `tier_conflict` {group, tier, conflicting_groups}.
  using EventListener = std::function<void(std::string_view type, const nlohmann::json& data)>;

  // `mig`: the node's MIG instances (null: `mig` groups are refused).
  GroupTiers(TenantRegistry& registry, mps::MpsManager& mps, EventListener events = {},
             MigManager* mig = nullptr);
  ~GroupTiers() override;
  GroupTiers(const GroupTiers&) = delete;
  GroupTiers& operator=(const GroupTiers&) = delete;

  // Starts the release worker. Without it, TenantLeft releases at once.
  void Start();
  // Ends the worker after the releases it was given.
  void Stop();

  // For `tenant`, just registered: its group's tier, acquiring MPS for the
  // group when it asks for `mps` and holds none yet. Never fails: a tier that
  // cannot be had is `shared` with the reason.
  Grant GrantFor(const Tenant& tenant);
  // What `tenant` runs on now (no environment, no side effect): for views.
  Grant Current(const Tenant& tenant) const;
  // What group `id` holds; nullopt when it holds no MPS tenant (a `shared`
  // group, or an `mps` one with no member).
  std::optional<GroupGrant> GroupState(const std::string& id) const;
  // GroupState of every group that holds one, by group id.
  std::map<std::string, GroupGrant> GroupStates() const;
  // What a tenant of `group` runs on, given the group's state (`grant`:
  // GroupState). Pure; no environment. For views of many tenants.
  static Grant Describe(const Tenant& tenant, const Group& group,
                        const std::optional<GroupGrant>& grant);

  // The groups whose placement conflicts with group `group` running in `tier`
  // on GPUs `uuids` (docs/mps.md "Tiers"): while MPS runs on a GPU it is in
  // EXCLUSIVE_PROCESS mode, so a `shared` process there cannot create a
  // context. For `tier` kMps: the other groups with a live `shared` tenant
  // (in `live`) on one of `uuids`. For kShared: the other groups in
  // `mps_groups` (GroupStates) holding MPS on one of `uuids`. Sorted, unique;
  // empty when the placement is allowed. Pure; the caller refuses (409) with
  // the groups named (POST /v1/tenants does).
  static std::vector<std::string> TierConflicts(
      const std::string& group, Tier tier, const std::vector<std::string>& uuids,
      const std::vector<Tenant>& live, const std::map<std::string, GroupGrant>& mps_groups);

  // Whether a tenant of `group` may run in `tier` on GPUs `uuids` now (live
  // tenants and held MPS tenants, TierConflicts). A refusal is
  // FAILED_PRECONDITION naming the groups in the way; it is logged, counted
  // (FormatMetrics) and published as an event.
  Status CheckPlacement(const std::string& group, Tier tier, const std::vector<std::string>& uuids);
  // Prometheus text: gpuslice_tier_conflicts_total{tier} (placements refused
  // by CheckPlacement, by the tier asked for).
  std::string FormatMetrics() const;

  // A member of `group` left: releases its MPS tenant if it has no member left.
  void TenantLeft(const std::string& group);
  // Group `group`'s limits changed: the MPS tenant's settings follow them
  // (MpsManager::UpdateSettings: for processes started from now on, and the
  // running servers where the group is alone on a GPU). A limit removed keeps
  // the last setting.
  void LimitsChanged(const std::string& group);
  // Synchronous form of LimitsChanged.
  void ApplyLimits(const std::string& group);
  void OnTenantExited(const TenantExited& event) override { TenantLeft(event.group); }
  void OnLimitsChanged(const GroupLimitsChanged& event) override { LimitsChanged(event.group.id); }
  void OnScheduleChanged(const GroupScheduleChanged& event) override {
    LimitsChanged(event.group.id);
  }
  // Synchronous form of TenantLeft (the worker's step; tests).
  void ReleaseIfUnused(const std::string& group);
  // See rule 6. Call once, after the registry and the manager restored.
  void Reconcile();

 private:
  enum class Job { kRelease, kLimits };
  // False when the worker does not run (the caller does the job itself).
  bool Enqueue(Job job, const std::string& group);
  void Run();
  // GrantFor of a `mig` group (rule 7).
  Grant GrantMig(const Tenant& tenant, const Group& group);
  static std::string MigOwner(const std::string& group) { return "group/" + group; }

  TenantRegistry& registry_;
  mps::MpsManager& mps_;
  EventListener events_;
  MigManager* const mig_;
  std::array<std::atomic<uint64_t>, 3> conflicts_{};  // refusals, by Tier

  // Holds group `id`'s turn for its scope: acquisitions, limit changes and
  // releases of one group are ordered (rule 4); other groups' never wait for
  // it (a hung MPS daemon delays only the groups on its GPU).
  class GroupTurn {
   public:
    GroupTurn(GroupTiers& tiers, std::string id);
    ~GroupTurn();
    GroupTurn(const GroupTurn&) = delete;
    GroupTurn& operator=(const GroupTurn&) = delete;

   private:
    GroupTiers& tiers_;
    std::string id_;
  };

  mutable Mutex mu_;
  std::condition_variable_any turn_cv_;         // a group's turn ended
  std::set<std::string> busy_ GUARDED_BY(mu_);  // groups whose turn is held
  std::map<std::string, GroupGrant> groups_ GUARDED_BY(mu_);

  Mutex queue_mu_;
  std::condition_variable_any queue_cv_;
  std::deque<std::pair<Job, std::string>> queue_ GUARDED_BY(queue_mu_);
  bool running_ GUARDED_BY(queue_mu_) = false;
  bool stopping_ GUARDED_BY(queue_mu_) = false;
  std::thread worker_;
};

}  // namespace gpuslice::daemon
