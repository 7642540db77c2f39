// The enforcer of each group on each GPU, per dimension (DESIGN.md section
// 5a; docs/backstop.md "Enforcers"): the strongest the node has, and why.
//
// A group in a MIG instance of its own (tier `mig`, docs/mig.md): MIG
// (kMig) for both, the instance's memory and SMs being the hardware's
// bounds; the limiter keeps its accounting inside the instance.
// Memory:
//  1. No memory limit: nothing to enforce (kNone).
//  2. The driver's per-cgroup hard limit (kDriver) where the GPU offers it
//     (r615 memory limits API, cgroup v2, not MIG) and the group has one
//     cgroup of its own: the deepest cgroup holding every member, when the
//     members are one pod's or all sit in the same cgroup, and never the
//     root cgroup. The limit is the hard limit, the group's memory request
//     the soft limit. The limiter keeps its accounting as a second line.
//  3. Otherwise the limiter (kLimiter), saying what was missing.
// Compute:
//  1. An `mps` group granted MPS: MPS (kMps; its active thread percentage,
//     by namespace with MPS v3; with MPS v3 and a static SM partition, the
//     partition, which is its clients' ceiling).
//  2. A compute limit otherwise: the limiter's time caps (kLimiter).
//  3. No limit: kNone.
//
// Pure functions; thread-compatible values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/gpu/backend.h"
#include "daemon/tenants/identity.h"

namespace gpuslice::daemon {

enum class Enforcer { kNone, kLimiter, kDriver, kMps, kMig };
std::string_view EnforcerName(Enforcer enforcer);  // "none", "limiter", "driver", "mps", "mig"

struct DimensionChoice {
  Enforcer enforcer = Enforcer::kNone;
  std::string reason;
  // The reason in a word, the same for every group and GPU it holds for (the
  // metrics' `reason` label): memory "no_limit", "driver_hard_limit",
  // "driver_without_memory_limits", "mig", "no_cgroup_v2", "no_member",
  // "member_without_cgroup_v2", "members_in_different_cgroups",
  // "root_cgroup", "cgroup_shared_by_groups", "driver_refused",
  // "old_limit_not_cleared"; compute "no_limit", "limiter_time_caps",
  // "mps_v3_namespace", "mps_v3_sm_partition", "mps_thread_percentage";
  // both "mig_instance".
  std::string code;

  bool operator==(const DimensionChoice&) const = default;
};

// A driver memory limit to hold: on GPU `gpu_index` for `cgroup` (the sysfs
// path), soft and hard in bytes.
struct DriverMemoryLimit {
  uint32_t gpu_index = 0;
  std::string cgroup;
  uint64_t soft_bytes = 0;
  uint64_t hard_bytes = 0;

  bool operator==(const DriverMemoryLimit&) const = default;
};

struct EnforcerChoice {
  DimensionChoice memory;
  DimensionChoice compute;
  std::optional<DriverMemoryLimit> driver_limit;  // set iff memory is kDriver

  bool operator==(const EnforcerChoice&) const = default;
};

// What the choice for one group on one GPU depends on.
struct ChoiceInput {
  uint32_t gpu_index = 0;
  GpuFeatures features;
  std::string cgroup_root = "/sys/fs/cgroup";  // the cgroup v2 mount
  std::optional<uint64_t> memory_limit_bytes;
  std::optional<uint64_t> memory_request_bytes;
  std::optional<uint32_t> compute_limit_percent;
  bool mps_granted = false;        // the group runs on MPS on this GPU
  uint32_t mps_partition_sms = 0;  // its static SM partition there (MPS v3); 0: none
  // The group's MIG instance on this GPU ("3g.40gb"), "" for none.
  std::string mig_profile;
  std::vector<CgroupInfo> member_cgroups;  // their unified_path is what counts
};

EnforcerChoice ChooseEnforcers(const ChoiceInput& input);

// The cgroup (a path in the cgroup v2 hierarchy, "/a/b") that holds exactly
// the group's members as memory rule 2 says, or nullopt with `*why` (and its
// code in `*code`, when given).
std::optional<std::string> GroupCgroup(const std::vector<CgroupInfo>& members, std::string* why,
                                       std::string* code = nullptr);

// {"memory": {"enforcer", "reason", "reason_code", "cgroup" (driver only)},
//  "compute": {...}}.
nlohmann::json EnforcerChoiceJson(const EnforcerChoice& choice);

}  // namespace gpuslice::daemon
