// Lease records: the durable form of GpuManager's lease stacks, saved in the
// state directory as record "leases" (docs/daemon.md, "State") so that a
// daemon restarted after a crash keeps what it promised and reverts what has
// expired.
//
// The record's data (inside StateStore's envelope, which carries the format
// version):
//   {"stacks": [
//     {"gpu_uuid": "GPU-...", "gpu_index": 0, "setting": "power-limit",
//      "baseline": {"milliwatts": 700000},
//      "leases": [{"holder": "uid:0", "value": {"milliwatts": 300000},
//                  "expires_at_ns": 1790000000000000000,
//                  "lease_ns": 600000000000, "boot_id": "…",
//                  "expires_mono_ns": 86400000000000}]}]}
// Invariants a parsed record satisfies (anything else is refused whole):
//  1. at most one stack per (gpu_uuid, setting);
//  2. every value and the baseline are of the stack's setting;
//  3. at most one lease per holder in a stack; leases are oldest first, the
//     last one is the value the device shows;
//  4. a stack with no leases means "the device goes back to the baseline"
//     (a revert that was saved but maybe not applied when the daemon died).
// Values are exact integers: power {"milliwatts"}, clocks {"locked": null} or
// {"locked": {"min_mhz", "max_mhz"}}, persistence {"enabled"}, compute mode
// {"mode": "EXCLUSIVE_PROCESS"}. Expiries are CLOCK_REALTIME nanoseconds
// (null: held until released). Optional (records from before they existed
// have none): "lease_ns", the duration the lease was granted for, which caps
// what a restore after a reboot may give it (a wall clock stepped back must
// not lengthen a lease); "boot_id" and "expires_mono_ns", the same expiry on
// CLOCK_MONOTONIC of that boot, which a restore in the same boot uses instead
// of the wall clock; "kept": true for a lease the daemon's stop leaves
// (GpuManager rule 12).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/gpu/setting.h"

namespace gpuslice::daemon {

// The StateStore record that holds the leases.
inline constexpr std::string_view kLeaseRecordName = "leases";

struct LeaseEntry {
  std::string holder;
  SettingValue value;
  std::optional<int64_t> expires_at_ns;                   // CLOCK_REALTIME; none: no expiry
  std::optional<int64_t> lease_ns = std::nullopt;         // the granted duration, when known
  std::string boot_id = {};                               // empty: unknown
  std::optional<int64_t> expires_mono_ns = std::nullopt;  // CLOCK_MONOTONIC of boot boot_id
  bool kept = false;                                      // GpuManager rule 12

  bool operator==(const LeaseEntry&) const = default;
};

struct LeaseStackRecord {
  std::string gpu_uuid;    // identifies the GPU (indices change between boots)
  uint32_t gpu_index = 0;  // where it was, for people reading the file
  SettingKind kind = SettingKind::kPowerLimit;
  SettingValue baseline;           // the value before the first lease
  std::vector<LeaseEntry> leases;  // oldest first; back() is on the device

  bool operator==(const LeaseStackRecord&) const = default;
};

nlohmann::json LeaseRecordsJson(const std::vector<LeaseStackRecord>& stacks);

// kInvalidArgument naming the first field that breaks the format or an
// invariant above; nothing is returned from a record that does.
StatusOr<std::vector<LeaseStackRecord>> ParseLeaseRecords(const nlohmann::json& data);

// This boot's id, read from `path` (one line); empty when it cannot be read.
std::string ReadBootId(const std::string& path = "/proc/sys/kernel/random/boot_id");

}  // namespace gpuslice::daemon
