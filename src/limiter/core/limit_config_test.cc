#include "limiter/core/limit_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuslice::limiter {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using Vars = std::map<std::string, std::string, std::less<>>;

constexpr char kUuid0[] = "GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab";
constexpr char kUuid1[] = "GPU-5678abcd-1234-4cde-9f00-fedcba987654";
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr char kPodUid[] = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";

std::vector<DeviceId> TwoDevices() { return {{0, kUuid0}, {1, kUuid1}}; }

// A getenv over a map that records every name asked for.
class FakeEnv {
 public:
  explicit FakeEnv(Vars vars) : vars_(std::move(vars)) {}

  EnvLookup Lookup() {
    return [this](std::string_view name) -> const char* {
      looked_up_.emplace_back(name);
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }
  const std::vector<std::string>& looked_up() const { return looked_up_; }

 private:
  Vars vars_;
  std::vector<std::string> looked_up_;
};

StatusOr<LimitConfig> Parse(Vars vars, std::vector<DeviceId> devices = TwoDevices(),
                            std::string_view cgroup = "0::/\n", int pid = 42) {
  FakeEnv env(std::move(vars));
  return ParseLimitConfig(env.Lookup(), devices, cgroup, pid);
}

// The config for `vars` on TwoDevices(); fails the test if there is none.
LimitConfig Config(Vars vars) {
  auto r = Parse(std::move(vars));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : LimitConfig{};
}

std::vector<std::optional<uint64_t>> Memory(const Vars& vars) {
  std::vector<std::optional<uint64_t>> out;
  for (const DeviceLimits& d : Config(vars).devices) out.push_back(d.memory_bytes);
  return out;
}

std::vector<std::optional<uint32_t>> Compute(const Vars& vars) {
  std::vector<std::optional<uint32_t>> out;
  for (const DeviceLimits& d : Config(vars).devices) out.push_back(d.compute_percent);
  return out;
}

using Mem = std::vector<std::optional<uint64_t>>;
using Pct = std::vector<std::optional<uint32_t>>;

// The message of the InvalidArgument `vars` must produce; checks it is one line.
std::string ErrorFor(Vars vars) {
  auto r = Parse(std::move(vars));
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "(parsed without error)";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  const std::string& m = r.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find('\r'), std::string::npos) << m;
  return m;
}

// ---- no configuration ----

TEST(LimitConfigParse, NothingSetMeansUnlimited) {
  LimitConfig c = Config({});
  ASSERT_EQ(c.devices.size(), 2u);
  for (const DeviceLimits& d : c.devices) {
    EXPECT_EQ(d.memory_bytes, std::nullopt);
    EXPECT_EQ(d.compute_percent, std::nullopt);
  }
  EXPECT_EQ(c.group, "pid-42");
}

TEST(LimitConfigParse, NoDevicesGivesNoLimits) {
  auto r = Parse({{"GPUSLICE_MEMORY_LIMIT", "4GiB"}}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->devices.empty());
}

// ---- GPUSLICE_MEMORY_LIMIT ----

TEST(LimitConfigGpusliceMemory, OneQuantityForEveryDevice) {
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "4GiB"}}), (Mem{4 * kGiB, 4 * kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "512MiB"}}), (Mem{512 * kMiB, 512 * kMiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "8G"}}), (Mem{8 * kGiB, 8 * kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "1073741824"}}), (Mem{kGiB, kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", " \t2GiB \n"}}), (Mem{2 * kGiB, 2 * kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "1GB"}}), (Mem{1'000'000'000, 1'000'000'000}));
}

TEST(LimitConfigGpusliceMemory, JsonByIndexAndUuid) {
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT",
                     R"({"0":"4GiB","GPU-5678abcd-1234-4cde-9f00-fedcba987654":"2GiB"})"}}),
            (Mem{4 * kGiB, 2 * kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", R"({"1": 1073741824})"}}), (Mem{std::nullopt, kGiB}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", R"(  { "0" : " 512MiB " }  )"}}),
            (Mem{512 * kMiB, std::nullopt}));
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT", "{}"}}), (Mem{std::nullopt, std::nullopt}));
}

