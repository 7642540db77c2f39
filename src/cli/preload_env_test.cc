#include "cli/preload_env.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

constexpr char kLib[] = "/opt/gpuslice/lib/libgpuslice.so";

TEST(PrependPreload, EmptyGivesTheLibraryAlone) {
  EXPECT_EQ(PrependPreload("", kLib), kLib);
  EXPECT_EQ(PrependPreload(" : ", kLib), kLib);
}

TEST(PrependPreload, KeepsExistingEntriesAfterInOrder) {
  EXPECT_EQ(PrependPreload("/a.so", kLib), std::string(kLib) + ":/a.so");
  EXPECT_EQ(PrependPreload("/a.so /b.so:/c.so", kLib), std::string(kLib) + ":/a.so:/b.so:/c.so");
}

TEST(PrependPreload, NoDuplicateWhenAlreadyThere) {
  EXPECT_EQ(PrependPreload(kLib, kLib), kLib);
  EXPECT_EQ(PrependPreload(std::string("/a.so:") + kLib + ":/b.so", kLib),
            std::string(kLib) + ":/a.so:/b.so");
}

}  // namespace
}  // namespace gpuslice::cli
