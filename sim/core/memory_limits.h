// The r615 driver's per-cgroup device memory limits, as the simulated driver
// and NVML model them (NVML nvmlDeviceSetMemoryLimits_v1 and friends; see
// docs/sim.md for which documented fact each rule follows).
//
// A limit is keyed by the full sysfs path of a cgroup v2 directory
// ("/sys/fs/cgroup/tenants/a", NVML's `nameSpace`). It applies to every process
// whose cgroup is that directory or one below it. A process's cgroup is the
// unified ("0::") line of /proc/self/cgroup, prefixed with the cgroup root.
//
// Charged to a cgroup: the device memory of its processes' active contexts
// (context reservations and allocations), except managed memory.
//
// Test seams (environment, read by the process concerned):
//   GPUSLICE_SIM_CGROUP_FILE  a file read instead of /proc/self/cgroup
//   GPUSLICE_SIM_CGROUP_ROOT  the cgroup v2 mount instead of /sys/fs/cgroup
//
// All functions on SimState REQUIRE the state lock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "sim/core/state.h"

namespace gpuslice::sim {

// NVML_DEVICE_MEMORY_LIMIT_MAX: a hard limit of this value means "no limit".
inline constexpr uint64_t kMemoryLimitMax = ~uint64_t{0};

// GPUSLICE_SIM_CGROUP_ROOT, or /sys/fs/cgroup; never ends in '/'.
std::string CgroupRoot();
// Whether `root` is a cgroup v2 hierarchy: it has a cgroup.controllers file
// (the file only the unified hierarchy's directories have).
bool IsCgroupV2Root(const std::string& root);

// The path of the unified hierarchy's line ("0::/a/b" gives "/a/b") in the
// text of /proc/<pid>/cgroup, or "" when there is none (cgroup v1 only).
std::string UnifiedCgroupPath(std::string_view proc_cgroup_text);
// This process's cgroup as a full sysfs path (CgroupRoot() + unified path),
// or "" when it has none. Reads GPUSLICE_SIM_CGROUP_FILE or /proc/self/cgroup.
std::string OwnCgroupPath();

// Whether `cgroup` is `limit` or lies below it (compared by path components;
// trailing '/' ignored).
bool CgroupAtOrBelow(std::string_view cgroup, std::string_view limit);

// The limit recorded for exactly `cgroup` on the device, or nullptr.
const MemoryLimitRecord* FindMemoryLimit(const DeviceState& d, std::string_view cgroup);

// Sets (or, with soft 0 and hard kMemoryLimitMax, clears) the limit of
// `cgroup` on the device. InvalidArgument: empty or too long a path, soft >
// hard; ResourceExhausted: kMaxMemoryLimits limits already set.
Status SetMemoryLimit(DeviceState& d, std::string_view cgroup, uint64_t soft, uint64_t hard);

// Device memory charged to `cgroup` (it and everything below) on `device`.
uint64_t CgroupUsedBytes(const SimState& s, int device, std::string_view cgroup);

// What a process in `cgroup` sees of the device: the device's own total/free,
// or, when limits apply, the one with the least headroom: total = its hard
// limit (at most the device's), free = min(device free, hard - used).
struct MemoryView {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t used_bytes = 0;  // total - free as the process sees it
  bool limited = false;
};
MemoryView ViewFromCgroup(const SimState& s, int device, std::string_view cgroup);

// OK if charging `bytes` more to a process in `cgroup` keeps every applicable
// hard limit; else ResourceExhausted naming the limit.
Status CheckCgroupCharge(const SimState& s, int device, std::string_view cgroup, uint64_t bytes);

// Soft-limit eviction (only with SimParams::soft_limit_eviction): when the
// device is full, a process still within the soft limit of its cgroup (an
// applicable limit with soft > 0 and used + bytes <= soft) may evict the
// contexts of "borrowers", processes in cgroups whose use exceeds their soft
// limit. Whether `cgroup` may evict for `bytes` more:
bool WithinSoftGuarantee(const SimState& s, int device, std::string_view cgroup, uint64_t bytes);
// The context to evict next on `device` for process slot `requester`: of the
// borrowers' active contexts (other processes only), one of the cgroup most
// above its soft limit, the largest first; -1 if none. A process under no
// limit at all borrows all it holds (dmem.min is 0 where none is set).
int PickEvictionVictim(const SimState& s, int device, int requester);

// Drops the limits of cgroups whose directory no longer exists (removing the
// cgroup clears its limits, as documented).
void PruneRemovedCgroups(DeviceState& d);

}  // namespace gpuslice::sim
