#include "daemon/enforce/enforcer_choice.h"

#include <algorithm>

namespace gpuslice::daemon {
namespace {

std::vector<std::string> Components(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    if (j > i) out.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::string_view EnforcerName(Enforcer enforcer) {
  switch (enforcer) {
    case Enforcer::kNone:
      return "none";
    case Enforcer::kLimiter:
      return "limiter";
    case Enforcer::kDriver:
      return "driver";
    case Enforcer::kMps:
      return "mps";
  }
  return "none";
}

std::optional<std::string> GroupCgroup(const std::vector<CgroupInfo>& members, std::string* why) {
  if (members.empty()) {
    *why = "the group has no member (no cgroup to limit)";
    return std::nullopt;
  }
  const std::string& pod = members.front().pod_uid;
  const bool one_pod = !pod.empty() && std::all_of(members.begin(), members.end(),
                                                   [&](const auto& m) { return m.pod_uid == pod; });
  if (std::any_of(members.begin(), members.end(),
                  [](const CgroupInfo& m) { return m.unified_path.empty(); })) {
    *why = "a member has no cgroup v2 path";
    return std::nullopt;
  }
  std::vector<std::string> common = Components(members.front().unified_path);
  size_t n = common.size();
  for (const CgroupInfo& m : members) {
    const std::vector<std::string> parts = Components(m.unified_path);
    size_t k = 0;
    while (k < n && k < parts.size() && parts[k] == common[k]) ++k;
    if (!one_pod && (k != n || parts.size() != n)) {
      *why = "the members are in different cgroups (" + members.front().unified_path + ", " +
             m.unified_path + ") and not one pod's";
      return std::nullopt;
    }
    n = k;
  }
  if (n == 0) {
    *why = "the members are in the root cgroup (a limit there would hold the whole node)";
    return std::nullopt;
  }
  return Join(common, n);
}

EnforcerChoice ChooseEnforcers(const ChoiceInput& in) {
  EnforcerChoice c;
  const GpuFeatures& f = in.features;
  if (!in.memory_limit_bytes) {
    c.memory = {Enforcer::kNone, "no memory limit"};
  } else {
    std::string missing;
    std::optional<std::string> cgroup;
    if (!f.memory_limits_api) {
      missing = "driver " +
                (f.driver_version.empty() ? std::string("(version unknown)") : f.driver_version) +
                " has no per-cgroup memory limits (r615 and later)";
    } else if (f.mig) {
      missing = "MIG mode: the driver's memory limits do not apply";
    } else if (!f.cgroup_v2) {
      missing = "no cgroup v2 at " + in.cgroup_root;
    } else {
      cgroup = GroupCgroup(in.member_cgroups, &missing);
    }
    if (cgroup) {
      std::string root = in.cgroup_root;
      while (!root.empty() && root.back() == '/') root.pop_back();
      DriverMemoryLimit limit{
          .gpu_index = in.gpu_index,
          .cgroup = root + *cgroup,
          .soft_bytes = std::min(in.memory_request_bytes.value_or(0), *in.memory_limit_bytes),
          .hard_bytes = *in.memory_limit_bytes};
      c.memory = {Enforcer::kDriver, "driver hard limit " + MiB(limit.hard_bytes) + " (soft " +
                                         MiB(limit.soft_bytes) + ") on cgroup " + *cgroup +
                                         "; the limiter accounts as the second line"};
      c.driver_limit = std::move(limit);
    } else {
      c.memory = {Enforcer::kLimiter, "limiter: " + missing};
    }
  }
  if (in.mps_granted) {
    c.compute = {Enforcer::kMps, f.mps_protocol >= 3
                                     ? "MPS v3: the group's namespace thread percentage"
                                     : "MPS: the client's active thread percentage"};
  } else if (in.compute_limit_percent) {
    c.compute = {Enforcer::kLimiter, "limiter time caps (tier shared)"};
  } else {
    c.compute = {Enforcer::kNone, "no compute limit"};
  }
  return c;
}

nlohmann::json EnforcerChoiceJson(const EnforcerChoice& choice) {
  nlohmann::json memory = {{"enforcer", EnforcerName(choice.memory.enforcer)},
                           {"reason", choice.memory.reason}};
  if (choice.driver_limit) {
    memory["cgroup"] = choice.driver_limit->cgroup;
    memory["soft_bytes"] = choice.driver_limit->soft_bytes;
    memory["hard_bytes"] = choice.driver_limit->hard_bytes;
  }
  return {
      {"memory", std::move(memory)},
      {"compute",
       {{"enforcer", EnforcerName(choice.compute.enforcer)}, {"reason", choice.compute.reason}}}};
}

}  // namespace gpuslice::daemon