TEST(LimitConfigGpusliceMemory, TwoKeysForOneDeviceTakeTheSmaller) {
  EXPECT_EQ(Memory({{"GPUSLICE_MEMORY_LIMIT",
                     R"({"0":"4GiB","GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab":"3GiB"})"}}),
            (Mem{3 * kGiB, std::nullopt}));
}

// ---- GPUSLICE_COMPUTE_LIMIT ----

TEST(LimitConfigGpusliceCompute, OnePercentForEveryDevice) {
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "30"}}), (Pct{30, 30}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", " 45% "}}), (Pct{45, 45}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "1"}}), (Pct{1, 1}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "99"}}), (Pct{99, 99}));
}

TEST(LimitConfigGpusliceCompute, HundredMeansUnlimited) {
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "100"}}), (Pct{std::nullopt, std::nullopt}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "100%"}}), (Pct{std::nullopt, std::nullopt}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 100, "1": 50})"}}),
            (Pct{std::nullopt, 50}));
}

TEST(LimitConfigGpusliceCompute, JsonByIndexAndUuid) {
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 25, "1": "50%"})"}}), (Pct{25, 50}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT",
                      R"({"GPU-3430F3A1-52B6-4C1D-8A2E-0123456789AB": "10"})"}}),
            (Pct{10, std::nullopt}));
}

// ---- TENSOR_FUSION_CUDA_MEM_LIMIT / TENSOR_FUSION_CUDA_UP_LIMIT ----

TEST(LimitConfigTensorFusion, MemoryBytesByUuidOrIndex) {
  EXPECT_EQ(
      Memory({{"TENSOR_FUSION_CUDA_MEM_LIMIT",
               R"({"GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab": 1073741824, "1": "2147483648"})"}}),
      (Mem{kGiB, 2 * kGiB}));
}

TEST(LimitConfigTensorFusion, ComputePercentByUuidOrIndex) {
  EXPECT_EQ(Compute({{"TENSOR_FUSION_CUDA_UP_LIMIT",
                      R"({"gpu-5678ABCD-1234-4cde-9f00-fedcba987654": 40, "0": "20"})"}}),
            (Pct{20, 40}));
  EXPECT_EQ(Compute({{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 100})"}}),
            (Pct{std::nullopt, std::nullopt}));
}

TEST(LimitConfigTensorFusion, UuidKeysIgnoreCaseAndTheGpuPrefix) {
  for (const char* key :
       {"GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab", "GPU-3430F3A1-52B6-4C1D-8A2E-0123456789AB",
        "gpu-3430f3a1-52b6-4c1d-8a2e-0123456789ab", "3430f3a1-52b6-4c1d-8a2e-0123456789ab",
        "3430F3A1-52B6-4C1D-8A2E-0123456789AB"}) {
    std::string json = std::string(R"({")") + key + R"(": 4096})";
    EXPECT_EQ(Memory({{"TENSOR_FUSION_CUDA_MEM_LIMIT", json}}), (Mem{4096, std::nullopt})) << key;
  }
}

TEST(LimitConfigTensorFusion, DeviceUuidWithoutPrefixOrInUpperCaseMatches) {
  std::vector<DeviceId> devices = {{0, "3430F3A1-52B6-4C1D-8A2E-0123456789AB"}};
  FakeEnv env(
      Vars{{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab": 8})"}});
  auto r = ParseLimitConfig(env.Lookup(), devices, "", 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->devices.at(0).memory_bytes, 8u);
}

// ---- HAMi: CUDA_DEVICE_MEMORY_LIMIT[_i], CUDA_DEVICE_SM_LIMIT[_i] ----

TEST(LimitConfigHami, MemorySuffixesArePowersOf1024) {
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}), (Mem{kGiB, kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "3G"}}), (Mem{3 * kGiB, 3 * kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "512m"}}), (Mem{512 * kMiB, 512 * kMiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "40960M"}}), (Mem{40 * kGiB, 40 * kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "2048k"}}), (Mem{2 * kMiB, 2 * kMiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "7K"}}), (Mem{7168, 7168}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "2Gi"}}), (Mem{2 * kGiB, 2 * kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "2GiB"}}), (Mem{2 * kGiB, 2 * kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "123456"}}), (Mem{123456, 123456}));
}

