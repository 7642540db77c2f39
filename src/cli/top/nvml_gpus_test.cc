#include "cli/top/nvml_gpus.h"

#include <gtest/gtest.h>

namespace gpuslice::cli::top {
namespace {

// Reading the simulator's GPUs is tested end to end (top_integration_test);
// here, a library that is not there is said, not fatal.
TEST(NvmlGpusTest, AMissingLibraryIsUnavailableAndNamed) {
  auto n = NvmlGpus::Open("libgpuslice-no-such-nvml.so.1");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(n.status().message().find("libgpuslice-no-such-nvml.so.1"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::cli::top
