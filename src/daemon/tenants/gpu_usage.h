// GpuUsageCache: what the driver says each process uses on each GPU (NVML's
// per-process memory and SM utilization, in host pids), refreshed on the
// monitor thread after each GPU sample so that GET /v1/tenants and /metrics
// read it without an NVML call per request.
//
// Thread safety: Refresh from one thread (the monitor's); Current from any.
#pragma once

#include <cstdint>
#include <deque>
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
  // host pid -> its SM share: its latest sample's, or under window
  // attribution (below) its samples' sum over the windows of the last
  // kUsageWindowUs.
  std::map<uint32_t, uint32_t> sm_percent;
};

// Samples less than this apart belong to the same NVML window.
inline constexpr uint64_t kSameWindowUs = 20'000;

// The number of NVML windows `samples` cover if they are window-attributed
// (every window with one sample, two processes or more, two windows or more:
// NVML on an H100 with driver r580 with time-sliced contexts; a process's
// share is then its samples' sum over the windows, as one sample stands for
// a whole window's busy time); 0 otherwise (each process's own part of each
// window: a process's share is the mean of its samples).
uint32_t WindowAttributionWindows(const std::vector<ProcessUtilization>& samples);

class GpuUsageCache {
 public:
  // REQUIRES: `backend` outlives the cache.
  explicit GpuUsageCache(GpuBackend& backend) : backend_(backend) {}

  // Reads the processes and the new utilization samples of every GPU of
  // `snapshot`. A GPU whose read fails keeps its previous entry.
  void Refresh(const Snapshot& snapshot);
  // The latest refresh (empty before the first).
  std::shared_ptr<const std::vector<GpuUsage>> Current() const;

 private:
  // The samples a window-attributed share is taken over (the newest's last second).
  static constexpr uint64_t kUsageWindowUs = 1'000'000;

  GpuBackend& backend_;
  std::map<uint32_t, uint64_t> last_sample_us_;  // per GPU; Refresh's thread only
  // Per GPU, the samples of the last kUsageWindowUs; Refresh's thread only.
  std::map<uint32_t, std::deque<ProcessUtilization>> recent_;
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<GpuUsage>> current_ GUARDED_BY(mu_) =
      std::make_shared<const std::vector<GpuUsage>>();
};

// One entry per GPU of `snapshot`, in its order: the cached usage, or an
// empty one for a GPU whose processes were not read yet.
std::vector<GpuUsage> UsageOfEach(const Snapshot& snapshot, const std::vector<GpuUsage>& usage);

}  // namespace gpuslice::daemon
