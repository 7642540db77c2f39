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
  kMig,     // a MIG instance of its own (docs/mig.md)
};

// "shared", "mps", "mig".
inline std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kMps:
      return "mps";
    case Tier::kMig:
      return "mig";
    case Tier::kShared:
      break;
  }
  return "shared";
}

// The tier `name` names; kInvalidArgument for another name.
inline StatusOr<Tier> ParseTier(std::string_view name) {
  if (name == "shared") return Tier::kShared;
  if (name == "mps") return Tier::kMps;
  if (name == "mig") return Tier::kMig;
  return InvalidArgument(R"(tier must be "shared", "mps" or "mig", not ")" + std::string(name) +
                         "\"");
}

}  // namespace gpuslice::daemon
