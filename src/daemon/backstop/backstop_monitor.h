// BackstopMonitor: the daemon's memory backstop in operation (DESIGN.md
// section 4, "Backstop"; docs/backstop.md). Each Tick reads the
// compute processes of every GPU from the backend (NVML's host pids and used
// memory, which no tenant can forge), maps them to the registry's groups (a
// tenant's host pid -> its group; a group's memory limit on a GPU is the
// registry's, lowered by its tenants' own requests, as the group controllers
// hold it), and runs MemoryBackstop over them. Each finding is logged
// (event=backstop_<kind>), published (`sink`, SSE event backstop_<kind>) and
// counted (gpuslice_backstop_findings_total{kind}).
//
// A GPU whose processes cannot be read is skipped for that tick. Processes
// for which `is_ignored` holds (MPS servers: NVML charges them their clients'
// memory) are left out.
//
// Thread safety: Tick from one thread (the monitor's); FormatMetrics and
// Count from any.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/backstop/memory_backstop.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

class BackstopMonitor {
 public:
  struct Options {
    MemoryBackstop::Action action = MemoryBackstop::Action::kReport;
    uint64_t allowance_per_process_bytes = 2ull << 20;
    // Processes not to account (nullptr: none).
    std::function<bool(uint32_t pid)> is_ignored;
  };
  using EventSink = std::function<void(std::string_view type, const nlohmann::json& data)>;

  // REQUIRES: `backend` and `registry` outlive the monitor. `killer` is
  // used only with Action::kKill.
  BackstopMonitor(Options options, GpuBackend& backend, const TenantRegistry& registry,
                  MemoryBackstop::Killer killer, EventSink sink);

  // Checks every GPU of `snapshot` once (its index and UUID; the processes
  // are read now); returns the findings (also logged, published, counted).
  std::vector<MemoryBackstop::Finding> Tick(const Snapshot& snapshot);

  uint64_t Count(MemoryBackstop::FindingKind kind) const;
  // Prometheus text: gpuslice_backstop_findings_total{kind="over_limit"|...}.
  std::string FormatMetrics() const;

 private:
  GpuBackend& backend_;
  const TenantRegistry& registry_;
  const EventSink sink_;
  const std::function<bool(uint32_t)> is_ignored_;
  MemoryBackstop backstop_;
  TenantRegistry::View view_;                      // as of the current tick (Tick's thread only)
  std::array<std::atomic<uint64_t>, 4> counts_{};  // by FindingKind
};

// The SSE event / log name of a finding: backstop_over_limit,
// backstop_back_under, backstop_unregistered_process, backstop_killed.
std::string_view BackstopEventName(MemoryBackstop::FindingKind kind);
nlohmann::json FindingJson(const MemoryBackstop::Finding& finding);

// The production killer: SIGKILLs `pid` only while it is the registry's
// tenant (same start time, read after a pidfd to it is opened, so a reused pid
// is never signalled). False when it is not, or the signal fails.
MemoryBackstop::Killer TenantKiller(const TenantRegistry& registry,
                                    std::string proc_root = "/proc");

// Whether /proc/<pid>/comm names an MPS server (nvidia-cuda-mps-server, as
// the kernel cuts it to 15 characters).
bool IsMpsServer(const std::string& proc_root, uint32_t pid);

}  // namespace gpuslice::daemon
