// The daemon's one compute-mode type (STYLE.md "One way to do a thing"): the
// GPU settings API, the NVML backend, GPU JSON and the MPS manager all use it.
// Values are NVML's (nvmlComputeMode_t). Pure functions (thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice::daemon {

enum class ComputeMode : uint32_t {
  kDefault = 0,
  kExclusiveThread = 1,  // deprecated by NVIDIA; read and round-tripped, never set by the API
  kProhibited = 2,
  kExclusiveProcess = 3,
};

inline constexpr std::array<ComputeMode, 4> kComputeModes = {
    ComputeMode::kDefault, ComputeMode::kExclusiveThread, ComputeMode::kProhibited,
    ComputeMode::kExclusiveProcess};

// "DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS"; "UNKNOWN"
// for a value NVML does not define.
constexpr std::string_view ComputeModeName(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::kDefault:
      return "DEFAULT";
    case ComputeMode::kExclusiveThread:
      return "EXCLUSIVE_THREAD";
    case ComputeMode::kProhibited:
      return "PROHIBITED";
    case ComputeMode::kExclusiveProcess:
      return "EXCLUSIVE_PROCESS";
  }
  return "UNKNOWN";
}

// The inverse of ComputeModeName (all four); InvalidArgument for anything else.
inline StatusOr<ComputeMode> ParseComputeMode(std::string_view name) {
  for (ComputeMode m : kComputeModes) {
    if (ComputeModeName(m) == name) return m;
  }
  return InvalidArgument("unknown compute mode \"" + std::string(name) + "\"");
}

}  // namespace gpuslice::daemon
