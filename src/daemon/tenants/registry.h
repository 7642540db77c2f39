// TenantRegistry: the daemon's record of its tenants and their groups
// (DESIGN.md section 4, "Registry" and "Durability"; docs/api.md
// "Tenants and groups").
//
// A tenant is one process that registered (POST /v1/tenants); the daemon
// identifies it from /proc (identity.h), never from what it says. A group is
// a set of tenants that share limits per GPU (memory bytes, compute percent)
// and an isolation tier. Rules:
//  1. A group's owner is its first registrant's uid and pod UID ("" outside a
//     pod). A later registrant of another uid or another pod is refused
//     (kPermissionDenied naming both), so no tenant can join, and so read or
//     spend, another user's or pod's group.
//  2. Group limits are set by an admin (SetGroupLimits, PUT /v1/groups/{id});
//     a registrant's own limits can only lower its effective limits.
//  3. A tenant that exits is removed within a second (LivenessWatcher) and
//     its group is kept; an admin forgets a group with no member. A group
//     whose owner let it go while members still ran (ForgetWhenEmpty: a
//     kubelet's unprepare, a pod's deletion) is forgotten when its last
//     member goes, and the mark is checkpointed with the group.
//  4. Scheduling (issue 13; docs/scheduling.md "Scheduling"): per GPU a group has
//     a request, a priority and a weight (ScheduleSettings, keyed like
//     Limits) and the group a paused flag; its limit is its compute limit.
//     Admission: on every GPU the requests of all groups sum to at most 100
//     (else kResourceExhausted naming the GPU and the total: the API's 409
//     `request_overcommit`), and a request never exceeds the group's compute
//     limit on that GPU (kInvalidArgument).
//  5. Every change is checkpointed (records "groups" and "tenants" of the
//     StateStore) before the call that made it returns; a registration whose
//     checkpoint fails is undone and refused. Restore re-adopts at start the
//     tenants that still run (same pid and start time) and drops the rest.
//
// Thread-safe. Events (RegistryObserver) are delivered after the registry's
// lock is released.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/groups/group_schedule.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/identity.h"
#include "daemon/tenants/pid_watcher.h"
#include "daemon/tenants/registry_json.h"
#include "daemon/tenants/registry_types.h"
#include "daemon/tenants/registry_view.h"

namespace gpuslice::daemon {

// What the registry tells its observers (RegistryObserver), each once the
// change it reports is made (and saved, where it is), the registry's lock
// released. Each is one server-sent event of the name in its comment
// (RegistryEventJson).

// tenant_registered.
struct TenantRegistered {
  Tenant tenant;
};
// registration_refused.
struct RegistrationRefused {
  pid_t pid = 0;
  std::optional<uid_t> uid;  // the caller's, when known
  std::string group;
  Status why;
};
enum class ExitReason { kExited, kUnregistered, kGoneAtRestart };
// "exited", "unregistered", "gone_at_restart".
std::string_view ExitReasonName(ExitReason reason);
// tenant_exited: the tenant is no longer registered.
struct TenantExited {
  pid_t host_pid = 0;
  std::string group;
  ExitReason reason = ExitReason::kExited;
};
// group_limits_changed: the group's limits or tier were set; `group` as it is now.
struct GroupLimitsChanged {
  Group group;
};
// group_schedule_changed: the group's schedule changed; `group` as it is now.
struct GroupScheduleChanged {
  Group group;
};
// group_paused (paused) or group_resumed: the group's paused flag changed.
struct GroupPauseChanged {
  std::string group;
  bool paused = false;
};
// group_forgotten.
struct GroupForgotten {
  std::string group;
};

// Told of the registry's events (TenantRegistry::AddObserver), on the thread
// of the call that made the change (an API worker, the liveness watcher's).
// REQUIRES: an observer does not block for long and does not add or remove
// observers from a call.
class RegistryObserver {
 public:
  virtual ~RegistryObserver() = default;
  virtual void OnTenantRegistered(const TenantRegistered& /*event*/) {}
  virtual void OnRegistrationRefused(const RegistrationRefused& /*event*/) {}
  virtual void OnTenantExited(const TenantExited& /*event*/) {}
  virtual void OnLimitsChanged(const GroupLimitsChanged& /*event*/) {}
  virtual void OnScheduleChanged(const GroupScheduleChanged& /*event*/) {}
  virtual void OnPauseChanged(const GroupPauseChanged& /*event*/) {}
  virtual void OnGroupForgotten(const GroupForgotten& /*event*/) {}
};

// The JSON form of the registry's events: each handed to `sink` as its
// server-sent event name and one JSON object (docs/api.md "Events").
class RegistryEventJson final : public RegistryObserver {
 public:
  using Sink = std::function<void(std::string_view type, const nlohmann::json& data)>;
  explicit RegistryEventJson(Sink sink) : sink_(std::move(sink)) {}

