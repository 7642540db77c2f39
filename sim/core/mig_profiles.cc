#include "sim/core/mig_profiles.h"

#include <algorithm>
#include <array>

namespace gpuslice::sim {
namespace {

// Legal starts, as bits: every memory slice but the last (one-slice
// profiles), even slices (two), halves (four), the whole GPU.
constexpr uint32_t kAnyOfSeven = 0x7f;
constexpr uint32_t kEven = 0x55;
constexpr uint32_t kEvenOfSix = 0x15;
constexpr uint32_t kHalves = 0x11;
constexpr uint32_t kFirst = 0x1;

// NVIDIA MIG user guide, "Supported MIG Profiles": the A100-SXM4-40GB table
// (fractions of memory and SMs, copy engines, media engines, instance
// counts) and the placements `nvidia-smi mig -lgipp` lists for it; SM counts
// are those fractions of the A100's 98 MIG-usable SMs. A 1g.10gb holds two
// memory slices, as its name and its placements' size say. The 80GB model
// has the same geometry under names with twice the memory.
constexpr std::array<MigProfile, 7> kA100_40GB{{
    {kMigProfile1Slice, 19, "1g.5gb", 1, 1, 14, 7, 1, 0, 0, 0, kAnyOfSeven},
    {kMigProfile1SliceRev1, 20, "1g.5gb+me", 1, 1, 14, 1, 1, 1, 1, 1, kAnyOfSeven},
    {kMigProfile1SliceRev2, 15, "1g.10gb", 1, 2, 14, 4, 1, 1, 0, 0, kEven},
    {kMigProfile2Slice, 14, "2g.10gb", 2, 2, 28, 3, 2, 1, 0, 0, kEvenOfSix},
    {kMigProfile3Slice, 9, "3g.20gb", 3, 4, 42, 2, 3, 2, 0, 0, kHalves},
    {kMigProfile4Slice, 5, "4g.20gb", 4, 4, 56, 1, 4, 2, 0, 0, kFirst},
    {kMigProfile7Slice, 0, "7g.40gb", 7, 8, 98, 1, 7, 5, 1, 1, kFirst},
}};
constexpr std::array<MigProfile, 7> kA100_80GB{{
    {kMigProfile1Slice, 19, "1g.10gb", 1, 1, 14, 7, 1, 0, 0, 0, kAnyOfSeven},
    {kMigProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 14, 1, 1, 1, 1, 1, kAnyOfSeven},
    {kMigProfile1SliceRev2, 15, "1g.20gb", 1, 2, 14, 4, 1, 1, 0, 0, kEven},
    {kMigProfile2Slice, 14, "2g.20gb", 2, 2, 28, 3, 2, 1, 0, 0, kEvenOfSix},
    {kMigProfile3Slice, 9, "3g.40gb", 3, 4, 42, 2, 3, 2, 0, 0, kHalves},
    {kMigProfile4Slice, 5, "4g.40gb", 4, 4, 56, 1, 4, 2, 0, 0, kFirst},
    {kMigProfile7Slice, 0, "7g.80gb", 7, 8, 98, 1, 7, 5, 1, 1, kFirst},
}};
// The H100 80GB table of the same section; its SM counts are what
// `nvidia-smi mig -lgip` lists on an H100 SXM5 (132 SMs in all).
constexpr std::array<MigProfile, 7> kH100_80GB{{
    {kMigProfile1Slice, 19, "1g.10gb", 1, 1, 16, 7, 1, 1, 1, 0, kAnyOfSeven},
    {kMigProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 16, 1, 1, 1, 1, 1, kAnyOfSeven},
    {kMigProfile1SliceRev2, 15, "1g.20gb", 1, 2, 26, 4, 1, 1, 1, 0, kEven},
    {kMigProfile2Slice, 14, "2g.20gb", 2, 2, 32, 3, 2, 2, 2, 0, kEvenOfSix},
    {kMigProfile3Slice, 9, "3g.40gb", 3, 4, 60, 2, 3, 3, 3, 0, kHalves},
    {kMigProfile4Slice, 5, "4g.40gb", 4, 4, 64, 1, 4, 4, 4, 0, kFirst},
    {kMigProfile7Slice, 0, "7g.80gb", 7, 8, 132, 1, 7, 7, 7, 1, kFirst},
}};

constexpr MigGeometry kGeometries[] = {
    {"A100 40GB", kA100_40GB},
    {"A100 80GB", kA100_80GB},
    {"H100 80GB", kH100_80GB},
};

// The memory slices an instance occupies, as bits.
uint32_t SliceBits(const MigPlacement& p) { return ((1u << p.size) - 1) << p.start; }

template <typename Match>
const MigProfile* FindIf(std::span<const MigProfile> profiles, Match match) {
  auto it = std::find_if(profiles.begin(), profiles.end(), match);
  return it == profiles.end() ? nullptr : &*it;
}

}  // namespace

const MigProfile* MigGeometry::FindByName(std::string_view name) const {
  if (name.starts_with("MIG ")) name.remove_prefix(4);
  return FindIf(profiles, [&](const MigProfile& p) { return p.name == name; });
}

const MigProfile* MigGeometry::FindByIndex(uint32_t index) const {
  return FindIf(profiles, [&](const MigProfile& p) { return p.index == index; });
}

const MigProfile* MigGeometry::FindById(uint32_t id) const {
  return FindIf(profiles, [&](const MigProfile& p) { return p.id == id; });
}

const MigGeometry* MigGeometryOf(std::string_view device_name, uint64_t total_bytes) {
  constexpr uint64_t kGiB = 1ull << 30;
  if (device_name.find("A100") != std::string_view::npos) {
    return total_bytes <= 48 * kGiB ? &kGeometries[0] : &kGeometries[1];
  }
  // The H100 NVL and 94/96 GB boards have other profiles (1g.12gb, ...).
  if (device_name.find("H100") != std::string_view::npos && total_bytes > 64 * kGiB &&
      total_bytes <= 88 * kGiB) {
    return &kGeometries[2];
  }
  return nullptr;
}

std::vector<MigPlacement> PossiblePlacements(const MigProfile& profile) {
  std::vector<MigPlacement> placements;
  for (uint32_t start = 0; start < kMigMemorySlices; ++start) {
    if ((profile.placement_starts >> start & 1u) != 0) {
      placements.push_back({start, profile.memory_slices});
    }
  }
  return placements;
}

std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         std::span<const MigInstanceUse> existing) {
  uint32_t occupied = 0;
  uint32_t same = 0;
  for (const MigInstanceUse& use : existing) {
    occupied |= SliceBits(use.placement);
    if (use.profile->index == profile.index) ++same;
  }
  if (same >= profile.instance_count) return {};
  std::vector<MigPlacement> free = PossiblePlacements(profile);
  std::erase_if(free, [&](const MigPlacement& p) { return (SliceBits(p) & occupied) != 0; });
  return free;
}

uint32_t RemainingCapacity(const MigProfile& profile, std::span<const MigInstanceUse> existing) {
  std::vector<MigInstanceUse> placed(existing.begin(), existing.end());
  uint32_t more = 0;
  for (;;) {
    const std::vector<MigPlacement> free = FreePlacements(profile, placed);
    if (free.empty()) return more;
    placed.push_back({&profile, free.front()});
    ++more;
  }
}

uint64_t MigMemoryBytes(const MigProfile& profile, uint64_t total_bytes) {
  return total_bytes / kMigMemorySlices * profile.memory_slices;
}

}  // namespace gpuslice::sim
