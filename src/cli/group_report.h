// A snapshot of one group segment as `gpuslice status` shows it: devices with
// their limits and usage, and the live members with their memory. Reading is
// separate from printing so both can be tested on a segment made in a test.
//
// Thread-compatible values; ReadGroupReport reads shared fields atomically but
// not as one transaction (a member may allocate between two fields).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/registry_view.h"
#include "shm/group_segment.h"

namespace gpuslice::cli {

struct DeviceReport {
  int index;              // in the segment (not a CUDA ordinal)
  std::string uuid;       // "GPU-…"
  uint64_t memory_used;   // bytes
  uint64_t memory_limit;  // bytes; kUnlimitedBytes when unset
  uint64_t memory_peak;
  uint64_t alloc_failures;
  uint32_t compute_limit;  // percent; kUnlimitedPercent when unset
  // What the group controller measured (DeviceCompute): share of the device
  // in the last second, -1 if never measured; estimated device time of one
  // launch (0: not known yet); launches admitted, and those that waited.
  double compute_share_percent = -1;
  int64_t launch_charge_ns = 0;
  uint64_t launches = 0;
  uint64_t throttled_launches = 0;
  uint64_t throttled_ns = 0;
};

struct MemberReport {
  int slot;
  int32_t pid;  // in the member's pid namespace
  std::string name;
  std::vector<uint64_t> memory;  // bytes per device, parallel to GroupReport::devices
  // The registry's tenant this member is (MergeRegistry); absent when no
  // daemon answered or no tenant matches.
  std::optional<RegisteredTenant> tenant;
};

struct GroupReport {
  std::string group;
  std::string path;
  // A process is attached to the group (a limiter holds it open). When none
  // is, how long since the group was last alive (its controller's heartbeat).
  bool live = false;
  int64_t idle_ns = 0;
  // Members evicted from the group's ledger lock for holding it past the
  // deadline (stopped, hung or dead inside; GroupSnapshot::ledger_evictions).
  uint64_t ledger_evictions = 0;
  std::vector<DeviceReport> devices;
  std::vector<MemberReport> members;  // live ones only, by slot
  // The registry's view (MergeRegistry): the group's tier and all its
  // tenants (those no member matched are registered but not attached).
  // Absent when no daemon answered or the registry does not know the group.
  std::optional<RegistryGroup> registry;
};

// What `status` asked the daemon: whether it answered on `socket`, and if not
// why (`error`). `used` is false under --no-daemon (then nothing is shown).
struct DaemonView {
  bool used = false;
  std::string socket;
  bool answered = false;
  std::string error;
  // The socket exists (a daemon is installed): only then does the text say
  // that it did not answer, so a node without a daemon prints as before.
  bool socket_exists = false;
  // Registry groups no segment in the report matched (MergeRegistry's result).
  std::vector<RegistryGroup> registry_only;
};

// Merges the registry into the segment view (`status` with a daemon). The
// segment stays the source of every number; the registry adds who the members
// are. For each report, the registry group of the same id (if any):
//  - a live member (pid as its own namespace numbers it) is the tenant of that
//    group with that host pid, else the only one with that container pid
//    (none or several: unmatched); a tenant matches at most one member;
//  - `registry` gets the registry group (tier, every tenant).
// Returns the registry groups no report has (none of their tenants attached
// to a segment shown, e.g. registered before their first CUDA call).
std::vector<RegistryGroup> MergeRegistry(std::vector<RegistryGroup> registry,
                                         std::vector<GroupReport>& reports);

// Reads `segment` at `now_ns` (CLOCK_MONOTONIC). Only slots that SlotLive()
// reports are members; call ReapDead() first so that dead members' memory is
// not counted in use.
GroupReport ReadGroupReport(const GroupSegment& segment, int64_t now_ns);

// {"groups":[…]} with the fields documented in docs/cli.md ("gpuslice status --json");
// with a `daemon` that was used, also "daemon", the groups' "tier" and
// "tenants", members' "tenant" and "registry_only_groups".
nlohmann::json StatusJson(const std::vector<GroupReport>& groups, const DaemonView& daemon = {});

// "  enforcer GPU 0: memory driver (…); compute limiter (…)\n" per entry.
std::string EnforcerText(const std::vector<GroupEnforcer>& enforcers);

// "45s", "12m", "3h", "2d": an idle time as `status` shows it.
std::string IdleText(int64_t ns);

// A table a person reads: one line per device, one per member; with a
// `daemon` that was used, members' host pids and pods, tenants not attached,
// registry-only groups, and a last line when the daemon's socket exists but
// the daemon did not answer.
std::string StatusText(const std::vector<GroupReport>& groups, const DaemonView& daemon = {});

// "GPU-3430e1f2" from "GPU-3430e1f2-…": the UUID up to its first group.
std::string ShortUuid(const std::string& uuid);

}  // namespace gpuslice::cli