TEST(LimitConfigHami, PerDeviceVariableReplacesThePlainOne) {
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "8g"}}),
            (Mem{4 * kGiB, 8 * kGiB}));
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}}), (Mem{kGiB, std::nullopt}));
  EXPECT_EQ(Compute({{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_0", "50"}}),
            (Pct{50, 30}));
  EXPECT_EQ(Compute({{"CUDA_DEVICE_SM_LIMIT_1", "20"}}), (Pct{std::nullopt, 20}));
}

TEST(LimitConfigHami, ZeroMeansNoLimit) {
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "0"}}), (Mem{std::nullopt, std::nullopt}));
  EXPECT_EQ(Compute({{"CUDA_DEVICE_SM_LIMIT", "0"}}), (Pct{std::nullopt, std::nullopt}));
  // A per-device 0 falls back to the plain variable, as in HAMi-core.
  EXPECT_EQ(Memory({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "0"}}),
            (Mem{2 * kGiB, 2 * kGiB}));
  EXPECT_EQ(Compute({{"CUDA_DEVICE_SM_LIMIT", "0"}, {"CUDA_DEVICE_SM_LIMIT_1", "25"}}),
            (Pct{std::nullopt, 25}));
}

TEST(LimitConfigHami, SmHundredMeansUnlimited) {
  EXPECT_EQ(Compute({{"CUDA_DEVICE_SM_LIMIT", "100"}}), (Pct{std::nullopt, std::nullopt}));
}

TEST(LimitConfigHami, PerDeviceNamesUseTheDeviceIndex) {
  std::vector<DeviceId> devices = {{2, kUuid0}, {5, kUuid1}};
  FakeEnv env(Vars{{"CUDA_DEVICE_MEMORY_LIMIT_5", "1g"},
                   {"CUDA_DEVICE_MEMORY_LIMIT_0", "not even a number"},
                   {"CUDA_DEVICE_SM_LIMIT_2", "10"}});
  auto r = ParseLimitConfig(env.Lookup(), devices, "", 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->devices.at(0).memory_bytes, std::nullopt);
  EXPECT_EQ(r->devices.at(1).memory_bytes, kGiB);
  EXPECT_EQ(r->devices.at(0).compute_percent, 10u);
  EXPECT_EQ(r->devices.at(1).compute_percent, std::nullopt);
  EXPECT_THAT(env.looked_up(), Not(testing::Contains("CUDA_DEVICE_MEMORY_LIMIT_0")));
  EXPECT_THAT(env.looked_up(), testing::Contains("CUDA_DEVICE_SM_LIMIT_5"));
}

// ---- several sources ----

TEST(LimitConfigPrecedence, SmallestMemoryLimitWins) {
  Vars vars = {{"GPUSLICE_MEMORY_LIMIT", "4GiB"},
               {"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": 2147483648})"},
               {"CUDA_DEVICE_MEMORY_LIMIT", "3g"}};
  EXPECT_EQ(Memory(vars), (Mem{2 * kGiB, 3 * kGiB}));
  vars["CUDA_DEVICE_MEMORY_LIMIT_0"] = "1g";
  EXPECT_EQ(Memory(vars), (Mem{kGiB, 3 * kGiB}));
  vars["GPUSLICE_MEMORY_LIMIT"] = R"({"1": "512MiB"})";
  EXPECT_EQ(Memory(vars), (Mem{kGiB, 512 * kMiB}));
}

