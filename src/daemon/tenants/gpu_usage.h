// GpuUsageCache: the memory the driver says each process uses on each GPU
// (NVML's process list, in host pids), kept from the backstop's reading of
// each monitor tick (BackstopMonitor::Tick, the one reader of that list) so
// that GET /v1/tenants and /metrics read it without an NVML call per request. Compute shares are
// not here: they are the group control's (docs/scheduling.md "Evidence"), never NVML's per-process
// samples.
//
// Thread safety: Refresh from one thread (the monitor's); Current from any.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_monitor.h"

namespace gpuslice::daemon {

struct GpuUsage {
  uint32_t index = 0;
  std::string uuid;
  std::map<uint32_t, uint64_t> memory_bytes;  // host pid -> used (pids NVML lists)
};

class GpuUsageCache {
 public:
  // One entry per reading, in its order; a GPU whose processes could not be
  // read keeps its previous entry (none before its first read).
  void Refresh(const std::vector<GpuProcessReading>& readings);
  // The latest refresh (empty before the first).
  std::shared_ptr<const std::vector<GpuUsage>> Current() const;

 private:
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<GpuUsage>> current_ GUARDED_BY(mu_) =
      std::make_shared<const std::vector<GpuUsage>>();
};

// One entry per GPU of `snapshot`, in its order: the cached usage, or an
// empty one for a GPU whose processes were not read yet.
std::vector<GpuUsage> UsageOfEach(const Snapshot& snapshot, const std::vector<GpuUsage>& usage);

}  // namespace gpuslice::daemon
