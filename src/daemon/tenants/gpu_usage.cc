#include "daemon/tenants/gpu_usage.h"

#include <algorithm>
#include <set>

namespace gpuslice::daemon {

uint32_t WindowAttributionWindows(const std::vector<ProcessUtilization>& samples) {
  std::vector<ProcessUtilization> sorted = samples;
  std::sort(sorted.begin(), sorted.end(),
            [](const ProcessUtilization& a, const ProcessUtilization& b) {
              return a.timestamp_us < b.timestamp_us;
            });
  uint32_t windows = 0;
  uint64_t first_us = 0;
  size_t in_window = 0;
  std::set<uint32_t> pids;
  for (const ProcessUtilization& s : sorted) {
    if (windows == 0 || s.timestamp_us - first_us > kSameWindowUs) {
      ++windows;
      first_us = s.timestamp_us;
      in_window = 0;
    }
    if (++in_window > 1) return 0;  // a window split between processes
    pids.insert(s.pid);
  }
  return windows >= 2 && pids.size() >= 2 ? windows : 0;
}

void GpuUsageCache::Refresh(const Snapshot& snapshot) {
  auto previous = Current();
  auto next = std::make_shared<std::vector<GpuUsage>>();
  for (const GpuInfo& gpu : snapshot.gpus) {
    const GpuUsage* old = nullptr;
    for (const GpuUsage& u : *previous) {
      if (u.index == gpu.index) old = &u;
    }
    GpuUsage usage;
    usage.index = gpu.index;
    usage.uuid = gpu.uuid;
    auto processes = backend_.Processes(gpu.index);
    if (!processes.ok()) {
      if (old != nullptr) next->push_back(*old);
      continue;
    }
    for (const GpuProcess& p : *processes) {
      usage.memory_bytes[p.pid] = p.used_memory_bytes.value_or(0);
    }
    // Utilization: the newest sample per process; a process NVML no longer
    // lists is dropped, one with no new sample keeps its last share.
    uint64_t& since = last_sample_us_[gpu.index];
    if (old != nullptr) {
      for (const auto& [pid, percent] : old->sm_percent) {
        if (usage.memory_bytes.contains(pid)) usage.sm_percent[pid] = percent;
      }
    }
    std::map<uint32_t, uint64_t> newest;
    std::deque<ProcessUtilization>& recent = recent_[gpu.index];
    if (auto samples = backend_.ProcessUtilizationSince(gpu.index, since); samples.ok()) {
      for (const ProcessUtilization& s : *samples) {
        since = std::max(since, s.timestamp_us);
        recent.push_back(s);
        if (s.timestamp_us >= newest[s.pid]) {
          newest[s.pid] = s.timestamp_us;
          usage.sm_percent[s.pid] = s.sm_percent;
        }
      }
    }
    std::erase_if(recent, [&](const ProcessUtilization& s) {
      return s.timestamp_us + kUsageWindowUs <= since;
    });
    // Under window attribution a sample is a whole window's busy time given
    // to one process: a process's share is its part of the windows.
    const std::vector<ProcessUtilization> kept(recent.begin(), recent.end());
    if (const uint32_t windows = WindowAttributionWindows(kept); windows > 0) {
      std::map<uint32_t, uint64_t> sum;
      for (const ProcessUtilization& s : kept) sum[s.pid] += s.sm_percent;
      for (auto& [pid, percent] : usage.sm_percent) percent = 0;
      for (const auto& [pid, total] : sum) {
        if (usage.memory_bytes.contains(pid) || usage.sm_percent.contains(pid)) {
          usage.sm_percent[pid] = static_cast<uint32_t>(total / windows);
        }
      }
    }
    next->push_back(std::move(usage));
  }
  MutexLock lock(mu_);
  current_ = std::move(next);
}

std::shared_ptr<const std::vector<GpuUsage>> GpuUsageCache::Current() const {
  MutexLock lock(mu_);
  return current_;
}

std::vector<GpuUsage> UsageOfEach(const Snapshot& snapshot, const std::vector<GpuUsage>& usage) {
  std::vector<GpuUsage> out;
  out.reserve(snapshot.gpus.size());
  for (const GpuInfo& g : snapshot.gpus) {
    auto it = std::find_if(usage.begin(), usage.end(),
                           [&](const GpuUsage& u) { return u.uuid == g.uuid; });
    out.push_back(it != usage.end() ? *it : GpuUsage{g.index, g.uuid, {}, {}});
  }
  return out;
}

}  // namespace gpuslice::daemon
