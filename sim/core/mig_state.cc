#include "sim/core/mig_state.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "sim/core/config.h"

namespace gpuslice::sim {
namespace {

// The lowest id from `first` that no used record of `records` has.
template <typename Record, size_t N>
uint32_t LowestFreeId(const Record (&records)[N], uint32_t first) {
  for (uint32_t id = first;; ++id) {
    const bool taken = std::any_of(std::begin(records), std::end(records),
                                   [id](const Record& r) { return r.used != 0 && r.id == id; });
    if (!taken) return id;
  }
}

// Compute slices [start, start + size) as bits.
uint32_t SliceBits(uint32_t start, uint32_t size) { return ((1u << size) - 1) << start; }

// The compute slices the compute instances of `gi` hold, as bits.
uint32_t TakenComputeSlices(const MigGpuInstanceRecord& gi) {
  uint32_t taken = 0;
  for (const MigComputeInstanceRecord& c : gi.compute) {
    if (c.used != 0) taken |= SliceBits(c.start, c.size);
  }
  return taken;
}

// The used record of `records` with `id`, nullptr if none.
template <typename Record, size_t N>
Record* FindById(Record (&records)[N], uint32_t id) {
  for (Record& r : records) {
    if (r.used != 0 && r.id == id) return &r;
  }
  return nullptr;
}

// A MIG device's UUID: a hash of the GPU's UUID, the instances' ids and the
// count of compute instances the GPU ever created (a re-created instance is
// a new device), in the GPU UUID's form (NVIDIA's derivation is not
// documented).
void MigUuid(const DeviceInfo& gpu, uint32_t gi_id, uint32_t ci_id, uint64_t serial, char* out,
             size_t size) {
  char key[128];
  snprintf(key, sizeof key, "%s/gi%u/ci%u/%llu", gpu.uuid, gi_id, ci_id,
           static_cast<unsigned long long>(serial));
  const uint64_t h = HashConfigText(key);
  const uint64_t l = HashConfigText(std::string(key) + "/low");
  snprintf(out, size, "MIG-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
           static_cast<unsigned>(h >> 16 & 0xffff), static_cast<unsigned>(h & 0xffff),
           static_cast<unsigned>(l >> 48), static_cast<unsigned long long>(l & 0xffffffffffffULL));
}

}  // namespace

uint32_t MigComputeSlices(uint32_t index) {
  switch (index) {
    case kMigCompute1Slice:
      return 1;
    case kMigCompute2Slice:
      return 2;
    case kMigCompute3Slice:
      return 3;
    case kMigCompute4Slice:
      return 4;
    case kMigCompute7Slice:
      return 7;
    default:
      return 0;
  }
}

std::vector<uint32_t> ComputePlacementStarts(uint32_t slices, uint32_t gi_slices) {
  std::vector<uint32_t> starts;
  if (slices == 0) return starts;
  const uint32_t step = std::bit_ceil(slices);
  for (uint32_t start = 0; start + slices <= gi_slices; start += step) starts.push_back(start);
  return starts;
}

const MigGeometry* GeometryOf(const DeviceState& d) {
  return MigGeometryOf(d.info.name, d.info.total_bytes);
}

bool DeviceInUse(const SimState& s, int dev, std::string* by) {
  for (const ContextRecord& c : s.contexts) {
    if (c.status != kContextActive || c.device != dev) continue;
    if (by != nullptr) {
      const ProcessRecord& p = s.processes[c.process_slot];
      *by = "process " + std::to_string(p.pid) + " (" + p.name + ")";
    }
    return true;
  }
  return false;
}

Status SetMigMode(SimState& s, int dev, uint32_t mode) {
  DeviceState& d = s.devices[dev];
  if (GeometryOf(d) == nullptr) {
    return Unimplemented(std::string(d.info.name) + " has no MIG mode");
  }
  if (mode != kMigDisabled && mode != kMigEnabled) {
    return InvalidArgument("MIG mode must be 0 (disabled) or 1 (enabled), not " +
                           std::to_string(mode));
  }
  d.mig_pending_mode = mode;
  if (d.mig_mode == mode) return Status::Ok();
  std::string by;
  if (DeviceInUse(s, dev, &by)) {
    return FailedPrecondition("the GPU is in use by " + by + ": MIG mode " +
                              (mode == kMigEnabled ? "enable" : "disable") + " is pending");
  }
  if (mode == kMigDisabled && !GpuInstanceUses(d).empty()) {
    return FailedPrecondition(
        "the GPU has GPU instances: destroy them first (MIG mode disable "
        "is pending)");
  }
  d.mig_mode = mode;
  return Status::Ok();
}

std::vector<MigInstanceUse> GpuInstanceUses(const DeviceState& d) {
  std::vector<MigInstanceUse> uses;
  const MigGeometry* geometry = GeometryOf(d);
  if (geometry == nullptr) return uses;
  for (const MigGpuInstanceRecord& gi : d.gpu_instances) {
    if (gi.used == 0) continue;
    uses.push_back({geometry->FindByIndex(gi.profile), {gi.start, gi.size}});
  }
  return uses;
}

StatusOr<int> CreateGpuInstance(DeviceState& d, uint32_t index,
                                std::optional<MigPlacement> placement) {
  const MigGeometry* geometry = GeometryOf(d);
  if (geometry == nullptr || d.mig_mode != kMigEnabled) {
    return FailedPrecondition(std::string("MIG mode is not enabled on ") + d.info.name);
  }
  const MigProfile* profile = geometry->FindByIndex(index);
  if (profile == nullptr) {
    return InvalidArgument("the " + std::string(geometry->gpu) + " has no GPU-instance profile " +
                           std::to_string(index));
  }
  const std::vector<MigPlacement> free = FreePlacements(*profile, GpuInstanceUses(d));
  MigPlacement at{};
  if (placement) {
    const std::vector<MigPlacement> possible = PossiblePlacements(*profile);
    if (std::find(possible.begin(), possible.end(), *placement) == possible.end()) {
      return InvalidArgument("a " + std::string(profile->name) + " cannot be placed at slice " +
                             std::to_string(placement->start) + " (size " +
                             std::to_string(placement->size) + ")");
    }
    if (std::find(free.begin(), free.end(), *placement) == free.end()) {
      return ResourceExhausted("memory slices " + std::to_string(placement->start) + ".." +
                               std::to_string(placement->start + placement->size - 1) +
                               " are taken, or no more " + std::string(profile->name) +
                               " instances fit");
    }
    at = *placement;
  } else {
    if (free.empty()) {
      return ResourceExhausted("no free placement for a " + std::string(profile->name));
    }
    at = free.front();
  }
  for (int i = 0; i < kMaxGpuInstances; ++i) {
    MigGpuInstanceRecord& gi = d.gpu_instances[i];
    if (gi.used != 0) continue;
    gi = MigGpuInstanceRecord{};
    gi.id = LowestFreeId(d.gpu_instances, 1);
    gi.used = 1;
    gi.profile = profile->index;
    gi.start = at.start;
    gi.size = at.size;
    return i;
  }
  return ResourceExhausted("no GPU-instance record left");  // 8 memory slices: unreachable
}

MigGpuInstanceRecord* FindGpuInstance(DeviceState& d, uint32_t gi_id) {
  return FindById(d.gpu_instances, gi_id);
}

const MigGpuInstanceRecord* FindGpuInstance(const DeviceState& d, uint32_t gi_id) {
  return FindById(d.gpu_instances, gi_id);
}

Status DestroyGpuInstance(DeviceState& d, uint32_t gi_id) {
  MigGpuInstanceRecord* gi = FindGpuInstance(d, gi_id);
  if (gi == nullptr) return NotFound("no GPU instance " + std::to_string(gi_id));
  const bool has_compute =
      std::any_of(std::begin(gi->compute), std::end(gi->compute),
                  [](const MigComputeInstanceRecord& c) { return c.used != 0; });
  if (has_compute) {
    return FailedPrecondition("GPU instance " + std::to_string(gi_id) +
                              " has compute instances: destroy them first");
  }
  *gi = MigGpuInstanceRecord{};
  return Status::Ok();
}

StatusOr<int> CreateComputeInstance(DeviceState& d, uint32_t gi_id, uint32_t index) {
  MigGpuInstanceRecord* gi = FindGpuInstance(d, gi_id);
  if (gi == nullptr) return NotFound("no GPU instance " + std::to_string(gi_id));
  const MigProfile* profile = GeometryOf(d)->FindByIndex(gi->profile);
  const uint32_t slices = MigComputeSlices(index);
  if (slices == 0 || slices > profile->compute_slices) {
    return InvalidArgument("a " + std::string(profile->name) +
                           " GPU instance has no compute-instance profile " +
                           std::to_string(index));
  }
  for (uint32_t start : FreeComputeStarts(d, *gi, slices)) {
    for (int i = 0; i < kMaxComputeInstances; ++i) {
      MigComputeInstanceRecord& c = gi->compute[i];
      if (c.used != 0) continue;
      c = MigComputeInstanceRecord{};
      c.id = LowestFreeId(gi->compute, 0);
      c.used = 1;
      c.profile = index;
      c.start = start;
      c.size = slices;
      MigUuid(d.info, gi->id, c.id, ++d.mig_created, c.uuid, sizeof c.uuid);
      return i;
    }
  }
  return ResourceExhausted("no free placement for a " + std::to_string(slices) +
                           "-slice compute instance in GPU instance " + std::to_string(gi_id));
}

Status DestroyComputeInstance(SimState& s, int dev, uint32_t gi_id, uint32_t ci_id) {
  DeviceState& d = s.devices[dev];
  MigGpuInstanceRecord* gi = FindGpuInstance(d, gi_id);
  if (gi == nullptr) return NotFound("no GPU instance " + std::to_string(gi_id));
  if (MigComputeInstanceRecord* c = FindById(gi->compute, ci_id); c != nullptr) {
    if (LaneInUse(
            s, dev,
            MigLane(static_cast<int>(gi - d.gpu_instances), static_cast<int>(c - gi->compute)))) {
      return FailedPrecondition("compute instance " + std::to_string(ci_id) +
                                " is in use by a process");
    }
    *c = MigComputeInstanceRecord{};
    return Status::Ok();
  }
  return NotFound("no compute instance " + std::to_string(ci_id) + " in GPU instance " +
                  std::to_string(gi_id));
}

uint32_t GpuInstanceComputeSlices(const DeviceState& d, const MigGpuInstanceRecord& gi) {
  return GeometryOf(d)->FindByIndex(gi.profile)->compute_slices;
}

std::vector<uint32_t> FreeComputeStarts(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                        uint32_t slices) {
  const uint32_t taken = TakenComputeSlices(gi);
  std::vector<uint32_t> free;
  for (uint32_t start : ComputePlacementStarts(slices, GpuInstanceComputeSlices(d, gi))) {
    if ((taken & SliceBits(start, slices)) == 0) free.push_back(start);
  }
  return free;
}

uint32_t ComputeRemainingCapacity(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                  uint32_t slices) {
  uint32_t taken = TakenComputeSlices(gi);
  uint32_t count = 0;
  for (uint32_t start : ComputePlacementStarts(slices, GpuInstanceComputeSlices(d, gi))) {
    if ((taken & SliceBits(start, slices)) != 0) continue;
    taken |= SliceBits(start, slices);
    ++count;
  }
  return count;
}

MigLaneRecords LaneRecords(DeviceState& d, int lane) {
  if (lane <= 0 || lane >= kSchedLanes) return {};
  MigGpuInstanceRecord& gi = d.gpu_instances[(lane - 1) / kMaxComputeInstances];
  MigComputeInstanceRecord& ci = gi.compute[(lane - 1) % kMaxComputeInstances];
  if (gi.used == 0 || ci.used == 0) return {};
  return {&gi, &ci};
}

MigMemory MigDeviceMemory(const SimState& s, int dev, const MigGpuInstanceRecord& gi) {
  const DeviceState& d = s.devices[dev];
  const auto slot = static_cast<int>(&gi - d.gpu_instances);
  MigMemory m;
  m.total_bytes = MigDeviceMemoryBytes(d, gi);
  for (const ContextRecord& c : s.contexts) {
    if (c.status == kContextActive && c.device == dev && c.lane > 0 &&
        (c.lane - 1) / kMaxComputeInstances == slot) {
      m.used_bytes += c.reservation_bytes + c.allocated_bytes;
    }
  }
  m.free_bytes = m.total_bytes - std::min(m.total_bytes, m.used_bytes);
  return m;
}

bool LaneInUse(const SimState& s, int dev, int lane) {
  return std::any_of(std::begin(s.contexts), std::end(s.contexts), [&](const ContextRecord& c) {
    return c.status == kContextActive && c.device == dev && c.lane == lane;
  });
}

std::optional<MigDeviceRef> FindMigDevice(const SimState& s, std::string_view uuid) {
  for (uint32_t dev = 0; dev < s.device_count; ++dev) {
    const DeviceState& d = s.devices[dev];
    for (int g = 0; g < kMaxGpuInstances; ++g) {
      if (d.gpu_instances[g].used == 0) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        const MigComputeInstanceRecord& ci = d.gpu_instances[g].compute[c];
        if (ci.used != 0 && uuid == ci.uuid) return MigDeviceRef{static_cast<int>(dev), g, c};
      }
    }
  }
  return std::nullopt;
}

uint64_t MigDeviceMemoryBytes(const DeviceState& d, const MigGpuInstanceRecord& gi) {
  return MigMemoryBytes(*GeometryOf(d)->FindByIndex(gi.profile), d.info.total_bytes);
}

uint32_t MigDeviceSmCount(const DeviceState& d, const MigGpuInstanceRecord& gi,
                          const MigComputeInstanceRecord& ci) {
  const MigProfile& profile = *GeometryOf(d)->FindByIndex(gi.profile);
  return profile.sm_count * ci.size / profile.compute_slices;
}

std::string MigDeviceProfileName(const DeviceState& d, const MigGpuInstanceRecord& gi,
                                 const MigComputeInstanceRecord& ci) {
  const MigProfile& profile = *GeometryOf(d)->FindByIndex(gi.profile);
  std::string name(profile.name);
  if (ci.size < profile.compute_slices) name = std::to_string(ci.size) + "c." + name;
  return name;
}

}  // namespace gpuslice::sim
