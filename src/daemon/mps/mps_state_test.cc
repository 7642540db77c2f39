#include "daemon/mps/mps_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gpuslice::daemon::mps {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

MpsState Sample() {
  MpsState state;
  TenantSettings settings;
  settings.active_thread_percentage = 30;
  settings.pinned_memory_limit = uint64_t{4} << 30;
  settings.client_priority = 1;
  settings.sm_partition_percent = 25;
  state.tenants.push_back({"alice", Tier::kMps, "", {{0, "GPU-a"}, {1, "GPU-b"}}, settings});
  state.tenants.push_back({"bob", Tier::kShared, "MPS unavailable: no GPUs", {{1, "GPU-b"}}, {}});
  state.gpus.push_back({0, "GPU-a", 1234, ComputeMode::kProhibited, 2, 3, {"alice"}});
  state.gpus.push_back({1, "GPU-b", 0, ComputeMode::kDefault, 0, 2, {"alice", "bob"}});
  return state;
}

TEST(MpsStateTest, RoundTripsEveryField) {
  const MpsState state = Sample();
  auto parsed = MpsState::Parse(state.Serialise());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, state);
}

TEST(MpsStateTest, AnEmptyStateRoundTrips) {
  auto parsed = MpsState::Parse(MpsState{}.Serialise());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, MpsState{});
}

// The keys and values a daemon of an earlier release wrote and reads.
TEST(MpsStateTest, SerialiseWritesTheFileFormat) {
  const json written = json::parse(Sample().Serialise());
  const json expected = json::parse(R"({
    "version": 1,
    "tenants": [
      {"name": "alice", "tier": "mps", "reason": "",
       "gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}],
       "settings": {"active_thread_percentage": 30, "pinned_memory_limit": 4294967296,
                    "client_priority": 1, "sm_partition_percent": 25}},
      {"name": "bob", "tier": "shared", "reason": "MPS unavailable: no GPUs",
       "gpus": [{"index": 1, "uuid": "GPU-b"}], "settings": {}}
    ],
    "gpus": [
      {"index": 0, "uuid": "GPU-a", "control_pid": 1234, "previous_compute_mode": "PROHIBITED",
       "restarts": 2, "protocol": 3, "tenants": ["alice"]},
      {"index": 1, "uuid": "GPU-b", "control_pid": 0, "previous_compute_mode": "DEFAULT",
       "restarts": 0, "protocol": 2, "tenants": ["alice", "bob"]}
    ]})");
  EXPECT_EQ(written, expected);
  EXPECT_TRUE(Sample().Serialise().ends_with("}\n"));
}

TEST(MpsStateTest, AFileFromBeforeMpsV3ReadsWithDefaults) {
  auto parsed = MpsState::Parse(R"({"version": 1,
    "tenants": [{"name": "t", "tier": "mps", "gpus": [{"index": 0, "uuid": "GPU-a"}]}],
    "gpus": [{"index": 0, "uuid": "GPU-a", "control_pid": 7,
              "previous_compute_mode": "EXCLUSIVE_PROCESS", "tenants": ["t"]}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->tenants.size(), 1u);
  EXPECT_EQ(parsed->tenants[0].reason, "");
  EXPECT_EQ(parsed->tenants[0].settings, TenantSettings{});
  ASSERT_EQ(parsed->gpus.size(), 1u);
  EXPECT_EQ(parsed->gpus[0].protocol, 2);
  EXPECT_EQ(parsed->gpus[0].restarts, 0);
  EXPECT_EQ(parsed->gpus[0].previous_mode, ComputeMode::kExclusiveProcess);
}

TEST(MpsStateTest, AnotherVersionIsRefused) {
  auto parsed = MpsState::Parse(R"({"version": 2, "tenants": [], "gpus": []})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown version 2"));
}

TEST(MpsStateTest, BrokenTextIsCorrupt) {
  for (const char* text : {
           "{not json",
           "",
           R"({"version": 1, "gpus": []})",                              // no tenants
           R"({"version": 1, "tenants": [{"name": "t"}], "gpus": []})",  // no tier, no gpus
           R"({"version": "1", "tenants": [], "gpus": []})",             // wrong type
           R"({"version": 1, "tenants": [], "gpus": [{"index": 0, "uuid": "GPU-a",
               "control_pid": "x", "previous_compute_mode": "DEFAULT", "tenants": []}]})",
       }) {
    auto parsed = MpsState::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr("corrupt")) << text;
  }
}

TEST(MpsStateTest, AnUnknownComputeModeIsRefused) {
  auto parsed = MpsState::Parse(R"({"version": 1, "tenants": [], "gpus": [{"index": 0,
      "uuid": "GPU-a", "control_pid": 0, "previous_compute_mode": "SHARED", "tenants": []}]})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("SHARED"));
}

}  // namespace
}  // namespace gpuslice::daemon::mps
