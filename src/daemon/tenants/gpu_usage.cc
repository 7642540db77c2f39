#include "daemon/tenants/gpu_usage.h"

#include <algorithm>

namespace gpuslice::daemon {

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
    out.push_back(it != usage.end() ? *it : GpuUsage{g.index, g.uuid, {}});
  }
  return out;
}

}  // namespace gpuslice::daemon
