#include "daemon/tenants/registry_types.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

TEST(RegistryTypesTest, LowerLimitsIsTheTighterOfEachOnEveryGpu) {
  const Limits a = {{kAllGpus, {8, 50}}, {"GPU-0", {4, {}}}};
  const Limits b = {{"GPU-1", {2, 70}}, {"GPU-2", {{}, 20}}};
  const Limits both = LowerLimits(a, b);
  for (const char* gpu : {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}) {
    EXPECT_EQ(LimitOn(both, gpu), Lower(LimitOn(a, gpu), LimitOn(b, gpu))) << gpu;
  }
  EXPECT_EQ(LowerLimits({}, {}), Limits{});
}

TEST(RegistryTypesTest, AGpusOwnEntryOverridesTheFieldsItSets) {
  const Limits limits = {{kAllGpus, {8, 50}}, {"GPU-0", {4, {}}}, {"GPU-1", {{}, 20}}};
  EXPECT_EQ(LimitOn(limits, "GPU-0"), (GpuLimit{4, 50}));
  EXPECT_EQ(LimitOn(limits, "GPU-1"), (GpuLimit{8, 20}));
  EXPECT_EQ(LimitOn(limits, "GPU-2"), (GpuLimit{8, 50}));
  EXPECT_EQ(LimitOn({}, "GPU-0"), GpuLimit{});
  // Lower: the tighter of each field, an unset one no limit.
  EXPECT_EQ(Lower(GpuLimit{4, {}}, GpuLimit{8, 30}), (GpuLimit{4, 30}));
  EXPECT_EQ(Lower(GpuLimit{}, GpuLimit{}), GpuLimit{});
}

TEST(RegistryTypesTest, AScheduleResolvesLikeLimitsAndIsValidatedInRange) {
  const ScheduleSettings schedule = {
      {kAllGpus,
       {.request_percent = 20,
        .priority = Priority::kLatency,
        .weight = 2,
        .memory_request_bytes = {}}},
      {"GPU-0",
       {.request_percent = 50, .priority = {}, .weight = {}, .memory_request_bytes = 1024}}};
  const ScheduleEntry on0 = ScheduleEntryOn(schedule, "GPU-0");
  EXPECT_EQ(on0.request_percent, 50u);
  EXPECT_EQ(on0.priority, Priority::kLatency);
  EXPECT_EQ(on0.weight, 2u);
  EXPECT_EQ(on0.memory_request_bytes, 1024u);
  EXPECT_EQ(ScheduleEntryOn(schedule, "GPU-1"), schedule.at(kAllGpus));
  EXPECT_TRUE(ValidateScheduleEntry(on0, "schedule.0").ok());
  ScheduleEntry bad = on0;
  bad.request_percent = 101;
  const Status s = ValidateScheduleEntry(bad, "schedule.0");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("schedule.0.request"), std::string::npos) << s.message();
  bad = on0;
  bad.weight = 0;
  EXPECT_FALSE(ValidateScheduleEntry(bad, "x").ok());
}

TEST(RegistryTypesTest, TierAndPriorityNamesReadBack) {
  for (Tier t : {Tier::kShared, Tier::kMps, Tier::kMig}) EXPECT_EQ(*ParseTier(TierName(t)), t);
  for (Priority p : {Priority::kBatch, Priority::kLatency}) {
    EXPECT_EQ(*ParsePriority(PriorityName(p)), p);
  }
  EXPECT_EQ(ParseTier("vgpu").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePriority("urgent").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::daemon
