// The limiter's configuration from the environment (DESIGN.md section 2): the
// per-device memory and compute limits and the group id a process's usage is
// charged to.
//
// Pure functions of their arguments: no getenv, no file access, no logging, no
// global state. The environment is read through an EnvLookup the caller
// supplies, so tests pass a fake and the preloaded library passes getenv. No
// exception escapes a function declared here.
//
// Thread-safe (no shared state); an EnvLookup is only called from the thread
// that calls ParseLimitConfig.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::limiter {

// One device as the process sees it: CUDA ordinal (after CUDA_VISIBLE_DEVICES)
// and UUID ("GPU-xxxxxxxx-xxxx-..."; an empty UUID matches no UUID key).
struct DeviceId {
  int index;
  std::string uuid;
};

struct DeviceLimits {
  std::optional<uint64_t> memory_bytes;     // > 0; nullopt: unlimited
  std::optional<uint32_t> compute_percent;  // 1..99; nullopt: unlimited (unset or 100)
};

// What a process asks of the daemon's scheduler for its group (DESIGN.md
// section 4); unset fields are not asked for.
struct ScheduleRequest {
  std::optional<uint32_t> request_percent;  // 0..100: guaranteed share of each GPU
  std::optional<std::string> priority;      // "latency" or "batch"
  std::optional<uint32_t> weight;           // 1..1000: share of the surplus

  bool operator==(const ScheduleRequest&) const = default;
};

struct LimitConfig {
  std::string group;                        // satisfies ValidGroupId
  std::vector<DeviceLimits> devices;        // parallel to the DeviceId span passed in
  std::optional<ScheduleRequest> schedule;  // set when one of its variables is
};

// getenv-like: returns nullptr when the variable is unset. The pointer need
// only stay valid until the next call.
using EnvLookup = std::function<const char*(std::string_view name)>;

// Variables read by ParseLimitConfig.
inline constexpr std::string_view kEnvMemoryLimit = "GPUSLICE_MEMORY_LIMIT";
inline constexpr std::string_view kEnvComputeLimit = "GPUSLICE_COMPUTE_LIMIT";
inline constexpr std::string_view kEnvGroup = "GPUSLICE_GROUP";
inline constexpr std::string_view kEnvTensorFusionMemLimit = "TENSOR_FUSION_CUDA_MEM_LIMIT";
inline constexpr std::string_view kEnvTensorFusionUpLimit = "TENSOR_FUSION_CUDA_UP_LIMIT";
inline constexpr std::string_view kEnvHamiMemoryLimit = "CUDA_DEVICE_MEMORY_LIMIT";  // [_i]
inline constexpr std::string_view kEnvHamiSmLimit = "CUDA_DEVICE_SM_LIMIT";          // [_i]
inline constexpr std::string_view kEnvComputeRequest = "GPUSLICE_COMPUTE_REQUEST";
inline constexpr std::string_view kEnvPriority = "GPUSLICE_PRIORITY";
inline constexpr std::string_view kEnvWeight = "GPUSLICE_WEIGHT";

// Reads the limits for `devices` and the group id from `env`.
//
// Memory sources, each optional:
//   GPUSLICE_MEMORY_LIMIT        a quantity for every device ("4GiB", "512MiB",
//                                "8G", "1073741824"), or a JSON object keyed by
//                                device index or UUID whose values are quantity
//                                strings or non-negative integers (bytes)
//   TENSOR_FUSION_CUDA_MEM_LIMIT a JSON object keyed by UUID or index; values are
//                                bytes, an integer or a string of digits
//   CUDA_DEVICE_MEMORY_LIMIT     (HAMi) a quantity for every device; k/m/g are
//                                powers of 1024; 0 means no limit
//   CUDA_DEVICE_MEMORY_LIMIT_<i> (HAMi) the same for the device with index i,
//                                replacing the plain variable for that device
//                                unless it is 0 (then the plain one applies, as
//                                in HAMi-core)
// Compute sources: GPUSLICE_COMPUTE_LIMIT, TENSOR_FUSION_CUDA_UP_LIMIT,
// CUDA_DEVICE_SM_LIMIT[_<i>] in the same shapes, with an integer percent
// (1..100, an optional '%' in strings) as the value.
//
// JSON keys: a key of decimal digits is a device index and must name a device
// in `devices`; any other key is a UUID, compared case-insensitively with or
// without the "GPU-" prefix, and must name a device in `devices`.
//
// Where several sources limit one device, the smallest value wins. A compute
// limit of 100 is no limit. Leading and trailing whitespace is ignored.
// HAMi's per-device variables are looked up only for the indexes in `devices`.
//
// The schedule (sent to the daemon, which applies it to a group its
// registrant creates): GPUSLICE_COMPUTE_REQUEST, a percent 0..100 (an
// optional '%'), at most the compute limit of every device;
// GPUSLICE_PRIORITY, "latency" or "batch" (any case); GPUSLICE_WEIGHT, an
// integer 1..1000. Unset when none of the three is set.
//
// The group is GPUSLICE_GROUP when set (it must satisfy ValidGroupId), else
// DefaultGroup(cgroup_text, pid).
//
// Errors: InvalidArgument, with a one-line message (no control characters)
// that names the variable and the problem, for any value that is set but
// empty, malformed, of the wrong JSON type, negative, fractional (percent),
// zero (except HAMi's 0 = no limit), over 100 (percent), in an unknown unit, or
// keyed by a device that does not exist, or a schedule variable out of its
// range (a request above a device's compute limit included). Internal if
// memory runs out.
//
// REQUIRES: `env` is callable.
StatusOr<LimitConfig> ParseLimitConfig(const EnvLookup& env, std::span<const DeviceId> devices,
                                       std::string_view cgroup_text, int pid);

// The schedule variables alone (see ParseLimitConfig), without the check
// against compute limits: for `gpuslice run`, which knows no devices.
StatusOr<std::optional<ScheduleRequest>> ParseScheduleRequest(const EnvLookup& env);

// The group a process belongs to when GPUSLICE_GROUP is unset: "pod-<uid>"
// (uid lower-case, dashed) when `cgroup_text` (the contents of
// /proc/self/cgroup, v1 or v2) holds a Kubernetes pod's cgroup path, written
// by either the cgroupfs driver (".../kubepods/burstable/pod<uid>/<container>")
// or the systemd driver (".../kubepods-burstable-pod<uid_with_underscores>.slice/
// ..."); else "pid-<pid>". The first line with a pod UID decides. A UID is 32
// hex digits, optionally dashed 8-4-4-4-12 (static pods use undashed hashes).
//
// The result satisfies ValidGroupId, or is empty if memory ran out.
std::string DefaultGroup(std::string_view cgroup_text, int pid) noexcept;

// True if `group` is usable as a group id (it becomes part of a file name):
// 1..100 characters of [A-Za-z0-9._-], not starting with '.'.
bool ValidGroupId(std::string_view group) noexcept;

}  // namespace gpuslice::limiter
