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
    case Enforcer::kMig:
      return "mig";
  }
  return "none";
}

std::optional<std::string> GroupCgroup(const std::vector<CgroupInfo>& members, std::string* why,
                                       std::string* code) {
  auto fail = [&](std::string what, const char* word) -> std::optional<std::string> {
    *why = std::move(what);
    if (code != nullptr) *code = word;
    return std::nullopt;
  };
  if (members.empty()) return fail("the group has no member (no cgroup to limit)", "no_member");
  const std::string& pod = members.front().pod_uid;
  const bool one_pod = !pod.empty() && std::all_of(members.begin(), members.end(),
                                                   [&](const auto& m) { return m.pod_uid == pod; });
  if (std::any_of(members.begin(), members.end(),
                  [](const CgroupInfo& m) { return m.unified_path.empty(); })) {
    return fail("a member has no cgroup v2 path", "member_without_cgroup_v2");
  }
  std::vector<std::string> common = Components(members.front().unified_path);
  size_t n = common.size();
  for (const CgroupInfo& m : members) {
    const std::vector<std::string> parts = Components(m.unified_path);
    size_t k = 0;
    while (k < n && k < parts.size() && parts[k] == common[k]) ++k;
    if (!one_pod && (k != n || parts.size() != n)) {
      return fail("the members are in different cgroups (" + members.front().unified_path + ", " +
                      m.unified_path + ") and not one pod's",
                  "members_in_different_cgroups");
    }
    n = k;
  }
  if (n == 0) {
    return fail("the members are in the root cgroup (a limit there would hold the whole node)",
                "root_cgroup");
  }
  return Join(common, n);
}

EnforcerChoice ChooseEnforcers(const ChoiceInput& in) {
  EnforcerChoice c;
  const GpuFeatures& f = in.features;
  if (!in.mig_profile.empty()) {
    c.memory = {Enforcer::kMig,
                "MIG instance " + in.mig_profile +
                    ": its own memory; the limiter accounts inside it as the second line",
                "mig_instance"};
    c.compute = {Enforcer::kMig, "MIG instance " + in.mig_profile + ": its own SMs",
                 "mig_instance"};
    return c;
  }
  if (!in.memory_limit_bytes) {
    c.memory = {Enforcer::kNone, "no memory limit", "no_limit"};
  } else {
    std::string missing, code;
    std::optional<std::string> cgroup;
    if (!f.memory_limits_api) {
      missing = "driver " +
                (f.driver_version.empty() ? std::string("(version unknown)") : f.driver_version) +
                " has no per-cgroup memory limits (r615 and later)";
      code = "driver_without_memory_limits";
    } else if (f.mig) {
      missing = "MIG mode: the driver's memory limits do not apply";
      code = "mig";
    } else if (!f.cgroup_v2) {
      missing = "no cgroup v2 at " + in.cgroup_root;
      code = "no_cgroup_v2";
    } else {
      cgroup = GroupCgroup(in.member_cgroups, &missing, &code);
    }
    if (cgroup) {
      std::string root = in.cgroup_root;
      while (!root.empty() && root.back() == '/') root.pop_back();
      DriverMemoryLimit limit{
          .gpu_index = in.gpu_index,
          .cgroup = root + *cgroup,
          .soft_bytes = std::min(in.memory_request_bytes.value_or(0), *in.memory_limit_bytes),
          .hard_bytes = *in.memory_limit_bytes};
      c.memory = {Enforcer::kDriver,
                  "driver hard limit " + MiB(limit.hard_bytes) + " (soft " + MiB(limit.soft_bytes) +
                      ") on cgroup " + *cgroup + "; the limiter accounts as the second line",
                  "driver_hard_limit"};
      c.driver_limit = std::move(limit);
    } else {
      c.memory = {Enforcer::kLimiter, "limiter: " + missing, code};
    }
  }
  if (in.mps_granted && f.mps_protocol >= 3 && in.mps_partition_sms > 0) {
    c.compute = {Enforcer::kMps,
                 "MPS v3: the group's static SM partition of " +
                     std::to_string(in.mps_partition_sms) +
                     " SMs (its clients' ceiling) in its namespace",
                 "mps_v3_sm_partition"};
  } else if (in.mps_granted) {
    c.compute =
        f.mps_protocol >= 3
            ? DimensionChoice{Enforcer::kMps, "MPS v3: the group's namespace thread percentage",
                              "mps_v3_namespace"}
            : DimensionChoice{Enforcer::kMps, "MPS: the client's active thread percentage",
                              "mps_thread_percentage"};
  } else if (in.compute_limit_percent) {
    c.compute = {Enforcer::kLimiter, "limiter time caps (tier shared)", "limiter_time_caps"};
  } else {
    c.compute = {Enforcer::kNone, "no compute limit", "no_limit"};
  }
  return c;
}

nlohmann::json EnforcerChoiceJson(const EnforcerChoice& choice) {
  nlohmann::json memory = {{"enforcer", EnforcerName(choice.memory.enforcer)},
                           {"reason", choice.memory.reason},
                           {"reason_code", choice.memory.code}};
  if (choice.driver_limit) {
    memory["cgroup"] = choice.driver_limit->cgroup;
    memory["soft_bytes"] = choice.driver_limit->soft_bytes;
    memory["hard_bytes"] = choice.driver_limit->hard_bytes;
  }
  return {{"memory", std::move(memory)},
          {"compute",
           {{"enforcer", EnforcerName(choice.compute.enforcer)},
            {"reason", choice.compute.reason},
            {"reason_code", choice.compute.code}}}};
}

}  // namespace gpuslice::daemon
