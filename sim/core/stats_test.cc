// The ground-truth report: field names are a stable interface (docs/sim.md).
#include "sim/core/stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "sim/core/sim_gpu.h"

namespace gpuslice::sim {
namespace {

TEST(StatsTest, ReportsDevicesAndProcessesWithStableFieldNames) {
  std::string path = testing::TempDir() + "/stats_test." + std::to_string(getpid());
  unlink(path.c_str());
  auto gpu = SimGpu::Open({path, R"({"device_count": 2})"});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  auto ctx = (*gpu)->CreateContext(1);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*gpu)->Allocate(*ctx, 64 << 20).ok());
  ASSERT_TRUE((*gpu)->Wait(*ctx, *(*gpu)->EnqueueKernel(*ctx, 2'000'000)).ok());

  nlohmann::json j = (*gpu)->WithState([&](SimState& s) { return StatsJson(s, (*gpu)->NowNs()); });
  ASSERT_EQ(j["devices"].size(), 2u);
  const auto& d1 = j["devices"][1];
  EXPECT_EQ(d1["index"], 1);
  EXPECT_EQ(d1["kernels"], 1);
  EXPECT_GE(d1["busy_ns"].get<int64_t>(), 2'000'000);
  EXPECT_EQ(d1["memory_used_bytes"].get<uint64_t>(), (*gpu)->params().context_bytes + (64u << 20));
  EXPECT_EQ(j["devices"][0]["kernels"], 0);
  for (const char* key : {"uuid", "name", "context_switches", "memory_total_bytes", "energy_mj",
                          "power_limit_mw", "compute_mode"}) {
    EXPECT_TRUE(d1.contains(key)) << key;
  }
  EXPECT_GT(j["clock_ns"].get<int64_t>(), 0);
  EXPECT_GE(j["since_reset_ns"].get<int64_t>(), 2'000'000);

  ASSERT_EQ(j["processes"].size(), 1u);
  const auto& p = j["processes"][0];
  EXPECT_EQ(p["pid"], getpid());
  EXPECT_EQ(p["status"], "running");
  EXPECT_EQ(p["devices"][1]["kernels"], 1);
  EXPECT_EQ(p["devices"][1]["busy_ns"], d1["busy_ns"]);
  EXPECT_EQ(p["devices"][1]["memory_bytes"].get<uint64_t>(),
            d1["memory_used_bytes"].get<uint64_t>());
  for (const char* key : {"name", "first_seen_ns", "exit_ns"}) EXPECT_TRUE(p.contains(key)) << key;

  std::string text = (*gpu)->WithState([&](SimState& s) { return StatsText(s, (*gpu)->NowNs()); });
  EXPECT_NE(text.find(std::to_string(getpid())), std::string::npos) << text;
  gpu->reset();
  unlink(path.c_str());
}

}  // namespace
}  // namespace gpuslice::sim
