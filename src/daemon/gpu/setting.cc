#include "daemon/gpu/setting.h"

#include <array>
#include <cmath>
#include <set>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, kSettingKindCount> kSettingNames = {
    "power-limit", "gpu-clocks", "memory-clocks", "persistence", "compute-mode"};

// kInvalidArgument unless every key of `body` is in `allowed` (or a lease key).
Status CheckKeys(const json& body, std::string_view setting, const std::set<std::string>& allowed) {
  static const std::set<std::string> kLeaseKeys = {"lease_s", "permanent", "holder"};
  for (const auto& [key, unused] : body.items()) {
    if (allowed.count(key) == 0 && kLeaseKeys.count(key) == 0) {
      return InvalidArgument("unknown field \"" + key + "\" for " + std::string(setting));
    }
  }
  return Status::Ok();
}

StatusOr<uint32_t> PositiveMhz(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end()) return InvalidArgument(std::string("missing field \"") + key + "\"");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > 100000) {
    return InvalidArgument(std::string("\"") + key + "\" must be a positive integer (MHz)");
  }
  return static_cast<uint32_t>(it->get<int64_t>());
}

StatusOr<std::optional<ClockRange>> ParseClocks(const json& body, std::string_view setting) {
  GS_RETURN_IF_ERROR(CheckKeys(body, setting, {"min_mhz", "max_mhz", "reset"}));
  if (auto it = body.find("reset"); it != body.end()) {
    if (!it->is_boolean() || !it->get<bool>()) {
      return InvalidArgument("\"reset\" must be true (use min_mhz/max_mhz to lock)");
    }
    if (body.contains("min_mhz") || body.contains("max_mhz")) {
      return InvalidArgument("\"reset\" excludes min_mhz/max_mhz");
    }
    return std::optional<ClockRange>();
  }
  GS_ASSIGN_OR_RETURN(uint32_t min_mhz, PositiveMhz(body, "min_mhz"));
  GS_ASSIGN_OR_RETURN(uint32_t max_mhz, PositiveMhz(body, "max_mhz"));
  if (min_mhz > max_mhz) {
    return InvalidArgument("min_mhz (" + std::to_string(min_mhz) + ") is above max_mhz (" +
                           std::to_string(max_mhz) + ")");
  }
  return std::optional<ClockRange>(ClockRange{min_mhz, max_mhz});
}

std::string RangeText(const std::optional<ClockRange>& r) {
  if (!r) return "unlocked";
  return std::to_string(r->min_mhz) + "-" + std::to_string(r->max_mhz) + "MHz";
}

json RangeJson(const std::optional<ClockRange>& r) {
  if (!r) return {{"locked", false}};
  return {{"locked", true}, {"min_mhz", r->min_mhz}, {"max_mhz", r->max_mhz}};
}

// The compute modes the API sets (setting.h).
StatusOr<ComputeMode> ParseApiComputeMode(std::string_view name) {
  auto mode = ParseComputeMode(name);
  if (!mode.ok() || *mode == ComputeMode::kExclusiveThread) {
    return InvalidArgument("unknown compute mode \"" + std::string(name) +
                           "\" (valid: DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED)");
  }
  return mode;
}

}  // namespace

std::string_view SettingName(SettingKind kind) { return kSettingNames[static_cast<int>(kind)]; }

StatusOr<SettingKind> ParseSettingName(std::string_view name) {
  for (int i = 0; i < kSettingKindCount; ++i) {
    if (kSettingNames[i] == name) return static_cast<SettingKind>(i);
  }
  return InvalidArgument("unknown setting \"" + std::string(name) +
                         "\" (valid: power-limit, gpu-clocks, memory-clocks, persistence, "
                         "compute-mode)");
}

StatusOr<SettingValue> ParseSettingValue(SettingKind kind, const json& body) {
  const std::string_view name = SettingName(kind);
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  switch (kind) {
    case SettingKind::kPowerLimit: {
      GS_RETURN_IF_ERROR(CheckKeys(body, name, {"watts"}));
      auto it = body.find("watts");
      if (it == body.end()) return InvalidArgument("missing field \"watts\"");
      if (!it->is_number()) return InvalidArgument("\"watts\" must be a number");
      const double watts = it->get<double>();
      if (!std::isfinite(watts) || watts <= 0 || watts > 100000) {
        return InvalidArgument("\"watts\" must be a positive number of watts");
      }
      return SettingValue(PowerLimit{static_cast<uint32_t>(std::lround(watts * 1000))});
    }
    case SettingKind::kGpuClocks: {
      GS_ASSIGN_OR_RETURN(auto range, ParseClocks(body, name));
      return SettingValue(GpuClocks{range});
    }
    case SettingKind::kMemoryClocks: {
      GS_ASSIGN_OR_RETURN(auto range, ParseClocks(body, name));
      return SettingValue(MemoryClocks{range});
    }
    case SettingKind::kPersistence: {
      GS_RETURN_IF_ERROR(CheckKeys(body, name, {"enabled"}));
      auto it = body.find("enabled");
      if (it == body.end() || !it->is_boolean()) {
        return InvalidArgument("\"enabled\" must be true or false");
      }
      return SettingValue(Persistence{it->get<bool>()});
    }
    case SettingKind::kComputeMode: {
      GS_RETURN_IF_ERROR(CheckKeys(body, name, {"mode"}));
      auto it = body.find("mode");
      if (it == body.end() || !it->is_string()) {
        return InvalidArgument(
            "\"mode\" must be a string: DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED");
      }
      GS_ASSIGN_OR_RETURN(ComputeMode mode, ParseApiComputeMode(it->get<std::string>()));
      return SettingValue(ComputeModeSetting{mode});
    }
  }
  return Internal("unhandled setting kind");
}

json SettingValueJson(const SettingValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, PowerLimit>) {
          return {{"watts", v.milliwatts / 1000.0}};
        } else if constexpr (std::is_same_v<T, GpuClocks> || std::is_same_v<T, MemoryClocks>) {
          return RangeJson(v.locked);
        } else if constexpr (std::is_same_v<T, Persistence>) {
          return {{"enabled", v.enabled}};
        } else {
          return {{"mode", ComputeModeName(v.mode)}};
        }
      },
      value);
}

std::string SettingValueText(const SettingValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, PowerLimit>) {
          char buf[32];
          snprintf(buf, sizeof buf, "%gW", v.milliwatts / 1000.0);
          return buf;
        } else if constexpr (std::is_same_v<T, GpuClocks> || std::is_same_v<T, MemoryClocks>) {
          return RangeText(v.locked);
        } else if constexpr (std::is_same_v<T, Persistence>) {
          return v.enabled ? "on" : "off";
        } else {
          return std::string(ComputeModeName(v.mode));
        }
      },
      value);
}

}  // namespace gpuslice::daemon
