// The registry's records (a Group, a Tenant, a Registration) and the
// arithmetic of their limits and schedules: how per-GPU entries keyed by
// UUID or kAllGpus resolve on one GPU and how two limits combine (the
// tighter of each field). No locking, no I/O: values only
// (tenants/registry.h holds them; registry_json.h reads and writes them).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/groups/group_schedule.h"
#include "daemon/tenants/identity.h"
#include "daemon/tier.h"

namespace gpuslice::daemon {

// A limit on one GPU; an unset field is no limit.
struct GpuLimit {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> compute_percent;  // 1..100

  bool operator==(const GpuLimit&) const = default;
};
// The tighter of each field.
GpuLimit Lower(const GpuLimit& a, const GpuLimit& b);

// Limits by GPU UUID; the key kAllGpus applies to every GPU, and a GPU's own
// entry overrides its fields.
inline constexpr const char* kAllGpus = "all";
using Limits = std::map<std::string, GpuLimit>;
GpuLimit LimitOn(const Limits& limits, const std::string& uuid);
// The tighter of each field on every GPU: LimitOn(LowerLimits(a, b), u) ==
// Lower(LimitOn(a, u), LimitOn(b, u)) for every UUID u.
Limits LowerLimits(const Limits& a, const Limits& b);

std::string_view PriorityName(Priority priority);
StatusOr<Priority> ParsePriority(std::string_view name);

// A group's scheduling on one GPU; an unset field: the "all" entry's, else
// the default (request 0, batch, weight 1).
struct ScheduleEntry {
  std::optional<uint32_t> request_percent;  // 0..100
  std::optional<Priority> priority;
  std::optional<uint32_t> weight;  // 1..1000
  // Memory guaranteed under contention (the driver's soft limit where the
  // driver holds the group's memory; DESIGN.md section 5a), bytes.
  std::optional<uint64_t> memory_request_bytes;

  bool operator==(const ScheduleEntry&) const = default;
};
// Entries by GPU UUID or kAllGpus, as Limits.
using ScheduleSettings = std::map<std::string, ScheduleEntry>;
// The "all" entry overlaid by `uuid`'s own.
ScheduleEntry ScheduleEntryOn(const ScheduleSettings& schedule, const std::string& uuid);
// kInvalidArgument naming the field (`where` prefixes it) when out of range.
Status ValidateScheduleEntry(const ScheduleEntry& entry, const std::string& where);

// A group id: 1-64 of [A-Za-z0-9._-], not starting with '.'.
Status ValidateGroupId(std::string_view id);

struct Group {
  std::string id;
  Limits limits;
  ScheduleSettings schedule;
  bool paused = false;  // launches wait on every GPU; memory is kept
  Tier tier = Tier::kShared;
  std::optional<uid_t> owner_uid;  // unset: made by an admin, no registrant yet
  std::string owner_pod_uid;
  int64_t created_at_ns = 0;  // the registry's clock
  // Forgotten when its last member goes (ForgetWhenEmpty); any later
  // UpdateGroup clears it.
  bool forget_when_empty = false;
};

struct Tenant {
  pid_t host_pid = 0;
  pid_t container_pid = 0;
  uint64_t start_time = 0;  // with host_pid, names the process
  uid_t uid = 0;
  std::string group;
  CgroupInfo cgroup;                        // pod UID, container id, runtime
  ClaimedHints hints;                       // what it said, as shown (ShownHints)
  std::vector<std::string> hint_conflicts;  // where the hints contradict the host
  Tier tier = Tier::kShared;
  std::vector<std::string> devices;  // GPU UUIDs
  // The tenant's own (lowering) limits, by GPU UUID (kAllGpus: every GPU),
  // as LimitOn reads them.
  Limits requested;
  int64_t registered_at_ns = 0;  // the registry's clock
};

// A registration as the API hands it over, after parsing.
struct Registration {
  pid_t pid = 0;             // host pid, from SO_PEERCRED (or checked to exist, over TCP)
  std::optional<uid_t> uid;  // the caller's uid (SO_PEERCRED); unset: the process's
  std::string group;
  std::vector<std::string> devices;  // GPU UUIDs
  std::optional<Tier> tier;          // unset: the group's (shared for a new group)
  GpuLimit limits;                   // the registrant's own limits on every GPU
  Limits gpu_limits;                 // and by GPU UUID (kAllGpus allowed), lowering `limits`
  ClaimedHints hints;
  // Asked for the group on each of `devices`; applied only when this
  // registration creates the group and admission allows (RegisterResult).
  std::optional<ScheduleEntry> schedule;
};

}  // namespace gpuslice::daemon
