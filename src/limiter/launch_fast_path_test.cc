#include "limiter/launch_fast_path.h"

#include <gtest/gtest.h>

namespace gpuslice::limiter {
namespace {

CUresult FakeLaunch(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                    unsigned, CUstream, void**, void**) {
  return CUDA_SUCCESS;
}

class LaunchFastPathTest : public ::testing::Test {
 protected:
  void SetUp() override { table_.cuLaunchKernel = &FakeLaunch; }
  void TearDown() override { LaunchFastPath::SetThroughHooks(); }

  static auto Direct() { return LaunchFastPath::Direct(&real::CudaTable::cuLaunchKernel); }

  real::CudaTable table_{};
  uint32_t limited_ = 0;  // a segment's compute_limited word
};

TEST_F(LaunchFastPathTest, ThroughTheHooksUntilPublished) {
  EXPECT_FALSE(LaunchFastPath::Published());
  EXPECT_EQ(Direct(), nullptr);
}

TEST_F(LaunchFastPathTest, DirectWhileTheWordIsZeroAndPacedOtherwise) {
  LaunchFastPath::Set(&limited_, &table_);
  EXPECT_TRUE(LaunchFastPath::Published());
  EXPECT_EQ(Direct(), &FakeLaunch);
  limited_ = 1u << 3;  // a limit on device 3 (any device paces every launch's test)
  EXPECT_EQ(Direct(), nullptr);
  limited_ = 0;
  EXPECT_EQ(Direct(), &FakeLaunch);
}

TEST_F(LaunchFastPathTest, AnEntryPointTheDriverLacksTakesTheHook) {
  LaunchFastPath::Set(&limited_, &table_);
  EXPECT_EQ(LaunchFastPath::Direct(&real::CudaTable::cuLaunchKernelEx), nullptr);
}

TEST_F(LaunchFastPathTest, UnpacedIsAlwaysDirect) {
  LaunchFastPath::SetUnpaced(&table_);
  EXPECT_EQ(Direct(), &FakeLaunch);
  LaunchFastPath::SetThroughHooks();
  EXPECT_FALSE(LaunchFastPath::Published());
  EXPECT_EQ(Direct(), nullptr);
}

}  // namespace
}  // namespace gpuslice::limiter