TEST(LimitConfigPrecedence, SmallestComputeLimitWins) {
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "100"},
                     {"CUDA_DEVICE_SM_LIMIT", "30"},
                     {"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"1": 20})"}}),
            (Pct{30, 20}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", "60"}, {"CUDA_DEVICE_SM_LIMIT", "0"}}),
            (Pct{60, 60}));
  EXPECT_EQ(Compute({{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 10})"},
                     {"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 90})"}}),
            (Pct{10, std::nullopt}));
}

TEST(LimitConfigPrecedence, MemoryAndComputeAreIndependent) {
  LimitConfig c = Config({{"GPUSLICE_MEMORY_LIMIT", "1GiB"}, {"GPUSLICE_COMPUTE_LIMIT", "50"}});
  ASSERT_EQ(c.devices.size(), 2u);
  EXPECT_EQ(c.devices[1].memory_bytes, kGiB);
  EXPECT_EQ(c.devices[1].compute_percent, 50u);
}

// ---- errors ----

struct ErrorCase {
  const char* var;
  const char* value;
  const char* problem;  // a substring of the message
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.var << "=" << c.value; }

class LimitConfigBadValue : public testing::TestWithParam<ErrorCase> {};

TEST_P(LimitConfigBadValue, NamesTheVariableAndTheProblemOnOneLine) {
  const ErrorCase& c = GetParam();
  EXPECT_THAT(ErrorFor({{c.var, c.value}}),
              AllOf(StartsWith(std::string(c.var) + ": "), HasSubstr(c.problem)));
}

INSTANTIATE_TEST_SUITE_P(
    LimitConfigGpusliceMemory, LimitConfigBadValue,
    testing::Values(
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "4GX", "unknown unit 'GX' in '4GX'"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "", "empty value"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "   ", "empty value"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "0", "memory limit of 0 bytes"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "0GiB", "memory limit of 0 bytes"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "-1", "negative memory limit '-1'"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "lots", "'lots' is not a byte quantity"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", "99999999999PiB", "too large"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": "4GiB")", "malformed JSON"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({0: 1})", "malformed JSON"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": true})",
                  "key '0': expected a quantity string or a non-negative integer number of bytes, "
                  "got boolean true"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": null})", "got null null"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": [1]})", "got array [1]"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": -5})", "key '0': negative memory limit -5"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": 1.5})",
                  "1.5 is not an integer number of bytes"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": 0})", "key '0': a memory limit of 0 bytes"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": "0"})", "key '0': a memory limit of 0 bytes"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": ""})", "key '0': empty value"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"0": "4GX"})", "key '0': unknown unit 'GX'"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"7": "1GiB"})",
                  "no device with index '7' (devices: 0, 1)"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"-1": "1GiB"})", "no device with index '-1'"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"": "1GiB"})", "empty device key"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"({"GPU-deadbeef": "1GiB"})",
                  "no device with UUID 'GPU-deadbeef' (devices: "
                  "GPU-3430f3a1-52b6-4c1d-8a2e-0123456789ab, "
                  "GPU-5678abcd-1234-4cde-9f00-fedcba987654)"},
        ErrorCase{"GPUSLICE_MEMORY_LIMIT", R"(["4GiB"])", "expected a JSON object"}));

INSTANTIATE_TEST_SUITE_P(
    LimitConfigGpusliceCompute, LimitConfigBadValue,
    testing::Values(
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "0", "compute limit of 0%"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "0%", "compute limit of 0%"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "101", "percentage '101' is above 100"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "1000", "'1000' is not a percentage"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "-5", "negative percentage '-5'"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "12.5", "fractional percentage '12.5'"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "half", "'half' is not a percentage"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", "", "empty value"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 0})", "key '0': a compute limit of 0%"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 101})",
                  "key '0': percentage 101 is above 100"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 12.5})", "fractional percentage 12.5"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": -3})", "negative percentage -3"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": "x"})", "key '0': 'x' is not a percentage"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": false})",
                  "expected an integer percent or a percent string, got boolean false"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"2": 50})", "no device with index '2'"},
        ErrorCase{"GPUSLICE_COMPUTE_LIMIT", R"({"0": 50)", "malformed JSON"}));

