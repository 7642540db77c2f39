#include "daemon/gpu/node_gpus.h"

namespace gpuslice::daemon {
namespace {

NodeMps MpsOf(const std::string& mps) {
  if (mps == "on") return NodeMps::kOn;
  if (mps == "restarting") return NodeMps::kRestarting;
  return NodeMps::kOff;
}

}  // namespace

std::vector<NodeGpu> NodeGpusOf(const Snapshot& snapshot) {
  std::vector<NodeGpu> gpus;
  gpus.reserve(snapshot.gpus.size());
  for (size_t i = 0; i < snapshot.gpus.size(); ++i) {
    const GpuInfo& g = snapshot.gpus[i];
    const GpuReadState read = i < snapshot.reads.size() ? snapshot.reads[i] : GpuReadState{};
    NodeGpu n;
    n.index = g.index;
    n.valid = read.read_ns != 0;
    n.uuid = g.uuid;
    n.name = g.name;
    n.memory_total_bytes = g.memory_total_bytes;
    n.memory_used_bytes = g.memory_used_bytes;
    n.memory_free_bytes = g.memory_free_bytes;
    n.sm_utilization_percent = g.utilization_gpu_percent;
    n.memory_utilization_percent = g.utilization_memory_percent;
    n.power_draw_mw = g.power_draw_mw;
    n.power_limit_mw = g.power_limit_mw;
    n.temperature_c = g.temperature_c;
    n.sm_clock_mhz = g.sm_clock_mhz;
    n.compute_mode = static_cast<uint32_t>(g.compute_mode);  // the segment holds NVML's value
    n.mps = MpsOf(g.mps);
    n.sampled_ns = read.read_ns;
    n.read_failed = read.failed;
    gpus.push_back(std::move(n));
  }
  return gpus;
}

}  // namespace gpuslice::daemon
