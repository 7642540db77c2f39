#include "sim/core/mig_profiles.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::sim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

const MigGeometry& H100() {
  const MigGeometry* g = MigGeometryOf("NVIDIA H100 80GB HBM3", 80 * kGiB);
  EXPECT_NE(g, nullptr);
  return *g;
}

MigInstanceUse Use(const MigGeometry& g, std::string_view name, uint32_t start) {
  const MigProfile* p = g.FindByName(name);
  EXPECT_NE(p, nullptr) << name;
  return {p, {start, p->memory_slices}};
}

TEST(MigProfilesTest, EachGpuModelHasItsOwnTable) {
  EXPECT_EQ(MigGeometryOf("NVIDIA H100 80GB HBM3", 80 * kGiB)->gpu, "H100 80GB");
  EXPECT_EQ(MigGeometryOf("NVIDIA A100-SXM4-40GB", 40 * kGiB)->gpu, "A100 40GB");
  EXPECT_EQ(MigGeometryOf("NVIDIA A100-SXM4-80GB", 80 * kGiB)->gpu, "A100 80GB");
  EXPECT_EQ(MigGeometryOf("NVIDIA H100 NVL", 94 * kGiB), nullptr);  // other profiles
  EXPECT_EQ(MigGeometryOf("NVIDIA L40S", 48 * kGiB), nullptr);      // no MIG
  EXPECT_NE(MigGeometryOf("NVIDIA A100-SXM4-40GB", 40 * kGiB)->FindByName("1g.5gb"), nullptr);
  EXPECT_EQ(MigGeometryOf("NVIDIA A100-SXM4-80GB", 80 * kGiB)->FindByName("1g.5gb"), nullptr);
}

TEST(MigProfilesTest, ProfilesAreFoundByNameIndexAndId) {
  const MigGeometry& g = H100();
  const MigProfile* p = g.FindByName("MIG 3g.40gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->id, 9u);
  EXPECT_EQ(p->index, kMigProfile3Slice);
  EXPECT_EQ(p->sm_count, 60u);
  EXPECT_EQ(g.FindByIndex(kMigProfile3Slice), p);
  EXPECT_EQ(g.FindById(9), p);
  EXPECT_EQ(g.FindByName("3g.41gb"), nullptr);
  EXPECT_EQ(g.FindById(99), nullptr);
  EXPECT_EQ(MigMemoryBytes(*p, 80 * kGiB), 40 * kGiB);
  EXPECT_EQ(MigMemoryBytes(*g.FindByName("1g.10gb"), 80 * kGiB), 10 * kGiB);
}

// Every table is consistent: placements inside the GPU, instance counts that
// the placements allow, compute slices within seven.
TEST(MigProfilesTest, EveryTableIsConsistent) {
  for (const auto* g : {MigGeometryOf("A100-SXM4-40GB", 40 * kGiB),
                        MigGeometryOf("A100-SXM4-80GB", 80 * kGiB), &H100()}) {
    ASSERT_NE(g, nullptr);
    for (const MigProfile& p : g->profiles) {
      SCOPED_TRACE(std::string(g->gpu) + " " + std::string(p.name));
      EXPECT_LE(p.compute_slices, kMigComputeSlices);
      const std::vector<MigPlacement> all = PossiblePlacements(p);
      ASSERT_FALSE(all.empty());
      for (const MigPlacement& pl : all) EXPECT_LE(pl.start + pl.size, kMigMemorySlices);
      EXPECT_EQ(RemainingCapacity(p, {}), p.instance_count);
    }
  }
}

TEST(MigProfilesTest, PlacementsAreNvidiasList) {
  const MigGeometry& g = H100();
  EXPECT_EQ(PossiblePlacements(*g.FindByName("1g.10gb")).size(), 7u);
  EXPECT_EQ(PossiblePlacements(*g.FindByName("1g.20gb")),
            (std::vector<MigPlacement>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(PossiblePlacements(*g.FindByName("2g.20gb")),
            (std::vector<MigPlacement>{{0, 2}, {2, 2}, {4, 2}}));
  EXPECT_EQ(PossiblePlacements(*g.FindByName("3g.40gb")),
            (std::vector<MigPlacement>{{0, 4}, {4, 4}}));
  EXPECT_EQ(PossiblePlacements(*g.FindByName("7g.80gb")), (std::vector<MigPlacement>{{0, 8}}));
}

TEST(MigProfilesTest, AnOccupiedSliceTakesThePlacementsThatOverlapIt) {
  const MigGeometry& g = H100();
  const std::vector<MigInstanceUse> existing = {Use(g, "1g.10gb", 0)};
  // 3g.40gb at 0 would overlap slice 0; at 4 it is free.
  EXPECT_EQ(FreePlacements(*g.FindByName("3g.40gb"), existing),
            (std::vector<MigPlacement>{{4, 4}}));
  EXPECT_TRUE(FreePlacements(*g.FindByName("4g.40gb"), existing).empty());
  EXPECT_TRUE(FreePlacements(*g.FindByName("7g.80gb"), existing).empty());
  EXPECT_EQ(FreePlacements(*g.FindByName("1g.10gb"), existing).size(), 6u);
}

// The issue's own layout: a 1g.10gb and a 3g.40gb side by side, then what
// else fits.
TEST(MigProfilesTest, OneSmallAndOneLargeInstanceLeaveRoomForTheRest) {
  const MigGeometry& g = H100();
  std::vector<MigInstanceUse> existing = {Use(g, "1g.10gb", 0)};
  const std::vector<MigPlacement> large = FreePlacements(*g.FindByName("3g.40gb"), existing);
  ASSERT_FALSE(large.empty());
  existing.push_back({g.FindByName("3g.40gb"), large.front()});
  EXPECT_EQ(RemainingCapacity(*g.FindByName("1g.10gb"), existing), 3u);  // slices 1, 2, 3
  EXPECT_EQ(RemainingCapacity(*g.FindByName("2g.20gb"), existing), 1u);  // slices 2-3
  EXPECT_EQ(RemainingCapacity(*g.FindByName("3g.40gb"), existing), 0u);
}

TEST(MigProfilesTest, TheInstanceCountBoundsEvenWhenSlicesAreFree) {
  const MigGeometry& g = H100();
  // One media-extension instance per GPU.
  const std::vector<MigInstanceUse> one_me = {Use(g, "1g.10gb+me", 3)};
  EXPECT_TRUE(FreePlacements(*g.FindByName("1g.10gb+me"), one_me).empty());
  EXPECT_EQ(FreePlacements(*g.FindByName("1g.10gb"), one_me).size(), 6u);
  // Seven one-slice instances fill the seven starts; the eighth slice is
  // no one's.
  std::vector<MigInstanceUse> seven;
  for (uint32_t s = 0; s < 7; ++s) seven.push_back(Use(g, "1g.10gb", s));
  EXPECT_TRUE(FreePlacements(*g.FindByName("1g.10gb"), seven).empty());
  EXPECT_EQ(RemainingCapacity(*g.FindByName("1g.20gb"), seven), 0u);
}

}  // namespace
}  // namespace gpuslice::sim