  void OnTenantRegistered(const TenantRegistered& event) override;
  void OnRegistrationRefused(const RegistrationRefused& event) override;
  void OnTenantExited(const TenantExited& event) override;
  void OnLimitsChanged(const GroupLimitsChanged& event) override;
  void OnScheduleChanged(const GroupScheduleChanged& event) override;
  void OnPauseChanged(const GroupPauseChanged& event) override;
  void OnGroupForgotten(const GroupForgotten& event) override;

 private:
  const Sink sink_;
};

class TenantRegistry {
 public:
  struct Options {
    std::string proc_root = "/proc";
  };
  // The JSON form of every event (RegistryEventJson::Sink).
  using EventSink = RegistryEventJson::Sink;

  // REQUIRES: `clock`, `watcher` and `store` (may be null: nothing is
  // saved) outlive the registry. The watcher's exits must reach OnExited.
  // `sink` (may be empty) gets the JSON form of every event, first of the
  // observers.
  TenantRegistry(Options options, const Clock& clock, LivenessWatcher& watcher, StateStore* store,
                 EventSink sink);

  // `observer` is told of every event that begins after this call, after
  // the observers added before it. Thread-safe.
  // REQUIRES: `observer` stays valid until RemoveObserver returns (or the
  // registry goes).
  void AddObserver(RegistryObserver* observer);
  // No event that begins after this returns reaches `observer`; one under
  // way may still (stop the registry's callers first when it goes).
  void RemoveObserver(RegistryObserver* observer);

  // The node's GPU UUIDs, for the admission of "all" requests (called
  // without the registry's lock held); without it, or while it answers
  // none, only the GPUs the groups name (and "all" on its own) are checked.
  // REQUIRES: called before the registry is shared between threads.
  void SetNodeGpus(std::function<std::vector<std::string>()> node_gpus) {
    node_gpus_ = std::move(node_gpus);
  }

  // Loads the checkpoint and reconciles it with the running processes.
  // A missing checkpoint is an empty registry; an unreadable one is set
  // aside by the store, reported, and the registry starts empty (OK).
  Status Restore();

  // Registers reg.pid. Errors: kInvalidArgument (a bad group id),
  // kNotFound (no such process), kPermissionDenied (the group belongs to
  // another uid or pod), kFailedPrecondition (another tier than the group's,
  // or the pid is registered in another group), kUnavailable (not saved).
  //
  // reg.schedule is applied only when this registration creates the group
  // and admission allows it; otherwise the registration still succeeds and
  // `*schedule_refused` (if given) says why ("" when applied, not asked, or
  // already the group's: every part it sets is the group's on the GPUs it
  // names).
  StatusOr<Tenant> Register(const Registration& reg, std::string* schedule_refused = nullptr);
  // Removes the tenant `pid` (it stays alive). kNotFound if not registered.
  Status Unregister(pid_t pid);
  // The watcher's report: these processes exited.
  void OnExited(const std::vector<pid_t>& pids);
  // Saves the checkpoint again when the last save failed (a full disk: an
  // exit or an unregistration is not undone for want of a save, so the file
  // is behind): the daemon calls it on every GPU sample until a save works.
  // OK when nothing is owed; else the save's error.
  Status RetryCheckpoint();

  std::vector<Tenant> Tenants() const;
  // Every tenant with TenantJson(tenant).dump(), kept since its last change.
  std::vector<std::pair<Tenant, std::string>> TenantsWithJson() const;
  std::optional<Tenant> TenantOf(pid_t pid) const;
  std::vector<Group> Groups() const;
  std::optional<Group> GroupOf(const std::string& id) const;
  size_t MemberCount(const std::string& group) const;
  // The tenant's limit on each of its devices: its group's, lowered by its own.
  std::map<std::string, GpuLimit> EffectiveLimits(const Tenant& tenant) const;

  // What the registry says of group `id`'s limits; nullopt when it does not
  // know the group.
  std::optional<GroupControl> ControlOf(const std::string& id) const;

  // The registry at one instant, under one lock (registry_view.h): what a
  // consumer that reads every group in one pass takes, once per pass.
  RegistryView TakeView() const;

  // Replaces group `id`'s limits (and tier, if given), creating the group
  // (without owner) if absent. kFailedPrecondition for a tier change while
  // the group has members; kInvalidArgument for a bad id or percent.
  StatusOr<Group> SetGroup(const std::string& id, const Limits& limits, std::optional<Tier> tier);

