// AllocationStore: the daemon's authoritative record of what the kubelet
// handed out on this node (DESIGN.md section 5b; docs/kubernetes.md "Kubelet
// side"). One allocation per claim UID (a DRA ResourceClaim, or a device
// plugin allocation named the same way): its namespace and name, the pods
// that use it, and per GPU the memory bytes and cores percent it holds.
//
// Invariants:
//  1. The claim UID is the group id: while an allocation exists, the group
//     `claim_uid` has exactly the allocation's limits (GroupLimitSink); when
//     it is removed, the group's limits are cleared.
//  2. Idempotent: Prepare of a claim that is already recorded with the same
//     devices changes nothing but the set of pods (a kubelet retry, a second
//     pod sharing the claim); Prepare with other devices is refused
//     (kFailedPrecondition): an allocation never changes under a running pod.
//     Unprepare of an unknown claim is OK.
//  3. Reference-counted by pod: Release drops one pod and removes the
//     allocation with its last pod; Unprepare (the kubelet's word that no
//     pod uses the claim any more) removes it whatever pods it names.
//  4. Durable: every change is checkpointed (record "kube_allocations" of the
//     StateStore) before the call returns OK; Restore reloads the record at
//     start and sets each group's limits again, so a daemon restart loses
//     nothing and prepares nothing twice. A change whose save fails (a full
//     disk, a vanished state directory; counted and shown stale by the
//     StateStore, docs/daemon.md "State") is refused and undone, except a
//     removal (Unprepare): no pod uses the claim any more, so the removal
//     stands (limits cleared, gone from memory) and the call answers
//     kUnavailable; the record, behind, is saved again by RetryCheckpoint
//     (the daemon calls it every sample) and by the kubelet's retry of the
//     Unprepare, which answers OK once the removal is saved. A crash before
//     that restores the allocation, which the kubelet (never told OK)
//     unprepares again.
//
// Thread-safe: one mutex; the sink is called with it held (the sink must not
// call back into the store).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon::kubelet {

inline constexpr char kAllocationRecordName[] = "kube_allocations";

// One GPU's share of an allocation.
struct DeviceShare {
  std::string uuid;                       // the GPU's UUID ("GPU-…")
  std::string pool;                       // DRA pool name ("" for the device plugin)
  std::string device;                     // DRA device name, or the device plugin's resource
  std::string request;                    // the claim request that got it ("" if none)
  std::optional<uint64_t> memory_bytes;   // unset: no memory limit
  std::optional<uint32_t> cores_percent;  // 1..100; unset: no compute limit

  bool operator==(const DeviceShare&) const = default;
};

struct Allocation {
  std::string claim_uid;  // also the group id (limiter::ValidGroupId)
  std::string claim_namespace;
  std::string claim_name;
  std::vector<std::string> pod_uids;  // sorted, unique
  std::vector<DeviceShare> devices;
  std::string source;  // "dra" or "device-plugin"
  // A DRA claim whose opaque config asks for tier mps (claim_reader.h
  // SliceConfig): its group is set to the mps tier with its limits.
  Tier tier = Tier::kShared;

  bool operator==(const Allocation&) const = default;
};

nlohmann::json AllocationJson(const Allocation& a);
StatusOr<Allocation> AllocationFromJson(const nlohmann::json& j);
// The group limits an allocation stands for, by GPU UUID (shares of one GPU
// add up; cores capped at 100).
Limits LimitsOf(const Allocation& a);

// Where an allocation's limits go: the TenantRegistry in the daemon, a fake
// in tests.
class GroupLimitSink {
 public:
  virtual ~GroupLimitSink() = default;
  // Replaces group `group`'s limits with `limits`, creating the group.
  virtual Status SetLimits(const std::string& group, const Limits& limits) = 0;
  // Applies `change` to group `group` (limits, schedule and tier, as
  // TenantRegistry::UpdateGroup), creating the group. The default sets only
  // the limits (none when the change has none).
  virtual Status SetSettings(const std::string& group, const TenantRegistry::GroupChange& change) {
    return SetLimits(group, change.limits.value_or(Limits{}));
  }
  // Clears group `group`'s limits and schedule and forgets the group, at
  // once when it has no member, else when its last member goes. OK when the
  // group is unknown.
  virtual Status ClearLimits(const std::string& group) = 0;
};

