// A tenant's isolation tier (DESIGN.md section 5): what the registry asks
// for a group, what the MPS manager grants a tenant, what the API and the
// state store name. One type for all of them.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice::daemon {

enum class Tier {
  kShared,  // time-sliced on the GPU, held by the limiter
  kMps,     // an MPS client of the GPU's MPS server
};

// "shared", "mps".
inline std::string_view TierName(Tier tier) { return tier == Tier::kMps ? "mps" : "shared"; }

// The tier `name` names; kInvalidArgument for another name.
inline StatusOr<Tier> ParseTier(std::string_view name) {
  if (name == "shared") return Tier::kShared;
  if (name == "mps") return Tier::kMps;
  return InvalidArgument(R"(tier must be "shared" or "mps", not ")" + std::string(name) + "\"");
}

}  // namespace gpuslice::daemon