  // A change of a group by an admin; an unset part is left as it is.
  struct GroupChange {
    std::optional<Limits> limits;              // replaces the group's limits
    std::optional<Tier> tier;                  // as SetGroup
    std::optional<ScheduleSettings> schedule;  // replaces the group's schedule
  };
  // Applies `change` to group `id`, creating it (without owner) if absent.
  // Errors as SetGroup, and: kInvalidArgument for a schedule value out of
  // range or a request above the group's compute limit on a GPU;
  // kResourceExhausted when the requests on a GPU would sum above 100 (the
  // message names the GPU and the current total). Nothing changes on error.
  // Notifies GroupLimitsChanged (limits or tier given) and
  // GroupScheduleChanged (the schedule changed).
  StatusOr<Group> UpdateGroup(const std::string& id, const GroupChange& change);
  // Sets group `id`'s paused flag (checkpointed; notifies GroupPauseChanged
  // when it changes). kNotFound if the group is unknown.
  StatusOr<Group> SetPaused(const std::string& id, bool paused);
  // Group `id`'s scheduling on the GPU `uuid`, for the scheduler: its
  // request (never above its limit), its limit (the group's compute limit
  // lowered by its tenants' own; 100 if none), priority, weight and paused
  // flag. nullopt: the group is unknown.
  std::optional<GroupSchedule> ScheduleOn(const std::string& id, const std::string& uuid) const;
  // The sum of the requests of every group on `uuid`.
  uint32_t RequestedOn(const std::string& uuid) const;

  // Forgets group `id`. kNotFound if absent; kFailedPrecondition if it has members.
  Status ForgetGroup(const std::string& id);
  // Forgets group `id` now when it has no member, else marks it so that it
  // is forgotten when its last member exits or unregisters (also when that
  // is seen at a restart). OK when the group is unknown; kUnavailable when
  // the change could not be saved (the mark still stands in memory).
  Status ForgetWhenEmpty(const std::string& id);

  uint64_t refused_count() const;

 private:
  // Saves the state of `version` or later; returns once it is on disk.
  Status Persist(uint64_t version);
  Status Refuse(const Registration& reg, Status why);
  // Calls `on` of every observer with `event`.
  template <typename Event>
  void Notify(void (RegistryObserver::*on)(const Event&), const Event& event) const;
  size_t CountMembersLocked(const std::string& group) const REQUIRES(mu_);
  std::optional<GroupControl> ControlLocked(const std::string& id) const REQUIRES(mu_);
  // Erases the groups marked forget_when_empty that have no member left and
  // returns their ids (the caller bumps groups_version_ when there are any).
  std::vector<std::string> ForgetEmptyMarkedLocked() REQUIRES(mu_);
  // Logs (with `reason`) and notifies GroupForgotten for each of `ids`.
  void NotifyForgotten(const std::vector<std::string>& ids, const char* reason) const;
  // Whether the registry with `candidate` in place of
  // its group (or added) is admissible: the candidate's requests within its
  // limits, and on each GPU in `gpus` (and each GPU a group names) where
  // the candidate asks more than before, every group's requests within 100.
  Status AdmitLocked(const Group& candidate, const std::vector<std::string>& gpus) const
      REQUIRES(mu_);
  // They keep tenant_text_ in step with tenants_.
  void PutTenantLocked(const Tenant& t) REQUIRES(mu_);
  void EraseTenantLocked(pid_t pid) REQUIRES(mu_);

  const Options options_;
  const Clock& clock_;
  LivenessWatcher& watcher_;
  StateStore* const store_;
  const std::unique_ptr<RegistryEventJson> json_;  // null without a sink
  std::function<std::vector<std::string>()> node_gpus_;

  // Copied on change: a delivery walks the list it began with, unlocked.
  mutable Mutex observers_mu_;
  std::shared_ptr<const std::vector<RegistryObserver*>> observers_ GUARDED_BY(observers_mu_);

  mutable Mutex mu_;
  std::map<std::string, Group> groups_ GUARDED_BY(mu_);
  std::map<pid_t, Tenant> tenants_ GUARDED_BY(mu_);
  // Each tenant's checkpoint JSON, serialised once, so that
  // a checkpoint of N tenants is a concatenation, not N serialisations.
  std::map<pid_t, std::string> tenant_text_ GUARDED_BY(mu_);
  uint64_t version_ GUARDED_BY(mu_) = 0;         // bumped by every change
  uint64_t groups_version_ GUARDED_BY(mu_) = 0;  // the last change of groups_
  uint64_t refused_ GUARDED_BY(mu_) = 0;

  // Group commit of checkpoints: one save at a time saves the newest state;
  // every caller whose version it covers returns with it.
  Mutex persist_mu_;
  std::condition_variable_any persisted_;
  bool saving_ GUARDED_BY(persist_mu_) = false;
  uint64_t saved_version_ GUARDED_BY(persist_mu_) = 0;
  uint64_t groups_saved_version_ = 0;                    // the one saver's (saving_) only
  uint64_t failed_version_ GUARDED_BY(persist_mu_) = 0;  // the last failed save covered this
  Status last_error_ GUARDED_BY(persist_mu_);            // and failed so
};

}  // namespace gpuslice::daemon
