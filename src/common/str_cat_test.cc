#include "common/str_cat.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice {
namespace {

TEST(StrCatTest, JoinsLiteralsViewsAndStringsInOrder) {
  const std::string name = "train";
  const std::string_view why = " is not a group";
  EXPECT_EQ(StrCat({"'", name, "'", why}), "'train' is not a group");
  EXPECT_EQ(StrCat({}), "");
  EXPECT_EQ(StrCat({"", "a", ""}), "a");
  // Embedded NULs are kept: pieces are views with their sizes.
  EXPECT_EQ(StrCat({std::string_view("a\0b", 3), "c"}), std::string("a\0bc", 4));
}

}  // namespace
}  // namespace gpuslice
