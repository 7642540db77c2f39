#include "sim/core/visible_devices.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "sim/core/mig_state.h"

namespace gpuslice::sim {
namespace {

VisibleDevice WholeGpu(const SimState& s, int dev) {
  const DeviceInfo& info = s.devices[dev].info;
  return {dev, 0, info.name, info.uuid, info.total_bytes, info.sm_count};
}

VisibleDevice MigDevice(const SimState& s, int dev, int gi, int ci) {
  const DeviceState& d = s.devices[dev];
  const MigGpuInstanceRecord& g = d.gpu_instances[gi];
  const MigComputeInstanceRecord& c = g.compute[ci];
  return {dev,
          MigLane(gi, ci),
          std::string(d.info.name) + " MIG " + MigDeviceProfileName(d, g, c),
          c.uuid,
          MigDeviceMemoryBytes(d, g),
          MigDeviceSmCount(d, g, c)};
}

// GPU `dev` as CUDA sees it: itself, or in MIG mode its MIG devices.
void AddGpu(const SimState& s, int dev, std::vector<VisibleDevice>* out) {
  const DeviceState& d = s.devices[dev];
  if (d.mig_mode != kMigEnabled) {
    out->push_back(WholeGpu(s, dev));
    return;
  }
  for (int gi = 0; gi < kMaxGpuInstances; ++gi) {
    if (d.gpu_instances[gi].used == 0) continue;
    for (int ci = 0; ci < kMaxComputeInstances; ++ci) {
      if (d.gpu_instances[gi].compute[ci].used != 0) out->push_back(MigDevice(s, dev, gi, ci));
    }
  }
}

// The GPU an index or a GPU UUID (or a unique prefix of one) names; -1 if none.
int FindGpu(const SimState& s, std::string_view entry) {
  char* end = nullptr;
  const std::string text(entry);
  const long index = strtol(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0') {
    return index >= 0 && index < static_cast<long>(s.device_count) ? static_cast<int>(index) : -1;
  }
  if (entry.substr(0, 4) != "GPU-") return -1;
  int found = -1;
  for (uint32_t dev = 0; dev < s.device_count; ++dev) {
    if (std::string_view(s.devices[dev].info.uuid).substr(0, entry.size()) != entry) continue;
    if (found >= 0) return -1;  // ambiguous
    found = static_cast<int>(dev);
  }
  return found;
}

}  // namespace

std::vector<VisibleDevice> VisibleDevices(const SimState& s, const char* env) {
  std::vector<VisibleDevice> out;
  if (env == nullptr) {
    for (uint32_t dev = 0; dev < s.device_count; ++dev) AddGpu(s, static_cast<int>(dev), &out);
  } else {
    std::string_view rest(env);
    for (;;) {
      const size_t comma = rest.find(',');
      std::string_view entry = rest.substr(0, comma);
      while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
      while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
      std::vector<VisibleDevice> named;
      if (entry.substr(0, 4) == "MIG-") {
        const auto mig = FindMigDevice(s, entry);
        if (mig) named.push_back(MigDevice(s, mig->device, mig->gi, mig->ci));
      } else if (const int dev = FindGpu(s, entry); dev >= 0) {
        AddGpu(s, dev, &named);
      }
      if (named.empty()) break;  // the first entry that names no device ends the list
      for (VisibleDevice& v : named) {
        const bool seen = std::any_of(out.begin(), out.end(), [&](const VisibleDevice& o) {
          return o.device == v.device && o.lane == v.lane;
        });
        if (!seen) out.push_back(std::move(v));
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (out.size() > static_cast<size_t>(kMaxDevices)) out.resize(kMaxDevices);
  return out;
}

}  // namespace gpuslice::sim