INSTANTIATE_TEST_SUITE_P(
    LimitConfigTensorFusion, LimitConfigBadValue,
    testing::Values(
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", "4GiB", "malformed JSON"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", "1073741824", "expected a JSON object"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", "", "empty value"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": "4GiB"})",
                  "key '0': '4GiB' is not a number of bytes"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": 0})", "a memory limit of 0 bytes"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": -1})", "negative memory limit -1"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": "99999999999999999999999"})",
                  "is too large"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": {"bytes": 1}})",
                  "expected an integer number of bytes or a string of digits, got object"},
        ErrorCase{"TENSOR_FUSION_CUDA_MEM_LIMIT",
                  R"({"GPU-dead0000-0000-0000-0000-000000000000": 1})",
                  "no device with UUID 'GPU-dead0000-0000-0000-0000-000000000000' (devices: "
                  "GPU-3430f3a1"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 150})", "percentage 150 is above 100"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 0})", "a compute limit of 0%"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 33.3})", "fractional percentage 33.3"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"GPU-": 50})", "no device with UUID 'GPU-'"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", "50", "expected a JSON object"},
        ErrorCase{"TENSOR_FUSION_CUDA_UP_LIMIT", "{", "malformed JSON"}));

INSTANTIATE_TEST_SUITE_P(
    LimitConfigHami, LimitConfigBadValue,
    testing::Values(ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT", "4x", "unknown unit 'x' in '4x'"},
                    ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT", "-1g", "negative memory limit '-1g'"},
                    ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT", "", "empty value"},
                    ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT", "g", "'g' is not a byte quantity"},
                    ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT_1", "abc", "'abc' is not a byte quantity"},
                    ErrorCase{"CUDA_DEVICE_MEMORY_LIMIT_0", " ", "empty value"},
                    ErrorCase{"CUDA_DEVICE_SM_LIMIT", "101", "percentage '101' is above 100"},
                    ErrorCase{"CUDA_DEVICE_SM_LIMIT", "-1", "negative percentage '-1'"},
                    ErrorCase{"CUDA_DEVICE_SM_LIMIT_0", "2.5", "fractional percentage '2.5'"},
                    ErrorCase{"CUDA_DEVICE_SM_LIMIT_1", "lots", "'lots' is not a percentage"}));

INSTANTIATE_TEST_SUITE_P(
    LimitConfigGroup, LimitConfigBadValue,
    testing::Values(ErrorCase{"GPUSLICE_GROUP", "", "empty value"},
                    ErrorCase{"GPUSLICE_GROUP", "a/b", "'a/b' is not a valid group id"},
                    ErrorCase{"GPUSLICE_GROUP", ".hidden", "'.hidden' is not a valid group id"},
                    ErrorCase{"GPUSLICE_GROUP", "a b", "'a b' is not a valid group id"},
                    ErrorCase{"GPUSLICE_GROUP", "../../etc", "is not a valid group id"}));

TEST(LimitConfigErrors, ControlCharactersInValuesAreEscaped) {
  std::string m = ErrorFor({{"GPUSLICE_MEMORY_LIMIT", "4\nGX"}});
  EXPECT_THAT(m, AllOf(StartsWith("GPUSLICE_MEMORY_LIMIT: "), HasSubstr("4\\nGX")));
  m = ErrorFor({{"GPUSLICE_GROUP", "team\r\nb"}});
  EXPECT_THAT(m, AllOf(StartsWith("GPUSLICE_GROUP: "), HasSubstr("team\\r\\nb")));
  m = ErrorFor({{"GPUSLICE_GROUP", std::string("a\x01") + "b"}});
  EXPECT_THAT(m, HasSubstr("a\\x01b"));
}