// A sink that sets nothing: allocations whose limits travel only in the
// containers' environment (the device plugin's, see device_plugin.h).
class NoLimitSink final : public GroupLimitSink {
 public:
  Status SetLimits(const std::string& /*group*/, const Limits& /*limits*/) override {
    return Status::Ok();
  }
  Status ClearLimits(const std::string& /*group*/) override { return Status::Ok(); }
};

// GroupLimitSink over the daemon's TenantRegistry (the PUT /v1/groups path).
class RegistryLimitSink final : public GroupLimitSink {
 public:
  // REQUIRES: `registry` outlives the sink.
  explicit RegistryLimitSink(TenantRegistry& registry) : registry_(registry) {}
  Status SetLimits(const std::string& group, const Limits& limits) override;
  Status SetSettings(const std::string& group, const TenantRegistry::GroupChange& change) override;
  Status ClearLimits(const std::string& group) override;

 private:
  TenantRegistry& registry_;
};

class AllocationStore {
 public:
  // REQUIRES: `store` (may be null: nothing is saved) and `sink` outlive the
  // AllocationStore.
  // `record` names the checkpoint (kAllocationRecordName unless another
  // store shares the state directory).
  AllocationStore(StateStore* store, GroupLimitSink& sink,
                  std::string record = kAllocationRecordName)
      : store_(store), sink_(sink), record_(std::move(record)) {}

  // Loads the checkpoint and sets every recorded group's limits again. A
  // missing record is an empty store; an unreadable one is set aside by the
  // StateStore and reported (the store starts empty).
  Status Restore();

  // Records `a` (invariant 2) and sets its group's limits; returns the
  // allocation as recorded. kInvalidArgument: a bad claim UID (not a group
  // id), no device, or a device without a UUID; kFailedPrecondition: the
  // claim is recorded with other devices; kUnavailable: not saved (nothing
  // changed).
  StatusOr<Allocation> Prepare(const Allocation& a);

  // Removes claim `claim_uid` and clears its group's limits. OK if absent
  // and saved. kUnavailable: removed, but not saved yet (invariant 4; a
  // later call saves it); a refused ClearLimits: nothing changed.
  Status Unprepare(const std::string& claim_uid);

  // Drops `pod_uid` from the claim's pods; removes the allocation when none
  // is left. Returns whether the allocation is gone. OK (true) if absent.
  StatusOr<bool> Release(const std::string& claim_uid, const std::string& pod_uid);

  // Names the claim's owner (namespace and name) when first learnt later
  // (the device plugin's pod, found through PodResources). kNotFound if absent.
  Status SetOwner(const std::string& claim_uid, const std::string& owner_namespace,
                  const std::string& owner_name);

  std::optional<Allocation> Get(const std::string& claim_uid) const;
  std::vector<Allocation> All() const;
  // Runs `fn` under the store's lock when `claim_uid` is not recorded, so
  // that no Prepare of it interleaves; returns whether it ran.
  bool IfUnrecorded(const std::string& claim_uid, const std::function<void()>& fn);

  // Saves the record again if its last save failed (invariant 4). OK when
  // nothing is owed or the save works; the save's error otherwise.
  Status RetryCheckpoint();

 private:
  Status SaveLocked() REQUIRES(mu_);
  // Sets `a`'s group in the sink: its limits, and the mps tier if it asks.
  Status SetGroup(const Allocation& a);

  StateStore* store_;
  GroupLimitSink& sink_;
  const std::string record_;
  mutable Mutex mu_;
  std::map<std::string, Allocation> allocations_ GUARDED_BY(mu_);  // by claim UID
  // Claims removed from memory whose removal no save has recorded yet.
  std::set<std::string> unsaved_removals_ GUARDED_BY(mu_);
};

}  // namespace gpuslice::daemon::kubelet
