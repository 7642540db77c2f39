#include "daemon/tenants/gpu_usage.h"

#include <gtest/gtest.h>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

class GpuUsageCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { snapshot_.gpus.push_back(*backend_.Read(0)); }
  FakeBackend backend_{1};
  Snapshot snapshot_;
  GpuUsageCache cache_;
};

TEST_F(GpuUsageCacheTest, EachProcessHasTheMemoryTheDriverLists) {
  backend_.SetProcesses(0, {{.pid = 100, .used_memory_bytes = 3 << 20},
                            {.pid = 200, .used_memory_bytes = std::nullopt}});
  cache_.Refresh(ReadProcesses(backend_, snapshot_, std::nullopt));
  ASSERT_EQ(cache_.Current()->size(), 1u);
  const GpuUsage& u = cache_.Current()->at(0);
  EXPECT_EQ(u.uuid, snapshot_.gpus[0].uuid);
  EXPECT_EQ(u.memory_bytes.at(100), 3u << 20);
  EXPECT_EQ(u.memory_bytes.at(200), 0u);  // listed, its memory not known

  backend_.SetProcesses(0, {{.pid = 200, .used_memory_bytes = 1 << 20}});
  cache_.Refresh(ReadProcesses(backend_, snapshot_, std::nullopt));
  EXPECT_FALSE(cache_.Current()->at(0).memory_bytes.contains(100));  // it left the GPU
}

// A GPU whose processes cannot be read keeps what was read of it before.
TEST_F(GpuUsageCacheTest, AnUnreadableGpuKeepsItsPreviousEntry) {
  backend_.SetProcesses(0, {{.pid = 100, .used_memory_bytes = 3 << 20}});
  cache_.Refresh(ReadProcesses(backend_, snapshot_, std::nullopt));
  cache_.Refresh({GpuProcessReading{.index = 0,
                                    .uuid = snapshot_.gpus[0].uuid,
                                    .processes = std::nullopt,
                                    .samples = std::nullopt}});
  ASSERT_EQ(cache_.Current()->size(), 1u);
  EXPECT_EQ(cache_.Current()->at(0).memory_bytes.at(100), 3u << 20);
}

// A GPU not read yet is there, with no process.
TEST_F(GpuUsageCacheTest, UsageOfEachHasEveryGpuOfTheSnapshot) {
  const std::vector<GpuUsage> u = UsageOfEach(snapshot_, *cache_.Current());
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].uuid, snapshot_.gpus[0].uuid);
  EXPECT_TRUE(u[0].memory_bytes.empty());
}

}  // namespace
}  // namespace gpuslice::daemon
