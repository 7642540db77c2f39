#include "daemon/tenants/gpu_usage.h"

#include <gtest/gtest.h>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kWindowUs = 200'000;

class GpuUsageCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    snapshot_.gpus.push_back(*backend_.Read(0));
    backend_.SetProcesses(0, {{.pid = 100, .used_memory_bytes = 1 << 20},
                              {.pid = 200, .used_memory_bytes = 1 << 20}});
  }
  FakeBackend backend_{1};
  Snapshot snapshot_;
  GpuUsageCache cache_{backend_};
};

// Each process's part of each window: its latest sample is its share.
TEST_F(GpuUsageCacheTest, SplitSamplesGiveEachProcessItsLatestShare) {
  for (uint64_t k = 1; k <= 5; ++k) {
    backend_.AddUtilization(0, {{100, k * kWindowUs, 70}, {200, k * kWindowUs, 25}});
  }
  cache_.Refresh(snapshot_);
  const GpuUsage& u = cache_.Current()->at(0);
  EXPECT_EQ(u.sm_percent.at(100), 70u);
  EXPECT_EQ(u.sm_percent.at(200), 25u);
}

// NVML as on an H100 (r580) with time-sliced contexts: each 200 ms window
// goes to ONE process with the whole window's busy percent. Process 200 won
// one window of the last five: a fifth of 95 %, not 95 % (the latest-sample
// reading showed both processes at about 95 % on the H100: 0.78 and 0.77).
TEST_F(GpuUsageCacheTest, UnderWindowAttributionAProcessGetsItsPartOfTheWindows) {
  uint64_t k = 1;
  for (int refresh = 0; refresh < 4; ++refresh) {
    for (int i = 0; i < 5; ++i, ++k) {
      backend_.AddUtilization(0, {{k % 5 == 0 ? 200u : 100u, k * kWindowUs, 95}});
    }
    cache_.Refresh(snapshot_);
    const GpuUsage& u = cache_.Current()->at(0);
    EXPECT_EQ(u.sm_percent.at(100), 76u) << refresh;
    EXPECT_EQ(u.sm_percent.at(200), 19u) << refresh;
  }
}

}  // namespace
}  // namespace gpuslice::daemon
