#include "sim/core/mig_state.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sim/core/config.h"
#include "sim/core/sim_gpu.h"

namespace gpuslice::sim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// A simulation of one H100 80GB (the default device) and one L40S (no MIG).
class MigStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimConfig config = DefaultSimConfig();
    config.device_count = 2;
    config.devices[1] = config.devices[0];
    snprintf(config.devices[1].name, sizeof config.devices[1].name, "NVIDIA L40S");
    config.devices[1].total_bytes = 48 * kGiB;
    state_ = std::make_unique<SimState>();
    InitializeState(state_.get(), config, 0, 0);
  }
  DeviceState& h100() { return state_->devices[0]; }
  uint32_t Index(std::string_view name) { return GeometryOf(h100())->FindByName(name)->index; }
  // A context of process slot 0 (pid 4242) on device `dev`.
  void AddContext(int dev) {
    state_->processes[0].pid = 4242;
    state_->processes[0].status = kProcessAlive;
    snprintf(state_->processes[0].name, sizeof state_->processes[0].name, "train");
    state_->contexts[0].status = kContextActive;
    state_->contexts[0].device = dev;
    state_->contexts[0].process_slot = 0;
  }
  void Enable() { ASSERT_TRUE(SetMigMode(*state_, 0, kMigEnabled).ok()); }

  std::unique_ptr<SimState> state_;
};

TEST_F(MigStateTest, AnIdleGpuChangesModeAtOnce) {
  EXPECT_EQ(h100().mig_mode, kMigDisabled);
  Enable();
  EXPECT_EQ(h100().mig_mode, kMigEnabled);
  EXPECT_EQ(h100().mig_pending_mode, kMigEnabled);
  EXPECT_TRUE(SetMigMode(*state_, 0, kMigDisabled).ok());
  EXPECT_EQ(h100().mig_mode, kMigDisabled);
}

TEST_F(MigStateTest, AGpuInUseKeepsTheChangePending) {
  AddContext(0);
  const Status st = SetMigMode(*state_, 0, kMigEnabled);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("4242 (train)"), std::string::npos) << st.message();
  EXPECT_EQ(h100().mig_mode, kMigDisabled);
  EXPECT_EQ(h100().mig_pending_mode, kMigEnabled);
  // Idle again: the next change applies.
  state_->contexts[0].status = kContextFree;
  EXPECT_TRUE(SetMigMode(*state_, 0, kMigEnabled).ok());
  EXPECT_EQ(h100().mig_mode, kMigEnabled);
}

TEST_F(MigStateTest, AContextOnAnotherGpuDoesNotCount) {
  AddContext(1);
  Enable();
}

TEST_F(MigStateTest, AGpuWithoutMigAndABadModeAreRefused) {
  EXPECT_EQ(SetMigMode(*state_, 1, kMigEnabled).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(SetMigMode(*state_, 0, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h100().mig_pending_mode, kMigDisabled);
}

TEST_F(MigStateTest, InstancesNeedMigModeAndDisablingNeedsThemGone) {
  EXPECT_EQ(CreateGpuInstance(h100(), Index("1g.10gb")).status().code(),
            StatusCode::kFailedPrecondition);
  Enable();
  auto gi = CreateGpuInstance(h100(), Index("1g.10gb"));
  ASSERT_TRUE(gi.ok()) << gi.status().message();
  EXPECT_EQ(SetMigMode(*state_, 0, kMigDisabled).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(h100().mig_mode, kMigEnabled);
  ASSERT_TRUE(DestroyGpuInstance(h100(), h100().gpu_instances[*gi].id).ok());
  EXPECT_TRUE(SetMigMode(*state_, 0, kMigDisabled).ok());
}

// nvidia-smi mig -cgi 1g.10gb,3g.40gb: the lowest free placements, ids
// from 1; a 7g.80gb no longer fits, nor a 4g.40gb at slice 0.
TEST_F(MigStateTest, GpuInstancesTakeFreePlacements) {
  Enable();
  auto small = CreateGpuInstance(h100(), Index("1g.10gb"));
  auto large = CreateGpuInstance(h100(), Index("3g.40gb"));
  ASSERT_TRUE(small.ok() && large.ok());
  const MigGpuInstanceRecord& s = h100().gpu_instances[*small];
  const MigGpuInstanceRecord& l = h100().gpu_instances[*large];
  EXPECT_EQ(s.id, 1u);
  EXPECT_EQ(l.id, 2u);
  EXPECT_EQ(s.start, 0u);
  EXPECT_EQ(s.size, 1u);
  EXPECT_EQ(l.start, 4u);  // a 3g's placements start at 0 or 4; slice 0 is taken
  EXPECT_EQ(l.size, 4u);
  EXPECT_EQ(CreateGpuInstance(h100(), Index("7g.80gb")).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateGpuInstance(h100(), Index("4g.40gb"), MigPlacement{0, 4}).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateGpuInstance(h100(), Index("1g.10gb"), MigPlacement{7, 1}).status().code(),
            StatusCode::kInvalidArgument);  // no placement starts at slice 7
  EXPECT_EQ(CreateGpuInstance(h100(), 0x5).status().code(), StatusCode::kInvalidArgument);
  // An explicit free placement, and the freed id is reused.
  auto at2 = CreateGpuInstance(h100(), Index("1g.10gb"), MigPlacement{2, 1});
  ASSERT_TRUE(at2.ok());
  EXPECT_EQ(h100().gpu_instances[*at2].start, 2u);
  ASSERT_TRUE(DestroyGpuInstance(h100(), 1).ok());
  auto again = CreateGpuInstance(h100(), Index("1g.10gb"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(h100().gpu_instances[*again].id, 1u);
  EXPECT_EQ(h100().gpu_instances[*again].start, 0u);
  EXPECT_EQ(DestroyGpuInstance(h100(), 9).code(), StatusCode::kNotFound);
}

TEST_F(MigStateTest, SevenOneSliceInstancesFillTheGpu) {
  Enable();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(CreateGpuInstance(h100(), Index("1g.10gb")).ok()) << i;
  EXPECT_EQ(CreateGpuInstance(h100(), Index("1g.10gb")).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(GpuInstanceUses(h100()).size(), 7u);
}

// The compute-instance counts of NVIDIA's MIG user guide.
TEST(MigComputePlacementTest, CountsFollowTheUserGuide) {
  EXPECT_EQ(ComputePlacementStarts(1, 7).size(), 7u);
  EXPECT_EQ(ComputePlacementStarts(2, 7).size(), 3u);
  EXPECT_EQ(ComputePlacementStarts(3, 7), (std::vector<uint32_t>{0, 4}));
  EXPECT_EQ(ComputePlacementStarts(4, 7).size(), 1u);
  EXPECT_EQ(ComputePlacementStarts(7, 7).size(), 1u);
  EXPECT_EQ(ComputePlacementStarts(1, 3).size(), 3u);
  EXPECT_EQ(ComputePlacementStarts(2, 3).size(), 1u);
  EXPECT_EQ(ComputePlacementStarts(3, 3).size(), 1u);
  EXPECT_EQ(ComputePlacementStarts(2, 4).size(), 2u);
  EXPECT_TRUE(ComputePlacementStarts(4, 3).empty());
  EXPECT_TRUE(ComputePlacementStarts(0, 7).empty());
}

// nvmlGpuInstanceGetComputeInstanceRemainingCapacity: placed one after
// another at the lowest free start, beside the compute instances there are.
TEST_F(MigStateTest, ComputeCapacityCountsWhatStillFits) {
  Enable();
  auto gi = CreateGpuInstance(h100(), Index("7g.80gb"));
  ASSERT_TRUE(gi.ok());
  const MigGpuInstanceRecord& g = h100().gpu_instances[*gi];
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 1), 7u);
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 2), 3u);
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 3), 2u);
  ASSERT_TRUE(CreateComputeInstance(h100(), g.id, kMigCompute2Slice).ok());  // slices 0-1
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 1), 5u);
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 2), 2u);
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 3), 1u);  // at 4 only
  EXPECT_EQ(ComputeRemainingCapacity(h100(), g, 4), 0u);
  EXPECT_EQ(FreeComputeStarts(h100(), g, 3), (std::vector<uint32_t>{4}));
}