TEST(LimitConfigErrors, JsonParserMessageIsFlattened) {
  std::string m = ErrorFor({{"TENSOR_FUSION_CUDA_MEM_LIMIT", "{\n  \"0\": 1,\n  \"1\" 2\n}"}});
  EXPECT_THAT(m, AllOf(StartsWith("TENSOR_FUSION_CUDA_MEM_LIMIT: malformed JSON: "),
                       HasSubstr("line 3"), Not(HasSubstr("json.exception"))));
  m = ErrorFor({{"GPUSLICE_MEMORY_LIMIT", "{\"0\": \"4\nGiB\"}"}});
  EXPECT_THAT(m, StartsWith("GPUSLICE_MEMORY_LIMIT: malformed JSON: "));
}

TEST(LimitConfigErrors, VeryLongValuesGiveABoundedMessage) {
  std::string m = ErrorFor({{"GPUSLICE_MEMORY_LIMIT", "4" + std::string(100000, 'X')}});
  EXPECT_THAT(m, StartsWith("GPUSLICE_MEMORY_LIMIT: unknown unit"));
  EXPECT_LE(m.size(), 1010u);
}

TEST(LimitConfigErrors, GroupLongerThan100IsRejected) {
  std::string m = ErrorFor({{"GPUSLICE_GROUP", std::string(101, 'g')}});
  EXPECT_THAT(m, AllOf(StartsWith("GPUSLICE_GROUP: "), HasSubstr("is not a valid group id")));
}

TEST(LimitConfigErrors, AnExceptionFromTheLookupBecomesAStatus) {
  EnvLookup throwing = [](std::string_view) -> const char* { throw std::runtime_error("boom"); };
  std::vector<DeviceId> devices = TwoDevices();
  auto r = ParseLimitConfig(throwing, devices, "", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("boom"));
}

// ---- the group ----

TEST(LimitConfigGroup, FromTheEnvironment) {
  EXPECT_EQ(Config({{"GPUSLICE_GROUP", "team-a"}}).group, "team-a");
  EXPECT_EQ(Config({{"GPUSLICE_GROUP", "  team_b.v2 \n"}}).group, "team_b.v2");
  EXPECT_EQ(Config({{"GPUSLICE_GROUP", std::string(100, 'g')}}).group, std::string(100, 'g'));
}

TEST(LimitConfigGroup, DefaultsToThePodThenToThePid) {
  std::string cgroup = std::string("0::/kubepods/burstable/pod") + kPodUid + "/abc123\n";
  auto r = Parse({}, TwoDevices(), cgroup, 7);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->group, std::string("pod-") + kPodUid);
  r = Parse({}, TwoDevices(), "0::/user.slice/user-1000.slice/session-2.scope\n", 7);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->group, "pid-7");
  r = Parse({{"GPUSLICE_GROUP", "mine"}}, TwoDevices(), cgroup, 7);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->group, "mine");
}

TEST(LimitConfigValidGroupId, AcceptsTheDocumentedAlphabet) {
  EXPECT_TRUE(ValidGroupId("a"));
  EXPECT_TRUE(ValidGroupId("pod-0a1b2c3d-4e5f-6789-abcd-ef0123456789"));
  EXPECT_TRUE(ValidGroupId("Team_A.v2-x"));
  EXPECT_TRUE(ValidGroupId("a.."));
  EXPECT_TRUE(ValidGroupId("-"));
  EXPECT_TRUE(ValidGroupId(std::string(100, 'x')));
}

TEST(LimitConfigValidGroupId, RejectsEverythingElse) {
  EXPECT_FALSE(ValidGroupId(""));
  EXPECT_FALSE(ValidGroupId(std::string(101, 'x')));
  EXPECT_FALSE(ValidGroupId("."));
  EXPECT_FALSE(ValidGroupId(".."));
  EXPECT_FALSE(ValidGroupId(".a"));
  for (const char* bad : {"a/b", "a b", "a:b", "a\nb", "ä", "a*", "a\\b", "x%"}) {
    EXPECT_FALSE(ValidGroupId(bad)) << bad;
  }
  EXPECT_FALSE(ValidGroupId(std::string_view("a\0b", 3)));
}

