#include "daemon/backstop/memory_backstop.h"

#include <algorithm>

namespace gpuslice::daemon {

std::string_view FindingKindName(MemoryBackstop::FindingKind kind) {
  switch (kind) {
    case MemoryBackstop::FindingKind::kOverLimit:
      return "over_limit";
    case MemoryBackstop::FindingKind::kBackUnder:
      return "back_under_limit";
    case MemoryBackstop::FindingKind::kUnregistered:
      return "unregistered_process";
    case MemoryBackstop::FindingKind::kKilled:
      return "killed";
  }
  return "unknown";
}

MemoryBackstop::MemoryBackstop(Options options, Registry registry, Killer killer)
    : options_(options), registry_(std::move(registry)), killer_(std::move(killer)) {}

std::vector<MemoryBackstop::Finding> MemoryBackstop::Check(
    uint32_t gpu, const std::string& uuid, const std::vector<GpuProcess>& processes) {
  struct GroupUse {
    uint64_t bytes = 0;
    std::vector<const GpuProcess*> processes;
  };
  std::map<std::string, GroupUse> use;
  std::vector<Finding> findings;
  std::set<uint32_t> unregistered_now;
  for (const GpuProcess& p : processes) {
    const std::optional<std::string> group = registry_.group_of(p.pid);
    if (!group) {
      unregistered_now.insert(p.pid);
      if (unregistered_seen_[uuid].insert(p.pid).second) {
        findings.push_back({FindingKind::kUnregistered,
                            gpu,
                            uuid,
                            "",
                            {p.pid},
                            p.used_memory_bytes.value_or(0),
                            0});
      }
      continue;
    }
    GroupUse& g = use[*group];
    g.bytes += p.used_memory_bytes.value_or(0);
    g.processes.push_back(&p);
  }
  // Forget processes that left, so a reused pid is reported again.
  std::erase_if(unregistered_seen_[uuid],
                [&](uint32_t pid) { return !unregistered_now.contains(pid); });

  std::set<std::string> seen_groups;
  for (auto& [group, g] : use) {
    seen_groups.insert(group);
    const std::optional<uint64_t> limit = registry_.limit_of(group, uuid);
    const uint64_t allowance = options_.allowance_per_process_bytes * g.processes.size();
    const bool over = limit && g.bytes > *limit && g.bytes - *limit > allowance;
    std::vector<uint32_t> pids;
    for (const GpuProcess* p : g.processes) pids.push_back(p->pid);
    const auto key = std::make_pair(group, uuid);
    if (over && over_.insert(key).second) {
      findings.push_back({FindingKind::kOverLimit, gpu, uuid, group, pids, g.bytes, *limit});
    } else if (!over && over_.erase(key) > 0) {
      findings.push_back(
          {FindingKind::kBackUnder, gpu, uuid, group, pids, g.bytes, limit.value_or(0)});
    }
    if (over && options_.action == Action::kKill) {
      const GpuProcess* largest = *std::max_element(
          g.processes.begin(), g.processes.end(), [](const GpuProcess* a, const GpuProcess* b) {
            return a->used_memory_bytes.value_or(0) < b->used_memory_bytes.value_or(0);
          });
      if (killer_(static_cast<pid_t>(largest->pid))) {
        findings.push_back({FindingKind::kKilled,
                            gpu,
                            uuid,
                            group,
                            {largest->pid},
                            largest->used_memory_bytes.value_or(0),
                            *limit});
      }
    }
  }
  // A group with no process left on this GPU is no longer over there.
  for (auto it = over_.begin(); it != over_.end();) {
    if (it->second == uuid && !seen_groups.contains(it->first)) {
      findings.push_back({FindingKind::kBackUnder,
                          gpu,
                          uuid,
                          it->first,
                          {},
                          0,
                          registry_.limit_of(it->first, uuid).value_or(0)});
      it = over_.erase(it);
    } else {
      ++it;
    }
  }
  return findings;
}

}  // namespace gpuslice::daemon
