#include "daemon/gpu/setting.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

TEST(SettingTest, ParsesEveryKind) {
  EXPECT_EQ(*ParseSettingValue(SettingKind::kPowerLimit, {{"watts", 300}}),
            SettingValue(PowerLimit{300'000}));
  EXPECT_EQ(*ParseSettingValue(SettingKind::kPowerLimit, {{"watts", 250.5}}),
            SettingValue(PowerLimit{250'500}));
  EXPECT_EQ(*ParseSettingValue(SettingKind::kGpuClocks, {{"min_mhz", 1000}, {"max_mhz", 1500}}),
            SettingValue(GpuClocks{ClockRange{1000, 1500}}));
  EXPECT_EQ(*ParseSettingValue(SettingKind::kMemoryClocks, {{"reset", true}}),
            SettingValue(MemoryClocks{std::nullopt}));
  EXPECT_EQ(*ParseSettingValue(SettingKind::kPersistence, {{"enabled", true}}),
            SettingValue(Persistence{true}));
  EXPECT_EQ(*ParseSettingValue(SettingKind::kComputeMode, {{"mode", "EXCLUSIVE_PROCESS"}}),
            SettingValue(ComputeModeSetting{ComputeMode::kExclusiveProcess}));
}

TEST(SettingTest, LeaseKeysAreIgnoredHere) {
  EXPECT_TRUE(ParseSettingValue(SettingKind::kPowerLimit,
                                {{"watts", 300}, {"lease_s", 60}, {"holder", "x"}})
                  .ok());
}

TEST(SettingTest, RejectsBadBodiesNamingTheField) {
  struct Case {
    SettingKind kind;
    json body;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {SettingKind::kPowerLimit, json::object(), "watts"},
           {SettingKind::kPowerLimit, {{"watts", "300"}}, "watts"},
           {SettingKind::kPowerLimit, {{"watts", -5}}, "watts"},
           {SettingKind::kPowerLimit, {{"watts", 300}, {"volts", 1}}, "volts"},
           {SettingKind::kGpuClocks, {{"min_mhz", 1500}, {"max_mhz", 1000}}, "above"},
           {SettingKind::kGpuClocks, {{"min_mhz", 1500}}, "max_mhz"},
           {SettingKind::kGpuClocks, {{"reset", false}}, "reset"},
           {SettingKind::kPersistence, {{"enabled", 1}}, "enabled"},
           {SettingKind::kComputeMode, {{"mode", "EXCLUSIVE_THREAD"}}, "EXCLUSIVE_THREAD"},
           {SettingKind::kComputeMode, json::array(), "object"},
       }) {
    auto v = ParseSettingValue(c.kind, c.body);
    ASSERT_FALSE(v.ok()) << c.body.dump();
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(c.expect), std::string::npos) << v.status().message();
  }
}

TEST(SettingTest, NamesRoundTrip) {
  for (int i = 0; i < kSettingKindCount; ++i) {
    auto kind = static_cast<SettingKind>(i);
    EXPECT_EQ(*ParseSettingName(SettingName(kind)), kind);
  }
  auto bad = ParseSettingName("fan-speed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("power-limit"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
