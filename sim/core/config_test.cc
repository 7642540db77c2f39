#include "sim/core/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace gpuslice::sim {
namespace {

TEST(SimConfig, DefaultsMatchTheDesign) {
  SimConfig c = DefaultSimConfig();
  EXPECT_EQ(c.device_count, 1u);
  EXPECT_STREQ(c.devices[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c.devices[0].sm_count, 132u);
  EXPECT_EQ(c.devices[0].max_threads_per_sm, 2048u);
  EXPECT_EQ(c.devices[0].total_bytes, 80ull << 30);
  // The H100 as measured (docs/sim.md "Defaults").
  EXPECT_EQ(c.params.timeslice_ns, 2'090'000);
  EXPECT_EQ(c.params.switch_ns, 152'000);
  EXPECT_EQ(c.params.max_pending, 1024u);
  EXPECT_EQ(c.params.context_bytes, 300ull << 20);
  EXPECT_EQ(c.params.granularity, 2ull << 20);
  EXPECT_EQ(c.params.pool_block_granules, 16u);  // 32 MiB
  EXPECT_EQ(c.params.sample_ns, 200'000'000);
  EXPECT_EQ(c.params.wave_ns, 10'000);
  EXPECT_EQ(c.params.process_util, kProcessUtilWindow);
  EXPECT_STRNE(c.devices[0].uuid, c.devices[1].uuid);
}

TEST(SimConfig, ParsesEveryKnob) {
  auto c = ParseSimConfig(R"({
    "devices": [{"name": "Tiny GPU", "memory": "4GiB", "sms": 8, "cc": "8.6",
                 "power_limit_w": 150, "power_min_w": 100, "power_max_w": 200},
                {"uuid": "GPU-00000000-0000-0000-0000-000000000001"}],
    "timeslice_us": 2000, "switch_us": 10, "sample_us": 500000, "max_pending": 16,
    "context_bytes": "100MiB", "granularity": "1MiB", "launch_ns": 5, "wave_ns": 7,
    "pool_block": "4MiB", "functions": {"gemm": {"wave_ns": 123}},
    "process_util": "window"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->device_count, 2u);
  EXPECT_STREQ(c->devices[0].name, "Tiny GPU");
  EXPECT_EQ(c->devices[0].total_bytes, 4ull << 30);
  EXPECT_EQ(c->devices[0].sm_count, 8u);
  EXPECT_EQ(c->devices[0].cc_major, 8u);
  EXPECT_EQ(c->devices[0].cc_minor, 6u);
  EXPECT_EQ(c->devices[0].power_default_mw, 150'000u);
  EXPECT_STREQ(c->devices[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(c->params.timeslice_ns, 2'000'000);
  EXPECT_EQ(c->params.switch_ns, 10'000);
  EXPECT_EQ(c->params.max_pending, 16u);
  EXPECT_EQ(c->params.context_bytes, 100ull << 20);
  EXPECT_EQ(c->params.pool_block_granules, 4u);  // 4 MiB of 1 MiB granules
  EXPECT_EQ(c->params.process_util, kProcessUtilWindow);
  ASSERT_EQ(c->params.function_count, 1u);
  EXPECT_STREQ(c->params.functions[0].name, "gemm");
  EXPECT_EQ(c->params.functions[0].wave_ns, 123);
}

TEST(SimConfig, DeviceCountCopiesTheDefaultDevice) {
  auto c = ParseSimConfig(R"({"device_count": 4})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->device_count, 4u);
  EXPECT_STREQ(c->devices[3].name, "NVIDIA H100 80GB HBM3");
}

TEST(SimConfig, ErrorsNameTheProblem) {
  struct Case {
    const char* json;
    const char* expected;
  } cases[] = {
      {"{", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {R"({"timeslice_us": -1})", "timeslice_us must be between"},
      {R"({"timeslice_ms": 1})", "timeslice_ms is not a known key"},
      {R"({"max_pending": 5000})", "max_pending must be between 1 and 1024"},
      {R"({"switch_us": "fast"})", "switch_us must be an integer"},
      {R"({"devices": [{"memory": "lots"}]})", "devices[0].memory"},
      {R"({"devices": [{"memroy": "4GiB"}]})", "devices[0].memroy is not a known key"},
      {R"({"devices": []})", "devices must be an array"},
      {R"({"devices": [{"cc": "nine"}]})", "devices[0].cc"},
      {R"({"devices": [{"uuid": "X"}]})", "devices[0].uuid must start"},
      {R"({"granularity": "3MiB"})", "granularity must be a power of two"},
      {R"({"pool_block": "3MiB"})", "pool_block must be a positive multiple"},
      {R"({"pool_block": 0})", "pool_block must be a positive multiple"},
      {R"({"functions": {"k": {"wave": 1}}})", "functions.k.wave is not a known key"},
      {R"({"process_util": "sampled"})", R"(process_util must be "split" or "window")"},
      {R"({"process_util": 1})", R"(process_util must be "split" or "window")"},
      {R"({"device_count": 9})", "device_count must be between 1 and 8"},
      {R"({"devices": [{"memory": "1GiB"}], "context_bytes": "2GiB"})", "context_bytes"},
  };
  for (const auto& c : cases) {
    auto r = ParseSimConfig(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << c.json << " -> " << r.status().message();
  }
}

TEST(SimConfig, LoadsFromAFileOrInline) {
  EXPECT_EQ(*LoadSimConfigText(R"( {"device_count": 2})"), R"({"device_count": 2})");
  std::string path = testing::TempDir() + "/sim_config_test.json";
  std::ofstream(path) << R"({"device_count": 3})";
  EXPECT_EQ(*LoadSimConfigText(path), R"({"device_count": 3})");
  auto missing = LoadSimConfigText("/nonexistent/sim.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/sim.json"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpuslice::sim