// ---- DefaultGroup ----

TEST(LimitConfigDefaultGroup, CgroupV1Cgroupfs) {
  std::string text =
      "12:memory:/kubepods/burstable/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/"
      "5f3c1e0b9a2d\n"
      "11:cpu,cpuacct:/kubepods/burstable/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/"
      "5f3c1e0b9a2d\n"
      "1:name=systemd:/kubepods/burstable/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/"
      "5f3c1e0b9a2d\n"
      "0::/\n";
  EXPECT_EQ(DefaultGroup(text, 9), "pod-0a1b2c3d-4e5f-6789-abcd-ef0123456789");
}

TEST(LimitConfigDefaultGroup, CgroupV1GuaranteedPodHasNoQosLevel) {
  EXPECT_EQ(DefaultGroup("4:devices:/kubepods/pod11112222-3333-4444-5555-666677778888/c0ffee\n", 9),
            "pod-11112222-3333-4444-5555-666677778888");
}

TEST(LimitConfigDefaultGroup, CgroupV2Cgroupfs) {
  EXPECT_EQ(DefaultGroup("0::/kubepods/besteffort/podaaaabbbb-cccc-dddd-eeee-ffff00001111/"
                         "3a4b5c6d7e8f\n",
                         9),
            "pod-aaaabbbb-cccc-dddd-eeee-ffff00001111");
}

TEST(LimitConfigDefaultGroup, SystemdDriver) {
  EXPECT_EQ(DefaultGroup("0::/kubepods.slice/kubepods-burstable.slice/"
                         "kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/"
                         "cri-containerd-0123456789abcdef.scope\n",
                         9),
            "pod-0a1b2c3d-4e5f-6789-abcd-ef0123456789");
  EXPECT_EQ(DefaultGroup("0::/kubepods.slice/"
                         "kubepods-pod11112222_3333_4444_5555_666677778888.slice/"
                         "docker-abc.scope",
                         9),
            "pod-11112222-3333-4444-5555-666677778888");
  EXPECT_EQ(DefaultGroup("0::/kubepods.slice/kubepods-besteffort.slice/"
                         "kubepods-besteffort-podAAAABBBB_CCCC_DDDD_EEEE_FFFF00001111.slice/"
                         "crio-1.scope\n",
                         9),
            "pod-aaaabbbb-cccc-dddd-eeee-ffff00001111");
}

TEST(LimitConfigDefaultGroup, SystemdDriverV1) {
  std::string text =
      "12:pids:/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/"
      "cri-containerd-0123.scope\n"
      "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/"
      "cri-containerd-0123.scope\n";
  EXPECT_EQ(DefaultGroup(text, 9), "pod-0a1b2c3d-4e5f-6789-abcd-ef0123456789");
}

TEST(LimitConfigDefaultGroup, StaticPodUidIsAnUndashedHash) {
  EXPECT_EQ(DefaultGroup("0::/kubepods/burstable/pod3b5d3f6d8b2a4d1e9f0a1b2c3d4e5f60/abc\n", 9),
            "pod-3b5d3f6d8b2a4d1e9f0a1b2c3d4e5f60");
}

TEST(LimitConfigDefaultGroup, NotKubernetesGivesThePid) {
  EXPECT_EQ(DefaultGroup("", 1234), "pid-1234");
  EXPECT_EQ(DefaultGroup("0::/\n", 1234), "pid-1234");
  EXPECT_EQ(DefaultGroup("0::/user.slice/user-1000.slice/session-3.scope\n", 1234), "pid-1234");
  EXPECT_EQ(DefaultGroup("0::/system.slice/docker-0123456789abcdef.scope\n", 1234), "pid-1234");
  EXPECT_EQ(DefaultGroup("12:memory:/docker/0123456789abcdef\n1:name=systemd:/init.scope\n", 77),
            "pid-77");
  // A pod-like name outside a kubepods hierarchy, and malformed UIDs.
  EXPECT_EQ(DefaultGroup("0::/mypods/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/x\n", 5), "pid-5");
  EXPECT_EQ(DefaultGroup("0::/kubepods/burstable/podxyz/abc\n", 5), "pid-5");
  EXPECT_EQ(DefaultGroup("0::/kubepods/burstable/pod0a1b2c3d-4e5f-6789-abcd-ef012345678g/a\n", 5),
            "pid-5");
  EXPECT_EQ(DefaultGroup("no colons here\n", 5), "pid-5");
}

