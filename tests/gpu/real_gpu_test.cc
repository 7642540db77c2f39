#include "tests/gpu/real_gpu.h"

#include <gtest/gtest.h>

namespace gpuslice::gpu_tier {
namespace {

TEST(IsFakeDriverTest, SimulatorAndStubsAreNotRealDrivers) {
  EXPECT_TRUE(IsFakeDriver("", "/b"));
  EXPECT_TRUE(IsFakeDriver("/usr/local/cuda/lib64/stubs/libcuda.so", "/b"));
  EXPECT_TRUE(IsFakeDriver("/b/sim/lib/libcuda.so.1", "/b"));
  EXPECT_TRUE(IsFakeDriver("/b/sim/bin/nvidia-smi", "/b"));
  EXPECT_FALSE(IsFakeDriver("/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15", "/b"));
  EXPECT_FALSE(IsFakeDriver("/usr/bin/nvidia-smi", "/b"));
  EXPECT_FALSE(IsFakeDriver("/b/simulation/libcuda.so.1", "/b"));  // only <build>/sim/
}

// Whatever this machine has, the answer is explained, and a simulator on the
// library path is never taken for a GPU.
TEST(DetectGpuTest, AnswersWithAReason) {
  const GpuPresence& gpu = DetectGpu(BUILD_DIR_FOR_TEST);
  EXPECT_FALSE(gpu.reason.empty());
  if (gpu.present && !gpu.driver.empty()) {
    EXPECT_FALSE(IsFakeDriver(gpu.driver, BUILD_DIR_FOR_TEST));
  }
}

}  // namespace
}  // namespace gpuslice::gpu_tier
