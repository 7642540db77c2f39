// The daemon's side of the node segment (DESIGN.md section 3, docs/daemon.md
// "Node segment"): a monitor Snapshot as the per-GPU status the segment
// publishes.
#pragma once

#include <vector>

#include "daemon/gpu/gpu_monitor.h"
#include "shm/node_segment.h"

namespace gpuslice::daemon {

// One NodeGpu per GPU of `snapshot`, by index. A GPU never read is not
// `valid`; one whose latest read failed keeps its last values, `read_failed`.
std::vector<NodeGpu> NodeGpusOf(const Snapshot& snapshot);

}  // namespace gpuslice::daemon
