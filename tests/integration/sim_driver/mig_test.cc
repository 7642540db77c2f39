// MIG on the simulated H100 with real processes: CUDA_VISIBLE_DEVICES=MIG-...
// puts a program on one MIG device, which has its GPU instance's memory, and
// MIG devices run their work side by side (sim/core/visible_devices.h,
// docs/sim.md "MIG mode and instances").
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "sim/core/mig_state.h"
#include "sim/core/sim_gpu.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kGiB = 1ull << 30;

class MigProcessTest : public testing::SimProcessTest {
 protected:
  // MIG mode on GPU 0 with a 1g.10gb and a 3g.40gb, each one compute
  // instance, as `nvidia-smi mig -cgi 1g.10gb,3g.40gb -C` makes them.
  void SetUp() override {
    SimProcessTest::SetUp();
    auto gpu = sim::SimGpu::Open({state_, "", /*observer=*/true});
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    (*gpu)->WithState([&](sim::SimState& s) {
      sim::DeviceState& d = s.devices[0];
      ASSERT_TRUE(sim::SetMigMode(s, 0, sim::kMigEnabled).ok());
      for (const char* name : {"1g.10gb", "3g.40gb"}) {
        const sim::MigProfile* p = sim::GeometryOf(d)->FindByName(name);
        auto gi = sim::CreateGpuInstance(d, p->index);
        ASSERT_TRUE(gi.ok());
        auto ci = sim::CreateComputeInstance(
            d, d.gpu_instances[*gi].id,
            p->compute_slices == 1 ? sim::kMigCompute1Slice : sim::kMigCompute3Slice);
        ASSERT_TRUE(ci.ok());
        uuids_.emplace_back(d.gpu_instances[*gi].compute[*ci].uuid);
      }
    });
  }
  // The allocation probe's report on MIG device `mig` (0: the 1g.10gb).
  json Allocate(int mig) {
    const pid_t p = StartProgram("gpuslice-alloc-probe", mig, {"alloc"},
                                 {"CUDA_VISIBLE_DEVICES=" + uuids_[mig]});
    EXPECT_EQ(Join(p), 0) << Read("err" + std::to_string(mig));
    return json::parse(Read("out" + std::to_string(mig)), nullptr, /*allow_exceptions=*/false);
  }

  std::vector<std::string> uuids_;
};

// NVIDIA's bar: a program given the 1g.10gb's UUID allocates at most its
// memory, one given the 3g.40gb's more than 30 GiB.
TEST_F(MigProcessTest, AProgramOnAMigDeviceHasItsInstancesMemory) {
  const json small = Allocate(0);
  ASSERT_TRUE(small.is_object()) << Read("out0");
  EXPECT_EQ(small["total"], 10 * kGiB);
  EXPECT_LE(small["granted_bytes"].get<uint64_t>(), 10 * kGiB);
  EXPECT_GT(small["granted_bytes"].get<uint64_t>(), 9 * kGiB);
  EXPECT_EQ(small["error"], "CUDA_ERROR_OUT_OF_MEMORY");
  const json large = Allocate(1);
  ASSERT_TRUE(large.is_object()) << Read("out1");
  EXPECT_EQ(large["total"], 40 * kGiB);
  EXPECT_GT(large["granted_bytes"].get<uint64_t>(), 30 * kGiB);
}

// A GPU in MIG mode runs CUDA only on its MIG devices: a program that names
// the GPU itself sees both of them, one that names a MIG device gone sees none.
TEST_F(MigProcessTest, TheGpuInMigModeStandsForItsMigDevices) {
  const pid_t whole = StartProgram("gpuslice-alloc-probe", 0, {"info"}, {"CUDA_VISIBLE_DEVICES=0"});
  EXPECT_EQ(Join(whole), 0) << Read("err0");
  const json info = json::parse(Read("out0"), nullptr, false);
  ASSERT_TRUE(info.is_object()) << Read("out0");
  EXPECT_EQ(info["total"], 10 * kGiB) << "device 0 is the first MIG device, the 1g.10gb";
  const pid_t none =
      StartProgram("gpuslice-alloc-probe", 1, {"info"},
                   {"CUDA_VISIBLE_DEVICES=MIG-00000000-0000-0000-0000-000000000000"});
  EXPECT_NE(Join(none), 0);
}

// Work in one MIG device never slows another: two saturating programs, one
// per MIG device, each keep their device busy all the time (on one GPU they
// would share it: their shares would sum to at most 100 %).
TEST_F(MigProcessTest, MigDevicesRunTheirWorkSideBySide) {
  std::vector<pid_t> pids;
  for (int mig = 0; mig < 2; ++mig) {
    pids.push_back(Start(mig, {"--kernel-us", "1000", "--duration-s", "6", "--quiet"},
                         {"CUDA_VISIBLE_DEVICES=" + uuids_[mig]}));
  }
  WaitRunning(pids);
  const double small = ShareOfDevice({pids[0]}, milliseconds(1500));
  const double large = ShareOfDevice({pids[1]}, milliseconds(1500));
  EXPECT_GT(small, 80) << "the 1g.10gb's program";
  EXPECT_GT(large, 80) << "the 3g.40gb's program";
}

// The limiter inside an instance: a memory cap below the instance's size
// holds there (the allocation probe under LD_PRELOAD on the 3g.40gb, capped
// at 4 GiB), and a compute cap is a share of the instance's time (the
// 1g.10gb's program capped at 30 %, its neighbour's unchanged).
TEST_F(MigProcessTest, TheLimiterHoldsItsCapsInsideAnInstance) {
  const std::vector<std::string> limited = {
      "LD_PRELOAD=" + testing::BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_};
  std::vector<std::string> memory = limited;
  memory.push_back("GPUSLICE_GROUP=small-memory");
  memory.push_back("GPUSLICE_MEMORY_LIMIT=4GiB");
  memory.push_back("CUDA_VISIBLE_DEVICES=" + uuids_[1]);
  const pid_t probe = StartProgram("gpuslice-alloc-probe", 0, {"alloc"}, memory);
  EXPECT_EQ(Join(probe), 0) << Read("err0");
  const json r = json::parse(Read("out0"), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(r.is_object()) << Read("out0");
  EXPECT_LE(r["granted_bytes"].get<uint64_t>(), 4 * kGiB);
  EXPECT_GT(r["granted_bytes"].get<uint64_t>(), 3 * kGiB);
  EXPECT_EQ(r["total"], 4 * kGiB) << "the limiter reports its cap as the device's memory";

  std::vector<std::string> capped = limited;
  capped.push_back("GPUSLICE_GROUP=capped");
  capped.push_back("GPUSLICE_COMPUTE_LIMIT=30");
  capped.push_back("CUDA_VISIBLE_DEVICES=" + uuids_[0]);
  const std::vector<std::string> work = {"--kernel-us", "1000", "--duration-s", "8", "--quiet"};
  const std::vector<pid_t> pids = {Start(1, work, capped),
                                   Start(2, work, {"CUDA_VISIBLE_DEVICES=" + uuids_[1]})};
  WaitRunning(pids);
  const double small = ShareOfDevice({pids[0]}, milliseconds(3000));
  const double large = ShareOfDevice({pids[1]}, milliseconds(1500));
  EXPECT_GT(small, 25) << "the capped program on the 1g.10gb";
  EXPECT_LT(small, 35) << "the capped program on the 1g.10gb";
  EXPECT_GT(large, 80) << "its neighbour on the 3g.40gb";
}

}  // namespace
}  // namespace gpuslice
