// GPU settings the daemon manages (DESIGN.md section 5): their values, their
// names on the API ("power-limit", "gpu-clocks", ...), and JSON both ways.
//
// Values are plain data; everything here is a pure function (thread-safe).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/status.h"
#include "daemon/gpu/compute_mode.h"

namespace gpuslice::daemon {

// The API sets DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED (not the deprecated
// EXCLUSIVE_THREAD, which a GPU may still report).

struct ClockRange {
  uint32_t min_mhz = 0;
  uint32_t max_mhz = 0;
  bool operator==(const ClockRange&) const = default;
};

struct PowerLimit {
  uint32_t milliwatts = 0;
  bool operator==(const PowerLimit&) const = default;
};
// Locked clocks; no range means "not locked" (the driver's default behaviour).
struct GpuClocks {
  std::optional<ClockRange> locked;
  bool operator==(const GpuClocks&) const = default;
};
struct MemoryClocks {
  std::optional<ClockRange> locked;
  bool operator==(const MemoryClocks&) const = default;
};
struct Persistence {
  bool enabled = false;
  bool operator==(const Persistence&) const = default;
};
struct ComputeModeSetting {
  ComputeMode mode = ComputeMode::kDefault;
  bool operator==(const ComputeModeSetting&) const = default;
};

using SettingValue =
    std::variant<PowerLimit, GpuClocks, MemoryClocks, Persistence, ComputeModeSetting>;

// One per alternative of SettingValue, in the same order.
enum class SettingKind : int {
  kPowerLimit = 0,
  kGpuClocks,
  kMemoryClocks,
  kPersistence,
  kComputeMode
};
inline constexpr int kSettingKindCount = 5;

inline SettingKind KindOf(const SettingValue& v) { return static_cast<SettingKind>(v.index()); }

// The API name of a setting: "power-limit", "gpu-clocks", "memory-clocks",
// "persistence", "compute-mode".
std::string_view SettingName(SettingKind kind);
// kInvalidArgument naming the valid settings when `name` is none of them.
StatusOr<SettingKind> ParseSettingName(std::string_view name);

// Parses a PUT body for `kind`:
//   power-limit   {"watts": 300}                (integer or fractional watts)
//   gpu-clocks    {"min_mhz": 1200, "max_mhz": 1500} or {"reset": true}
//   memory-clocks same as gpu-clocks
//   persistence   {"enabled": true}
//   compute-mode  {"mode": "EXCLUSIVE_PROCESS"}  (DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED)
// Unknown keys and the lease keys ("lease_s", "permanent", "holder") are
// handled by the caller: this looks only at the keys above and rejects
// other unknown ones. kInvalidArgument with a message naming the field.
StatusOr<SettingValue> ParseSettingValue(SettingKind kind, const nlohmann::json& body);

// {"watts": 300.0} / {"locked": false} / {"locked": true, "min_mhz": .., "max_mhz": ..} / ...
nlohmann::json SettingValueJson(const SettingValue& value);
// A short human form for logs: "300W", "1200-1500MHz", "unlocked", "on", "EXCLUSIVE_PROCESS".
std::string SettingValueText(const SettingValue& value);

}  // namespace gpuslice::daemon
