#include "daemon/gpu/gpu_selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kUuids = {"GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2"};

std::vector<int> Parse(std::string_view s, GpuSelectorRules rules = {}) {
  auto r = ParseGpuSelector(s, kUuids, rules);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
  return r.ok() ? *r : std::vector<int>{};
}

TEST(GpuSelectorTest, IndexesAndUuidsInTheOrderGiven) {
  EXPECT_EQ(Parse("0"), (std::vector<int>{0}));
  EXPECT_EQ(Parse("2,0"), (std::vector<int>{2, 0}));
  EXPECT_EQ(Parse("GPU-bbbb-1"), (std::vector<int>{1}));
  EXPECT_EQ(Parse("gpu-CCCC-2,0"), (std::vector<int>{2, 0}));  // any case
  EXPECT_EQ(Parse("aaaa-0"), (std::vector<int>{0}));           // no prefix
  EXPECT_EQ(Parse(" 1 , GPU-aaaa-0 "), (std::vector<int>{1, 0}));
}

TEST(GpuSelectorTest, AllIsEveryGpuWhereAllowed) {
  EXPECT_EQ(Parse("all"), (std::vector<int>{0, 1, 2}));
  auto refused = ParseGpuSelector("all", kUuids, {.allow_all = false});
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound);
  auto none = ParseGpuSelector("all", {}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(GpuSelectorTest, DuplicatesAreDroppedOrRefused) {
  EXPECT_EQ(Parse("2,0,2,GPU-cccc-2"), (std::vector<int>{2, 0}));
  auto refused = ParseGpuSelector("0,GPU-aaaa-0", kUuids, {.reject_duplicates = true});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("listed twice"));
}

TEST(GpuSelectorTest, EmptyItemsAreInvalid) {
  for (const char* s : {"", ",", "0,", ",1", "0,,1", " "}) {
    auto r = ParseGpuSelector(s, kUuids);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << '"' << s << '"';
    EXPECT_THAT(r.status().message(), HasSubstr("empty GPU id")) << s;
  }
}

TEST(GpuSelectorTest, UnknownGpusAreNotFound) {
  for (const char* s : {"3", "99999999999", "0,7", "GPU-dddd", "bbbb", "-1", "1.0"}) {
    auto r = ParseGpuSelector(s, kUuids);
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << s;
  }
  EXPECT_THAT(ParseGpuSelector("7", kUuids).status().message(),
              HasSubstr("no GPU 7 (this node has 3 GPUs)"));
}

}  // namespace
}  // namespace gpuslice::daemon
