#include "common/quantity.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

TEST(ParseBytes, PlainAndBinaryUnits) {
  EXPECT_EQ(*ParseBytes("1073741824"), 1073741824u);
  EXPECT_EQ(*ParseBytes("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("4Gi"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("4G"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("4g"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes(" 512 m "), 512ull << 20);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseBytes("2k"), 2048u);
  EXPECT_EQ(*ParseBytes("7B"), 7u);
}

TEST(ParseBytes, DecimalUnitsNeedB) {
  EXPECT_EQ(*ParseBytes("8GB"), 8'000'000'000u);
  EXPECT_EQ(*ParseBytes("1KB"), 1000u);
}

// Found by tests/fuzz/limit_config_fuzz (corpus/limit_config_fuzz/huge_bytes):
// quantities from 2^63 to 2^64 used to read as 2^63.
TEST(ParseBytes, QuantitiesAbove2To63KeepTheirValue) {
  EXPECT_EQ(*ParseBytes("9300000000000000000"), 9'300'000'000'000'000'000u);
  EXPECT_EQ(*ParseBytes("10000PB"), 10'000'000'000'000'000'000u);
}

TEST(ParseBytes, RejectsBadInputWithAClearMessage) {
  for (const char* bad : {"", "  ", "-1", "GiB", "4 parsecs", "4XB", "1e3", "abc", "4GiBs"}) {
    auto r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(r.status().message().empty());
  }
  EXPECT_NE(ParseBytes("4parsecs").status().message().find("unknown unit 'parsecs'"),
            std::string::npos);
  EXPECT_FALSE(ParseBytes("99999999999PiB").ok());
}

TEST(ParsePercent, Bounds) {
  EXPECT_EQ(*ParsePercent("0"), 0u);
  EXPECT_EQ(*ParsePercent("30"), 30u);
  EXPECT_EQ(*ParsePercent("100%"), 100u);
  for (const char* bad : {"", "101", "-5", "3.5", "x", "1000"}) {
    EXPECT_FALSE(ParsePercent(bad).ok()) << bad;
  }
}

TEST(FormatBytes, PicksTheLargestUnit) {
  EXPECT_EQ(FormatBytes(300), "300 B");
  EXPECT_EQ(FormatBytes(80ull << 30), "80.00 GiB");
  EXPECT_EQ(FormatBytes(3ull << 19), "1.50 MiB");
}

}  // namespace
}  // namespace gpuslice
