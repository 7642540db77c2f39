// Enforcers: the daemon's choice of enforcer for each group on each GPU, per
// dimension (enforcer_choice.h), made real and kept current (DESIGN.md
// section 5a; docs/backstop.md "Enforcers").
//
// Reconcile() recomputes every choice from the registry (groups, limits,
// schedule, members' cgroups), the GPUs' features and the tiers granted, and
// makes the driver's per-cgroup memory limits match:
//  1. A choice of the driver for memory sets (soft, hard) on the group's
//     cgroup; a changed limit or cgroup is set again (the old cgroup cleared
//     first). So a limit change goes to the driver where the driver holds it
//     (and to the limiter through the group segment, as always).
//  2. A limit this object set that no choice holds any more (the group left:
//     its last member gone, the group forgotten, its limit removed, the group
//     moved to another cgroup) is cleared (soft 0, hard kNoMemoryLimit).
//  3. A driver refusal falls the group's memory back to the limiter on that
//     GPU, with the driver's error as the reason, and is counted; the next
//     Reconcile tries again.
//  4. What is set is saved (record "driver_limits") after every change, so a
//     restarted daemon clears the limits of groups that left meanwhile. A
//     failed save is counted, logged once (and by the state store), and
//     retried by every Reconcile until it works.
//  6. A limit moving to another cgroup (the group's members moved) is two
//     driver calls: the old cgroup's limit is cleared, then the new one set.
//     When the clear fails, the new one is not set (the group's memory stays
//     with the limiter on that GPU, the reason says why) and the old one stays
//     held, so the next Reconcile clears it again: a limit is never left set
//     in the driver without this object knowing it.
//  5. A clean stop clears every limit this object holds (ClearAll): a node
//     whose daemon is stopped looks like one without gpuslice, as leases are
//     reverted at stop (DESIGN.md section 5). A limit left set would outlive
//     its group, since a stopped daemon sees no group leave, and would hold
//     whatever the cgroup runs next. A restart re-sets the limits of the
//     groups still there on its first Reconcile; in between, the limiter in
//     each process holds the limit (docs/backstop.md "Enforcers").
// Reconcile runs after every registry event that changes who is in a group
// or what it may use (as a RegistryObserver the daemon adds: a tenant
// registered or left, a group's limits or schedule changed, a group
// forgotten; synchronously, so a registration's reply follows its driver
// limit) and after every GPU sample.
//
// Thread-safe: Reconcile calls are serialised by one lock; ChoiceOf,
// Choices and FormatMetrics read under another.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/enforce/enforcer_choice.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

inline constexpr const char* kDriverLimitsRecordName = "driver_limits";

class Enforcers final : public RegistryObserver {
 public:
  struct Options {
    std::string cgroup_root = "/sys/fs/cgroup";
  };
  struct Sources {
    // The GPUs as last sampled (features included).
    std::function<std::shared_ptr<const Snapshot>()> gpus;
    // Whether group `group` runs on MPS on GPU `uuid`; null: never.
    std::function<bool(const std::string& group, const std::string& uuid)> mps_granted;
    // The SMs of its static SM partition there (MPS v3), 0 for none; null: none.
    std::function<uint32_t(const std::string& group, const std::string& uuid)> mps_partition_sms;
    // The profile of group `group`'s MIG instance on GPU `uuid`, "" for
    // none; null: none.
    std::function<std::string(const std::string& group, const std::string& uuid)> mig_profile;
  };
  using Key = std::pair<std::string, std::string>;  // group id, GPU UUID

  // REQUIRES: every argument outlives this object; `store` may be null
  // (nothing saved). Loads what an earlier run set (its owner is now this).
  Enforcers(Options options, GpuBackend& backend, const TenantRegistry& registry, Sources sources,
            StateStore* store);

  // Reconcile(registry.TakeView()).
  void Reconcile();
  // Recomputes every choice from `registry`, the registry as of one instant
  // (the daemon's per-sample view). Does nothing once ClearAll has run, or
  // when a newer view was reconciled already (a sample's view taken before
  // an event's must not undo what the event's Reconcile set).
  void Reconcile(const RegistryView& registry);

  // RegistryObserver: each a Reconcile.
  void OnTenantRegistered(const TenantRegistered& /*event*/) override { Reconcile(); }
  void OnTenantExited(const TenantExited& /*event*/) override { Reconcile(); }
  void OnLimitsChanged(const GroupLimitsChanged& /*event*/) override { Reconcile(); }
  void OnScheduleChanged(const GroupScheduleChanged& /*event*/) override { Reconcile(); }
  void OnGroupForgotten(const GroupForgotten& /*event*/) override { Reconcile(); }
  // Rule 5: clears every held limit and saves what is left (a limit whose
  // clear failed stays recorded, so the next start clears it); every later
  // Reconcile does nothing. Returns the first failure, if any.
  Status ClearAll();

  std::optional<EnforcerChoice> ChoiceOf(const std::string& group, const std::string& uuid) const;
  std::map<Key, EnforcerChoice> Choices() const;
  // gpuslice_group_enforcer{group,gpu,dimension,enforcer} 1 per choice, the
  // driver limits held, and the failure counters.
  std::string FormatMetrics(const std::map<std::string, int>& gpu_index) const;

  uint64_t driver_failures() const;
  uint64_t save_failures() const;

 private:
  using Held = DriverMemoryLimit;
  // REQUIRES: reconcile_mu_ held.
  void Save();

  const Options options_;
  GpuBackend& backend_;
  const TenantRegistry& registry_;
  const Sources sources_;
  StateStore* const store_;

  std::mutex reconcile_mu_;          // one Reconcile at a time; taken before mu_
  std::map<Key, Held> held_;         // GUARDED_BY(reconcile_mu_): what is set in the driver
  uint64_t reconciled_version_ = 0;  // GUARDED_BY(reconcile_mu_): the newest view's
  bool stopped_ = false;             // GUARDED_BY(reconcile_mu_): ClearAll has run
  bool save_pending_ = false;        // GUARDED_BY(reconcile_mu_): the last Save failed (rule 4)

  mutable std::mutex mu_;
  std::map<Key, EnforcerChoice> choices_;  // GUARDED_BY(mu_)
  uint64_t driver_failures_ = 0;           // GUARDED_BY(mu_)
  uint64_t save_failures_ = 0;             // GUARDED_BY(mu_)
};

}  // namespace gpuslice::daemon
