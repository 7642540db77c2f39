#include "cli/preload_env.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

constexpr char kLib[] = "/opt/gpuslice/lib/libgpuslice.so";

TEST(PrependPreload, EmptyGivesTheLibraryAlone) {
  EXPECT_EQ(PrependPreload("", kLib), kLib);
  EXPECT_EQ(PrependPreload(" : ", kLib), kLib);
}

// The expected values are written out: plain literals are what a reader
// checks at a glance (and GCC 12 at -O2 warns falsely on `std::string(kLib) +
// "..."` here, -Warray-bounds).
TEST(PrependPreload, KeepsExistingEntriesAfterInOrder) {
  EXPECT_EQ(PrependPreload("/a.so", kLib), "/opt/gpuslice/lib/libgpuslice.so:/a.so");
  EXPECT_EQ(PrependPreload("/a.so /b.so:/c.so", kLib),
            "/opt/gpuslice/lib/libgpuslice.so:/a.so:/b.so:/c.so");
}

TEST(PrependPreload, NoDuplicateWhenAlreadyThere) {
  EXPECT_EQ(PrependPreload(kLib, kLib), kLib);
  EXPECT_EQ(PrependPreload("/a.so:/opt/gpuslice/lib/libgpuslice.so:/b.so", kLib),
            "/opt/gpuslice/lib/libgpuslice.so:/a.so:/b.so");
}

}  // namespace
}  // namespace gpuslice::cli