TEST_F(MigStateTest, ComputeInstancesAreMigDevicesWithTheirOwnUuids) {
  Enable();
  auto gi = CreateGpuInstance(h100(), Index("3g.40gb"));
  ASSERT_TRUE(gi.ok());
  MigGpuInstanceRecord& g = h100().gpu_instances[*gi];
  auto whole = CreateComputeInstance(h100(), g.id, kMigCompute3Slice);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(CreateComputeInstance(h100(), g.id, kMigCompute1Slice).status().code(),
            StatusCode::kResourceExhausted);  // its three slices are taken
  EXPECT_EQ(CreateComputeInstance(h100(), g.id, kMigCompute4Slice).status().code(),
            StatusCode::kInvalidArgument);  // larger than the GPU instance
  const MigComputeInstanceRecord& c = g.compute[*whole];
  EXPECT_EQ(c.id, 0u);
  EXPECT_EQ(std::string(c.uuid).rfind("MIG-", 0), 0u);
  EXPECT_EQ(std::string(c.uuid).size(), 40u);
  EXPECT_EQ(MigDeviceProfileName(h100(), g, c), "3g.40gb");
  EXPECT_EQ(MigDeviceMemoryBytes(h100(), g), 40 * kGiB);
  EXPECT_EQ(MigDeviceSmCount(h100(), g, c), 60u);
  auto found = FindMigDevice(*state_, c.uuid);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->device, 0);
  EXPECT_EQ(found->gi, *gi);
  EXPECT_EQ(found->ci, *whole);
  EXPECT_FALSE(FindMigDevice(*state_, "MIG-00000000-0000-0000-0000-000000000000").has_value());
  const std::string first_uuid = c.uuid;
  // In use: the GPU instance stays while it has a compute instance.
  EXPECT_EQ(DestroyGpuInstance(h100(), g.id).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(DestroyComputeInstance(*state_, 0, g.id, c.id).ok());
  EXPECT_EQ(DestroyComputeInstance(*state_, 0, g.id, 0).code(), StatusCode::kNotFound);
  // Three 1-slice compute instances: three MIG devices, each its own UUID.
  std::set<std::string> uuids;
  for (int i = 0; i < 3; ++i) {
    auto one = CreateComputeInstance(h100(), g.id, kMigCompute1Slice);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(g.compute[*one].id, static_cast<uint32_t>(i));
    EXPECT_EQ(MigDeviceProfileName(h100(), g, g.compute[*one]), "1c.3g.40gb");
    EXPECT_EQ(MigDeviceSmCount(h100(), g, g.compute[*one]), 20u);
    uuids.insert(g.compute[*one].uuid);
  }
  EXPECT_EQ(uuids.size(), 3u);
  EXPECT_EQ(uuids.count(first_uuid), 0u) << "compute instance 0 again: a new device, a new UUID";
  EXPECT_EQ(DestroyGpuInstance(h100(), g.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(DestroyGpuInstance(h100(), 7).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::sim
