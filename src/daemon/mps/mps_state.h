// MpsState: what the MPS manager saves in <root>/state.json, and its JSON text
// both ways (DESIGN.md section 5). A pure value: no files, no daemons; the
// manager reads and writes the file through its MpsHost.
//
// The file holds the tenants (tier, reason, GPUs, settings) and, per GPU with
// a control daemon, what a restarted gpusliced needs to re-adopt or stop it
// and to restore the GPU: the daemon's pid, the compute mode to restore, the
// restart count, the MPS protocol it was started with, and its tenants.
//
// Thread safety: a plain value; the functions are pure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/mps/mps_host.h"
#include "daemon/tier.h"

namespace gpuslice::daemon::mps {

// Per-tenant MPS settings, applied through the client environment.
struct TenantSettings {
  std::optional<uint32_t> active_thread_percentage = std::nullopt;  // 1..100
  std::optional<uint64_t> pinned_memory_limit = std::nullopt;       // bytes per device, > 0
  std::optional<int> client_priority = std::nullopt;  // 0 (normal) or 1 (below normal)
  // MPS v3 only: a static SM partition of this share of each GPU's SMs
  // (rounded down to whole chunks, at least one) that the tenant's clients
  // run on (docs/mps.md "SM partitions"). 1..100.
  std::optional<uint32_t> sm_partition_percent = std::nullopt;
  bool operator==(const TenantSettings&) const = default;
};

// One GPU as the manager refers to it: NVML index and UUID.
struct GpuRef {
  int index = 0;
  std::string uuid;
  bool operator==(const GpuRef&) const = default;
};

struct MpsState {
  // The only version Parse accepts and Serialise writes.
  static constexpr int kVersion = 1;

  struct TenantRecord {
    std::string name;
    Tier tier = Tier::kShared;
    std::string reason;
    std::vector<GpuRef> gpus;
    TenantSettings settings;
    bool operator==(const TenantRecord&) const = default;
  };
  struct GpuRecord {
    int index = 0;
    std::string uuid;
    pid_t control_pid = 0;  // 0 while not running
    ComputeMode previous_mode = ComputeMode::kDefault;
    int restarts = 0;
    int protocol = 2;                  // absent in files written before MPS v3: 2
    std::vector<std::string> tenants;  // sorted, no duplicates
    bool operator==(const GpuRecord&) const = default;
  };

  std::vector<TenantRecord> tenants;
  std::vector<GpuRecord> gpus;

  // InvalidArgument ("unknown version N", or "corrupt: <why>") for text that
  // is not a whole state of version kVersion; nothing partial is returned.
  static StatusOr<MpsState> Parse(std::string_view text);
  // Pretty-printed JSON ending in a newline; Parse(Serialise()) == *this.
  std::string Serialise() const;

  bool operator==(const MpsState&) const = default;
};

}  // namespace gpuslice::daemon::mps
