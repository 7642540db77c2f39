#include "sim/core/visible_devices.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sim/core/config.h"
#include "sim/core/mig_state.h"
#include "sim/core/sim_gpu.h"

namespace gpuslice::sim {
namespace {

// Three H100s; GPU 1 in MIG mode with a 1g.10gb and a 3g.40gb.
class VisibleDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimConfig config = DefaultSimConfig();
    config.device_count = 3;
    for (int i = 1; i < 3; ++i) {
      config.devices[i] = config.devices[0];
      snprintf(config.devices[i].uuid, sizeof config.devices[i].uuid,
               "GPU-%08d-0000-0000-0000-000000000000", i);
    }
    snprintf(config.devices[0].uuid, sizeof config.devices[0].uuid,
             "GPU-abcdef00-0000-0000-0000-000000000000");
    state_ = std::make_unique<SimState>();
    InitializeState(state_.get(), config, 0, 0);
    DeviceState& d = state_->devices[1];
    ASSERT_TRUE(SetMigMode(*state_, 1, kMigEnabled).ok());
    const MigGeometry& g = *GeometryOf(d);
    for (const char* name : {"1g.10gb", "3g.40gb"}) {
      auto gi = CreateGpuInstance(d, g.FindByName(name)->index);
      ASSERT_TRUE(gi.ok());
      const uint32_t slices = g.FindByName(name)->compute_slices;
      ASSERT_TRUE(CreateComputeInstance(d, d.gpu_instances[*gi].id,
                                        slices == 1 ? kMigCompute1Slice : kMigCompute3Slice)
                      .ok());
    }
  }
  std::vector<std::string> Uuids(const char* env) {
    std::vector<std::string> out;
    for (const VisibleDevice& v : VisibleDevices(*state_, env)) out.push_back(v.uuid);
    return out;
  }
  std::string Mig(int gi) { return state_->devices[1].gpu_instances[gi].compute[0].uuid; }
  std::string Gpu(int dev) { return state_->devices[dev].info.uuid; }

  std::unique_ptr<SimState> state_;
};

TEST_F(VisibleDevicesTest, UnsetShowsEveryGpuAndAMigGpusMigDevices) {
  EXPECT_EQ(Uuids(nullptr), (std::vector<std::string>{Gpu(0), Mig(0), Mig(1), Gpu(2)}));
  const std::vector<VisibleDevice> all = VisibleDevices(*state_, nullptr);
  EXPECT_EQ(all[1].device, 1);
  EXPECT_EQ(all[1].lane, MigLane(0, 0));
  EXPECT_EQ(all[1].name, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
  EXPECT_EQ(all[1].total_bytes, 10ull << 30);
  EXPECT_EQ(all[2].sm_count, 60u);
  EXPECT_EQ(all[0].lane, 0);
  EXPECT_EQ(all[0].total_bytes, state_->devices[0].info.total_bytes);
}

TEST_F(VisibleDevicesTest, IndicesUuidsAndMigUuidsInTheirOrder) {
  EXPECT_EQ(Uuids("2,0"), (std::vector<std::string>{Gpu(2), Gpu(0)}));
  EXPECT_EQ(Uuids(Mig(1).c_str()), (std::vector<std::string>{Mig(1)}));
  EXPECT_EQ(Uuids(("GPU-abcdef," + Mig(0)).c_str()), (std::vector<std::string>{Gpu(0), Mig(0)}));
  EXPECT_EQ(Uuids("1"), (std::vector<std::string>{Mig(0), Mig(1)}));
  EXPECT_EQ(Uuids("0, 0 ,2"), (std::vector<std::string>{Gpu(0), Gpu(2)}));
}

TEST_F(VisibleDevicesTest, TheFirstEntryNamingNothingEndsTheList) {
  EXPECT_EQ(Uuids("0,7,2"), (std::vector<std::string>{Gpu(0)}));
  EXPECT_EQ(Uuids("0,MIG-00000000-0000-0000-0000-000000000000,2"),
            (std::vector<std::string>{Gpu(0)}));
  EXPECT_EQ(Uuids("GPU-0000"), (std::vector<std::string>{})) << "a prefix of two GPUs' UUIDs";
  EXPECT_TRUE(Uuids("").empty());
  EXPECT_TRUE(Uuids("-1").empty());
}

}  // namespace
}  // namespace gpuslice::sim
