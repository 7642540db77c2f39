#include "cli/limit_flags.h"

#include <gtest/gtest.h>

#include "gpuslice/group_segment.h"

namespace gpuslice::cli {
namespace {

TEST(MemoryLimitEnv, OneQuantityIsPassedAsTyped) {
  EXPECT_EQ(*MemoryLimitEnv("1GiB"), "1GiB");
  EXPECT_EQ(*MemoryLimitEnv(" 512MiB "), "512MiB");
  EXPECT_EQ(*MemoryLimitEnv("1073741824"), "1073741824");
}

TEST(MemoryLimitEnv, DeviceListBecomesJsonInOrder) {
  EXPECT_EQ(*MemoryLimitEnv("0=1GiB,1=2GiB"), R"({"0":"1GiB","1":"2GiB"})");
  EXPECT_EQ(*MemoryLimitEnv("1=2G, GPU-3430e1f2-aa=512MiB"),
            R"({"1":"2G","GPU-3430e1f2-aa":"512MiB"})");
}

TEST(MemoryLimitEnv, RejectsBadValuesAndKeys) {
  for (const char* bad : {"", " ", "abc", "4XB", "0", "0=0", "0=", "=1GiB", "0=1GiB,", "0=1GiB,1",
                          "a b=1GiB", "GPU-=1GiB", "0=1GiB;1=2GiB"}) {
    auto r = MemoryLimitEnv(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' gave " << (r.ok() ? *r : "");
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(MemoryLimitEnv, SameDeviceTwiceIsAnError) {
  for (const char* dup :
       {"0=1GiB,0=2GiB", "1=1GiB,01=2GiB", "GPU-ab=1G,ab=2G", "GPU-AB=1G,gpu-ab=2G"}) {
    auto r = MemoryLimitEnv(dup);
    ASSERT_FALSE(r.ok()) << dup;
    EXPECT_NE(r.status().message().find("twice"), std::string::npos) << r.status().message();
  }
}

TEST(ComputeLimitEnv, ShapesAndRange) {
  EXPECT_EQ(*ComputeLimitEnv("50"), "50");
  EXPECT_EQ(*ComputeLimitEnv("50%"), "50");
  EXPECT_EQ(*ComputeLimitEnv("100"), "100");
  EXPECT_EQ(*ComputeLimitEnv("0=50,1=30%"), R"({"0":50,"1":30})");
  for (const char* bad : {"0", "101", "-5", "1.5", "x", "0=0", "0=50,0=60"}) {
    EXPECT_FALSE(ComputeLimitEnv(bad).ok()) << bad;
  }
}

TEST(ParseMemoryLimit, QuantityOrUnlimited) {
  EXPECT_EQ(*ParseMemoryLimit("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseMemoryLimit("unlimited"), kUnlimitedBytes);
  EXPECT_EQ(*ParseMemoryLimit(" Unlimited "), kUnlimitedBytes);
  EXPECT_FALSE(ParseMemoryLimit("0").ok());
  EXPECT_FALSE(ParseMemoryLimit("0=1GiB").ok());
  EXPECT_FALSE(ParseMemoryLimit("lots").ok());
}

TEST(ParseComputeLimit, PercentOrUnlimited) {
  EXPECT_EQ(*ParseComputeLimit("40"), 40u);
  EXPECT_EQ(*ParseComputeLimit("100"), kUnlimitedPercent);
  EXPECT_EQ(*ParseComputeLimit("unlimited"), kUnlimitedPercent);
  EXPECT_FALSE(ParseComputeLimit("0").ok());
  EXPECT_FALSE(ParseComputeLimit("101").ok());
}

TEST(LimitsByDevice, OneValueIsForEveryDeviceAndUnlimitedIsAccepted) {
  auto m = MemoryLimitsByDevice("4GiB");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].first, "");
  EXPECT_EQ((*m)[0].second, uint64_t{4} << 30);
  EXPECT_EQ(MemoryLimitsByDevice("Unlimited")->front().second, kUnlimitedBytes);
  EXPECT_EQ(ComputeLimitsByDevice("50%")->front().second, 50u);
  EXPECT_EQ(ComputeLimitsByDevice("unlimited")->front().second, kUnlimitedPercent);
}

TEST(LimitsByDevice, DeviceListKeepsKeysAsTypedInOrder) {
  auto m = MemoryLimitsByDevice("1=512MiB, GPU-3430e1f2=unlimited");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0], (std::pair<std::string, uint64_t>{"1", uint64_t{512} << 20}));
  EXPECT_EQ((*m)[1], (std::pair<std::string, uint64_t>{"GPU-3430e1f2", kUnlimitedBytes}));
  auto c = ComputeLimitsByDevice("0=30,1=70");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[1], (std::pair<std::string, uint32_t>{"1", 70}));
}

TEST(LimitsByDevice, RejectsWhatTheEnvFormsReject) {
  for (const char* bad : {"", "0", "0=0", "0=1GiB,0=2GiB", "x y=1GiB", "0=1GiB,"}) {
    EXPECT_FALSE(MemoryLimitsByDevice(bad).ok()) << bad;
  }
  for (const char* bad : {"0", "101", "0=0", "1=50,01=60"}) {
    EXPECT_FALSE(ComputeLimitsByDevice(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gpuslice::cli
