#include "daemon/tenants/gpu_usage.h"

#include <algorithm>

namespace gpuslice::daemon {

void GpuUsageCache::Refresh(const std::vector<GpuProcessReading>& readings) {
  auto previous = Current();
  auto next = std::make_shared<std::vector<GpuUsage>>();
  for (const GpuProcessReading& r : readings) {
    if (!r.processes) {
      auto old = std::find_if(previous->begin(), previous->end(),
                              [&](const GpuUsage& u) { return u.index == r.index; });
      if (old != previous->end()) next->push_back(*old);
      continue;
    }
    GpuUsage& usage = next->emplace_back();
    usage.index = r.index;
    usage.uuid = r.uuid;
    for (const GpuProcess& p : *r.processes) {
      usage.memory_bytes[p.pid] = p.used_memory_bytes.value_or(0);
    }
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