TEST(LimitConfigDefaultGroup, ResultIsAValidGroupId) {
  EXPECT_TRUE(
      ValidGroupId(DefaultGroup("0::/kubepods/podAAAABBBB-CCCC-DDDD-EEEE-FFFF00001111/\n", 1)));
  EXPECT_TRUE(ValidGroupId(DefaultGroup("", 2147483647)));
}

// ---- the schedule (GPUSLICE_COMPUTE_REQUEST, GPUSLICE_PRIORITY, GPUSLICE_WEIGHT) ----

TEST(LimitConfigSchedule, UnsetWhenNoneOfItsVariablesIs) {
  EXPECT_EQ(Config({}).schedule, std::nullopt);
  FakeEnv env({});
  auto alone = ParseScheduleRequest(env.Lookup());
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(*alone, std::nullopt);
}

TEST(LimitConfigSchedule, ReadsRequestPriorityAndWeight) {
  LimitConfig c = Config({{"GPUSLICE_COMPUTE_REQUEST", " 30% "},
                          {"GPUSLICE_PRIORITY", "Latency"},
                          {"GPUSLICE_WEIGHT", "7"},
                          {"GPUSLICE_COMPUTE_LIMIT", "50"}});
  ASSERT_TRUE(c.schedule.has_value());
  EXPECT_EQ(c.schedule->request_percent, 30u);
  EXPECT_EQ(c.schedule->priority, "latency");
  EXPECT_EQ(c.schedule->weight, 7u);
  // One alone; a request of 0 is a request.
  LimitConfig w = Config({{"GPUSLICE_WEIGHT", "1000"}});
  ASSERT_TRUE(w.schedule.has_value());
  EXPECT_EQ(w.schedule->request_percent, std::nullopt);
  EXPECT_EQ(w.schedule->priority, std::nullopt);
  EXPECT_EQ(Config({{"GPUSLICE_COMPUTE_REQUEST", "0"}}).schedule->request_percent, 0u);
}

TEST(LimitConfigSchedule, AMalformedValueIsAnErrorNamingTheVariable) {
  for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"GPUSLICE_COMPUTE_REQUEST", ""},
           {"GPUSLICE_COMPUTE_REQUEST", "150"},
           {"GPUSLICE_COMPUTE_REQUEST", "12.5"},
           {"GPUSLICE_COMPUTE_REQUEST", "-3"},
           {"GPUSLICE_COMPUTE_REQUEST", "half"},
           {"GPUSLICE_PRIORITY", "urgent"},
           {"GPUSLICE_PRIORITY", ""},
           {"GPUSLICE_WEIGHT", "0"},
           {"GPUSLICE_WEIGHT", "1001"},
           {"GPUSLICE_WEIGHT", "2x"},
           {"GPUSLICE_WEIGHT", ""},
       }) {
    EXPECT_THAT(ErrorFor({{var, value}}), StartsWith(var + ": ")) << value;
  }
  // Above a device's compute limit: impossible.
  EXPECT_THAT(
      ErrorFor({{"GPUSLICE_COMPUTE_REQUEST", "60"}, {"GPUSLICE_COMPUTE_LIMIT", R"({"1": 40})"}}),
      AllOf(StartsWith("GPUSLICE_COMPUTE_REQUEST: "), HasSubstr("device 1 (40%)")));
}

}  // namespace
}  // namespace gpuslice::limiter
