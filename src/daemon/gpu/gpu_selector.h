// The daemon's one GPU selector grammar (STYLE.md "One way to do a thing"),
// used by the GPU routes (/v1/gpus/{ids}/...) and the MPS manager:
//
//   selector := "all" | item ("," item)*
//   item     := index | uuid          (ASCII whitespace around an item is ignored)
//   index    := decimal NVML index, 0 .. count-1
//   uuid     := a GPU's UUID, any case, with or without its "GPU-" prefix
//
// A pure function over the node's UUIDs (thread-safe).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::daemon {

struct GpuSelectorRules {
  bool allow_all = true;  // whether "all" selects every GPU
  // A GPU named twice: dropped (its first place kept), or InvalidArgument.
  bool reject_duplicates = false;
};

// The NVML indexes `selector` names, in the order given. `uuids[i]` is GPU
// i's UUID. InvalidArgument for an empty item (or "all" where not allowed,
// or a duplicate where rejected), NotFound naming an unknown index or UUID.
StatusOr<std::vector<int>> ParseGpuSelector(std::string_view selector,
                                            const std::vector<std::string>& uuids,
                                            GpuSelectorRules rules = {});

}  // namespace gpuslice::daemon
