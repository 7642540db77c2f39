#include "daemon/gpu/lease_record.h"

#include <gtest/gtest.h>

#include <functional>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

std::vector<LeaseStackRecord> Sample() {
  return {
      {"GPU-a",
       0,
       SettingKind::kPowerLimit,
       PowerLimit{700'000},
       {{"uid:0", PowerLimit{300'000}, int64_t{1'790'000'000'000'000'000}},
        {"uid:1000/job", PowerLimit{350'500}, std::nullopt}}},
      {"GPU-b",
       1,
       SettingKind::kGpuClocks,
       GpuClocks{std::nullopt},
       {{"uid:0", GpuClocks{ClockRange{1000, 1200}}, int64_t{5}}}},
      {"GPU-b", 1, SettingKind::kMemoryClocks, MemoryClocks{ClockRange{800, 900}}, {}},
      {"GPU-b",
       1,
       SettingKind::kPersistence,
       Persistence{false},
       {{"uid:0", Persistence{true}, std::nullopt}}},
      {"GPU-b",
       1,
       SettingKind::kComputeMode,
       ComputeModeSetting{ComputeMode::kDefault},
       {{"mps", ComputeModeSetting{ComputeMode::kExclusiveProcess}, std::nullopt}}},
  };
}

TEST(LeaseRecordTest, EverySettingRoundTripsExactly) {
  const auto records = Sample();
  const json data = LeaseRecordsJson(records);
  // Through text, as on disk.
  auto parsed = ParseLeaseRecords(json::parse(data.dump()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, records);
}

TEST(LeaseRecordTest, TheDocumentedShape) {
  const json data = LeaseRecordsJson({Sample()[0]});
  EXPECT_EQ(data, json::parse(R"({"stacks": [{
      "gpu_uuid": "GPU-a", "gpu_index": 0, "setting": "power-limit",
      "baseline": {"milliwatts": 700000},
      "leases": [
        {"holder": "uid:0", "value": {"milliwatts": 300000}, "expires_at_ns": 1790000000000000000},
        {"holder": "uid:1000/job", "value": {"milliwatts": 350500}, "expires_at_ns": null}]}]})"));
}

// The duration and the same-boot monotonic expiry (rule 8 of gpu_manager.h)
// round-trip; records from before them (none of the keys) still parse; a
// monotonic expiry without its boot (or a negative one) is refused.
TEST(LeaseRecordTest, DurationAndMonotonicExpiryRoundTripAndAreOptional) {
  std::vector<LeaseStackRecord> records = {
      {"GPU-a",
       0,
       SettingKind::kPowerLimit,
       PowerLimit{700'000},
       {{"uid:0", PowerLimit{300'000}, int64_t{1'790'000'000'000'000'000}, int64_t{600'000'000'000},
         "3f1c2a9e-boot", int64_t{86'400'000'000'000}}}}};
  const json data = LeaseRecordsJson(records);
  const json& lease = data["stacks"][0]["leases"][0];
  EXPECT_EQ(lease["lease_ns"], 600'000'000'000);
  EXPECT_EQ(lease["boot_id"], "3f1c2a9e-boot");
  EXPECT_EQ(lease["expires_mono_ns"], 86'400'000'000'000);
  auto parsed = ParseLeaseRecords(json::parse(data.dump()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, records);

  json old = data;
  for (const char* key : {"lease_ns", "boot_id", "expires_mono_ns"}) {
    old["stacks"][0]["leases"][0].erase(key);
  }
  parsed = ParseLeaseRecords(old);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ((*parsed)[0].leases[0].lease_ns, std::nullopt);
  EXPECT_EQ((*parsed)[0].leases[0].expires_mono_ns, std::nullopt);

  json orphan = data;
  orphan["stacks"][0]["leases"][0].erase("boot_id");
  EXPECT_FALSE(ParseLeaseRecords(orphan).ok());
  json negative = data;
  negative["stacks"][0]["leases"][0]["lease_ns"] = -1;
  EXPECT_FALSE(ParseLeaseRecords(negative).ok());
}

TEST(LeaseRecordTest, AKeptLeaseSaysSoAndOthersSayNothing) {
  std::vector<LeaseStackRecord> records = {
      {"GPU-a",
       0,
       SettingKind::kComputeMode,
       ComputeModeSetting{ComputeMode::kDefault},
       {{"uid:0", ComputeModeSetting{ComputeMode::kProhibited}, std::nullopt},
        {"mps", ComputeModeSetting{ComputeMode::kExclusiveProcess}, std::nullopt, std::nullopt, "",
         std::nullopt, /*kept=*/true}}}};
  const json data = LeaseRecordsJson(records);
  EXPECT_FALSE(data["stacks"][0]["leases"][0].contains("kept"));
  EXPECT_EQ(data["stacks"][0]["leases"][1]["kept"], true);
  auto parsed = ParseLeaseRecords(json::parse(data.dump()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, records);
  json wrong = data;
  wrong["stacks"][0]["leases"][1]["kept"] = "yes";
  EXPECT_FALSE(ParseLeaseRecords(wrong).ok());
}

TEST(LeaseRecordTest, AnEmptyRecordHasNoStacks) {
  auto parsed = ParseLeaseRecords(LeaseRecordsJson({}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
}

// Each malformed document is refused whole, naming where.
TEST(LeaseRecordTest, MalformedRecordsAreRefusedNamingTheField) {
  const json good = LeaseRecordsJson(Sample());
  struct Case {
    const char* name;
    std::function<void(json&)> spoil;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"not an object", [](json& j) { j = json::array(); }, "must be an object"},
      {"no stacks", [](json& j) { j.erase("stacks"); }, "\"stacks\""},
      {"stacks not array", [](json& j) { j["stacks"] = 3; }, "\"stacks\" must be an array"},
      {"no uuid", [](json& j) { j["stacks"][0].erase("gpu_uuid"); }, "stacks[0]: missing"},
      {"unknown setting", [](json& j) { j["stacks"][0]["setting"] = "fan"; }, "unknown setting"},
      {"baseline of another kind",
       [](json& j) {
         j["stacks"][0]["baseline"] = {{"enabled", true}};
       },
       "stacks[0].baseline"},
      {"negative milliwatts",
       [](json& j) { j["stacks"][0]["leases"][0]["value"]["milliwatts"] = -5; },
       "stacks[0].leases[0].value"},
      {"expiry as text", [](json& j) { j["stacks"][0]["leases"][0]["expires_at_ns"] = "soon"; },
       "expires_at_ns"},
      {"missing expiry", [](json& j) { j["stacks"][0]["leases"][0].erase("expires_at_ns"); },
       "expires_at_ns"},
      {"two leases of one holder", [](json& j) { j["stacks"][0]["leases"][1]["holder"] = "uid:0"; },
       "holds two leases"},
      {"two stacks of one setting", [](json& j) { j["stacks"][1]["setting"] = "memory-clocks"; },
       "a second memory-clocks"},
      {"bad clock range",
       [](json& j) {
         j["stacks"][1]["leases"][0]["value"]["locked"] = {{"min_mhz", 9}, {"max_mhz", 1}};
       },
       "min_mhz is above max_mhz"},
      {"unknown compute mode",
       [](json& j) { j["stacks"][4]["leases"][0]["value"]["mode"] = "TURBO"; }, "stacks[4]"},
  };
  for (const Case& c : cases) {
    json bad = good;
    c.spoil(bad);
    auto parsed = ParseLeaseRecords(bad);
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(parsed.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << parsed.status().message();
  }
}

}  // namespace
}  // namespace gpuslice::daemon
