// The MIG geometry of the simulated GPUs: the GPU-instance profiles that
// NVIDIA's MIG user guide lists ("Supported MIG Profiles") for the A100 40GB,
// the A100 80GB and the H100 80GB, where each may be placed, and which
// placements are free beside the instances a GPU already has. Pure data and
// arithmetic: which instances exist is the simulation's state.
//
// Placements follow NVML's documented model
// (nvmlDeviceGetGpuInstancePossiblePlacements_v2): a GPU instance occupies
// `size` consecutive memory slices from `start`, of the GPU's eight, and a
// new instance fails if it would overlap an occupied slice. A profile also
// has an instance count (nvmlGpuInstanceProfileInfo_t::instanceCount) that no
// placement may exceed; a media-extension ("+me") profile has one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gpuslice::sim {

inline constexpr uint32_t kMigMemorySlices = 8;
inline constexpr uint32_t kMigComputeSlices = 7;

// NVML's GPU-instance profile indices (NVML_GPU_INSTANCE_PROFILE_*), the
// argument of nvmlDeviceGetGpuInstanceProfileInfo.
enum MigProfileIndex : uint32_t {
  kMigProfile1Slice = 0x0,
  kMigProfile2Slice = 0x1,
  kMigProfile3Slice = 0x2,
  kMigProfile4Slice = 0x3,
  kMigProfile7Slice = 0x4,
  kMigProfile1SliceRev1 = 0x7,  // one compute slice with the media extensions ("+me")
  kMigProfile1SliceRev2 = 0x9,  // one compute slice with two memory slices
};

// Memory slices [start, start + size).
struct MigPlacement {
  uint32_t start;
  uint32_t size;
  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};

struct MigProfile {
  MigProfileIndex index;
  uint32_t id;              // nvmlGpuInstanceProfileInfo_t::id: what `nvidia-smi mig -lgip` lists
  std::string_view name;    // without "MIG ", e.g. "1g.10gb+me"
  uint32_t compute_slices;  // of kMigComputeSlices (sliceCount)
  uint32_t memory_slices;   // of kMigMemorySlices: every placement's size
  uint32_t sm_count;        // multiprocessorCount
  uint32_t instance_count;  // at most this many at once
  uint32_t copy_engines;
  uint32_t decoders, jpegs, ofas;  // media engines (NVDEC, NVJPG, OFA)
  uint32_t placement_starts;       // bit s: a placement may start at memory slice s
};

// One GPU model's profiles, smallest first (as nvidia-smi lists them).
struct MigGeometry {
  std::string_view gpu;  // e.g. "H100 80GB"
  std::span<const MigProfile> profiles;

  // By name ("1g.10gb"; a leading "MIG " is allowed), NVML index or
  // nvidia-smi id; nullptr when the GPU has no such profile.
  const MigProfile* FindByName(std::string_view name) const;
  const MigProfile* FindByIndex(uint32_t index) const;
  const MigProfile* FindById(uint32_t id) const;
};

// The geometry of a device by its NVML name and memory: A100 (40 or 80 GB)
// and H100 with 80 GB; nullptr for a GPU that has no MIG mode here.
const MigGeometry* MigGeometryOf(std::string_view device_name, uint64_t total_bytes);

// A GPU instance a device has: its profile and where it sits.
struct MigInstanceUse {
  const MigProfile* profile;
  MigPlacement placement;
};

// Every placement `profile` may take (nvmlDeviceGetGpuInstancePossiblePlacements_v2),
// by start.
std::vector<MigPlacement> PossiblePlacements(const MigProfile& profile);

// The placements of `profile` that are free beside `existing`, by start:
// none overlaps an existing instance's slices, and none while the profile's
// instance count is reached.
std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         std::span<const MigInstanceUse> existing);

// How many more instances of `profile` fit beside `existing`, placed one
// after another at the lowest free start (nvmlDeviceGetGpuInstanceRemainingCapacity).
uint32_t RemainingCapacity(const MigProfile& profile, std::span<const MigInstanceUse> existing);

// An instance's device memory: its memory slices' share of the GPU's.
uint64_t MigMemoryBytes(const MigProfile& profile, uint64_t total_bytes);

}  // namespace gpuslice::sim
