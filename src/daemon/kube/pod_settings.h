// A pod's gpuslice settings from its annotations (docs/kubernetes.md
// "Annotations"), and the group they apply to.
//
//   gpuslice.io/memory    device memory limit per GPU: "4Gi", "512Mi", "8G"
//                         (units as common/quantity.h: G = Gi = 2^30)
//   gpuslice.io/cores     compute limit per GPU, percent 1..100 ("30", "30%")
//   gpuslice.io/request   guaranteed share per GPU under contention, 0..100
//   gpuslice.io/priority  "latency" or "batch"
//   gpuslice.io/tier      "shared" or "mps"
//
// The group is the one the limiter derives from the pod's cgroup
// (limiter/core/limit_config.h DefaultGroup): "pod-<uid>", the UID lower
// case; for a static pod's mirror, the config hash its cgroup is named by
// (annotation kubernetes.io/config.mirror).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon::kube {

inline constexpr const char* kAnnotationMemory = "gpuslice.io/memory";
inline constexpr const char* kAnnotationCores = "gpuslice.io/cores";
inline constexpr const char* kAnnotationRequest = "gpuslice.io/request";
inline constexpr const char* kAnnotationPriority = "gpuslice.io/priority";
inline constexpr const char* kAnnotationTier = "gpuslice.io/tier";

struct PodSettings {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> cores_percent;
  std::optional<uint32_t> request_percent;
  std::optional<Priority> priority;
  std::optional<Tier> tier;

  bool empty() const { return *this == PodSettings{}; }
  bool operator==(const PodSettings&) const = default;
};

// The settings a pod's annotations (metadata.annotations, may be absent)
// ask for; an annotation outside the list is ignored. kInvalidArgument
// naming the annotation and its value for a bad one (nothing is applied
// then: a half-read set of limits is worse than the previous one).
StatusOr<PodSettings> ParsePodSettings(const nlohmann::json& pod);

// The group id of the pod; "" when it has no usable UID.
std::string PodGroup(const nlohmann::json& pod);

// Whether a container (or init container) of the pod asks for a resource of
// gpuslice's device plugins (a "gpuslice.io/" name in resources.limits or
// requests): its containers then run in slice groups of their own
// (kubelet/device_plugin.h), not in the pod's group.
bool AsksForDevicePlugins(const nlohmann::json& pod);

// "namespace/name" for logs and events.
std::string PodName(const nlohmann::json& pod);

// The registry change that gives a group exactly `settings` on every GPU
// (fields not set: no limit, the default schedule; the tier only if set).
TenantRegistry::GroupChange GroupChangeFor(const PodSettings& settings);

nlohmann::json PodSettingsJson(const PodSettings& settings);

}  // namespace gpuslice::daemon::kube
