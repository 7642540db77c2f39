// The devices a CUDA process of the simulation sees, as NVIDIA's driver
// reads CUDA_VISIBLE_DEVICES (CUDA C++ Programming Guide, "CUDA Environment
// Variables"; the MIG user guide, "CUDA Device Enumeration"):
//  - unset: every GPU in index order, a GPU in MIG mode standing for its MIG
//    devices (one per compute instance, in record order);
//  - a comma-separated list of device indices, GPU UUIDs ("GPU-..." or a
//    unique prefix of one) and MIG device UUIDs ("MIG-..."): those, in that
//    order; an index or GPU UUID of a GPU in MIG mode stands for its MIG
//    devices; the first entry that names no device ends the list, and a
//    device named twice is seen once;
//  - at most kMaxDevices devices (the driver's per-device tables).
// Pure: reads the state under the caller's lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/state.h"

namespace gpuslice::sim {

struct VisibleDevice {
  int device = 0;    // index in SimState::devices
  int lane = 0;      // 0: the whole GPU; else its MIG device (mig_state.h MigLane)
  std::string name;  // the GPU's, or "<GPU> MIG 1g.10gb"
  std::string uuid;  // "GPU-..." or "MIG-..."
  uint64_t total_bytes = 0;
  uint32_t sm_count = 0;
};

// `env`: the value of CUDA_VISIBLE_DEVICES, nullptr when unset.
std::vector<VisibleDevice> VisibleDevices(const SimState& s, const char* env);

}  // namespace gpuslice::sim
