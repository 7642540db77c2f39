// MemoryBackstop: the daemon's check of every group's GPU memory against the
// driver's own count (DESIGN.md section 4, "Backstop"; docs/security.md).
//
// The limiter enforces memory limits inside each process, cooperatively: a
// process that bypasses it (no LD_PRELOAD, a static driver, a raw ioctl) is
// not stopped by it. NVML's per-process used memory is counted by the driver
// on the host, where no tenant can forge it. Each sample, the backstop adds
// up what NVML reports for the processes of each registered group on each GPU
// and compares it with the group's limit there, allowing one allocation
// granule per process (the limiter's count and the driver's agree within
// that, DESIGN.md section 8). It reports, edge-triggered:
//  - kOverLimit when a group's driver-counted memory on a GPU exceeds its
//    limit (plus the allowance), kBackUnder when it returns within it;
//  - kUnregistered, once per process, for a process using a GPU that no
//    group claims (it runs outside gpuslice).
// With Action::kKill it also SIGKILLs, while a group is over, the group's
// process that holds the most memory on that GPU (the driver frees its
// memory), one per sample, as the kernel's OOM killer picks its victim.
// Nothing is done silently: every finding and every kill is reported.
//
// Not thread-safe: one instance, called from the daemon's sampling thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

class MemoryBackstop {
 public:
  enum class Action { kReport, kKill };

  struct Options {
    Action action = Action::kReport;
    uint64_t allowance_per_process_bytes = 2ull << 20;  // the allocation granule
  };

  enum class FindingKind { kOverLimit, kBackUnder, kUnregistered, kKilled };
  struct Finding {
    FindingKind kind;
    uint32_t gpu = 0;
    std::string uuid;
    std::string group;           // empty for kUnregistered
    std::vector<uint32_t> pids;  // the group's processes on the GPU (or the one concerned)
    uint64_t used_bytes = 0;     // by the driver's count
    uint64_t limit_bytes = 0;    // the group's limit on the GPU (0 for kUnregistered)
  };

  // What the daemon knows: the group of a host pid (nullopt: not a
  // registered tenant), and a group's memory limit on a GPU (nullopt: none).
  struct Registry {
    std::function<std::optional<std::string>(uint32_t pid)> group_of;
    std::function<std::optional<uint64_t>(const std::string& group, const std::string& uuid)>
        limit_of;
  };
  // Sends SIGKILL to `pid` (kill(2) in production; a fake in tests).
  using Killer = std::function<bool(pid_t pid)>;

  MemoryBackstop(Options options, Registry registry, Killer killer);

  // One sample of GPU `gpu` (`uuid`): its compute processes as NVML lists
  // them. Returns what changed since the previous sample of that GPU.
  std::vector<Finding> Check(uint32_t gpu, const std::string& uuid,
                             const std::vector<GpuProcess>& processes);

  // Groups currently over their limit, as (group, uuid) pairs.
  const std::set<std::pair<std::string, std::string>>& over() const { return over_; }

 private:
  Options options_;
  Registry registry_;
  Killer killer_;
  std::set<std::pair<std::string, std::string>> over_;           // (group, uuid)
  std::map<std::string, std::set<uint32_t>> unregistered_seen_;  // uuid -> pids reported
};

std::string_view FindingKindName(MemoryBackstop::FindingKind kind);

}  // namespace gpuslice::daemon
