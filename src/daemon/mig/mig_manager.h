// MigManager: the MIG instances gpusliced makes for its owners (a `mig`
// group, later a claim), one per owner (DESIGN.md section 7a; docs/mig.md).
//
//  1. Acquire picks, on the first of the owner's GPUs that is in MIG mode and
//     has room, the smallest GPU-instance profile that covers the request
//     (its memory at least the memory asked for, its compute slices at least
//     the compute share asked for; CoveringProfiles), at the lowest free
//     placement (FreePlacements), and makes the GPU instance with one compute
//     instance of all its slices. The operator puts GPUs in MIG mode; the
//     daemon never changes a GPU's mode.
//  2. Nothing is left half-made: the backend makes both instances or
//     neither, and a request no free placement holds is refused with the
//     reason (kResourceExhausted; kFailedPrecondition when no GPU of the
//     owner's is in MIG mode).
//  3. The record (the state store's "mig") is written before each creation
//     (the GPU, profile and placement: "creating") and after it ("held"),
//     so a daemon killed at any point finds at restart what it made:
//     Reconcile adopts the instances of owners still wanted, destroys those
//     of owners gone, and forgets records whose instance is gone. Instances
//     the record does not name (the operator's) are never touched.
//  4. Release destroys the owner's instance. One a process still uses
//     (NVML_ERROR_IN_USE) stays recorded as "releasing" and RetryReleases
//     (each monitor tick) tries again until it is gone.
//
// Thread-safe: one mutex, held across the backend calls (the driver makes
// one MIG change at a time anyway). REQUIRES: the backend and the store
// outlive this object.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"
#include "daemon/state/state_store.h"

namespace gpuslice::daemon {

// The profiles of `profiles` that cover a request, in the order to try
// them: fewest compute slices, then least memory. A profile covers when its
// memory is at least `memory_bytes` and its share of the GPU's compute
// slices (the largest profile's) at least `compute_percent`; an unset
// field asks for nothing. Pure.
std::vector<MigProfile> CoveringProfiles(const std::vector<MigProfile>& profiles,
                                         std::optional<uint64_t> memory_bytes,
                                         std::optional<uint32_t> compute_percent);

// The placements of `profile` that no instance of `existing` overlaps,
// lowest first. Pure.
std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         const std::vector<MigInstance>& existing);

struct MigRequest {
  std::string owner;              // "group/train"
  std::vector<std::string> gpus;  // the GPU UUIDs it may have, in order of preference
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> compute_percent;
};

// An instance the daemon holds for an owner.
struct MigGrant {
  enum class State { kCreating, kHeld, kReleasing };
  std::string owner;
  uint32_t gpu_index = 0;
  std::string gpu_uuid;
  MigInstance instance;  // in kCreating only the profile and placement are known
  State state = State::kHeld;

  bool operator==(const MigGrant&) const = default;
};
std::string_view MigStateName(MigGrant::State state);  // "creating", "held", "releasing"
// {"owner", "gpu", "state", "profile", "profile_id", "placement": {"start",
// "size"}, "gpu_instance_id", "compute_instance_id", "uuid", "memory_bytes"}:
// the record's entry and the API's view (docs/mig.md).
nlohmann::json MigGrantJson(const MigGrant& grant);

// One GPU instance of a GPU, with its owner ("" for the operator's).
struct MigInstanceView {
  MigInstance instance;
  std::string owner;
};

class MigManager {
 public:
  // `state`: where the record lives (null: kept in memory only, for tests).
  MigManager(GpuBackend& backend, StateStore* state);
  MigManager(const MigManager&) = delete;
  MigManager& operator=(const MigManager&) = delete;

  // The owner's instance: the one it holds, else one made now (rule 1).
  // Errors (rule 2): kFailedPrecondition (no GPU of the request in MIG
  // mode), kResourceExhausted (no free placement of a covering profile; the
  // message names each GPU's reason), kUnavailable (the record cannot be
  // saved: nothing is made).
  StatusOr<MigGrant> Acquire(const MigRequest& request);
  // Destroys the owner's instance (rule 4). OK when it holds none.
  Status Release(const std::string& owner);
  // Releases again what stays "releasing".
  void RetryReleases();
  // At start (rule 3): `wanted(owner)` says whether an owner still is.
  void Reconcile(const std::function<bool(const std::string& owner)>& wanted);

  uint32_t GpuCount() const { return static_cast<uint32_t>(uuids_.size()); }
  const std::string& GpuUuid(uint32_t index) const { return uuids_.at(index); }
  std::optional<MigGrant> Held(const std::string& owner) const;
  std::vector<MigGrant> Grants() const;
  // GPU `index`'s GPU instances with their owners; the backend's error (not
  // in MIG mode, no MIG API) otherwise.
  StatusOr<std::vector<MigInstanceView>> Instances(uint32_t index) const;
  // The GPU's instances as JSON ({"mode": "enabled", "instances": [...]}),
  // or {"mode": "disabled"} / {"mode": "unsupported", "reason": ...}.
  nlohmann::json GpuJson(uint32_t index) const;
  // Prometheus text: gpuslice_mig_instances{gpu,profile,owned} and
  // gpuslice_mig_refusals_total.
  std::string FormatMetrics() const;

 private:
  // The owner's instance on GPU `index` (rule 1), or why not: the backend's
  // listing error (kFailedPrecondition: not in MIG mode), kResourceExhausted
  // (no room), kUnavailable (the record cannot be saved).
  StatusOr<MigGrant> AcquireOnLocked(const MigRequest& request, uint32_t index) REQUIRES(mu_);
  // Makes `owner`'s instance of `profile` at `at` on GPU `index`, recorded
  // before and after (rule 3); the error names the profile and placement.
  StatusOr<MigGrant> CreateLocked(const std::string& owner, uint32_t index,
                                  const MigProfile& profile, MigPlacement at) REQUIRES(mu_);
  // Saves grants_ (rule 3); kUnavailable naming the store's error.
  Status SaveLocked() REQUIRES(mu_);
  // Destroys `g`'s instance; erases it, or marks it releasing when in use.
  Status ReleaseLocked(const std::string& owner) REQUIRES(mu_);
  std::optional<uint32_t> IndexOf(const std::string& uuid) const;

  GpuBackend& backend_;
  StateStore* const state_;
  std::vector<std::string> uuids_;  // by GPU index, read once
  mutable Mutex mu_;
  std::map<std::string, MigGrant> grants_ GUARDED_BY(mu_);  // by owner
  uint64_t refusals_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpuslice::daemon
