#include "addpath/path_list.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice::addpath {
namespace {

constexpr EditMode kAppend = EditMode::kAppend;
constexpr EditMode kPrepend = EditMode::kPrepend;

TEST(EditPathListTest, AppendsNewEntry) {
  EXPECT_EQ(EditPathList("/usr/bin:/bin", "/opt/x/bin", kAppend), "/usr/bin:/bin:/opt/x/bin");
}

TEST(EditPathListTest, PrependsNewEntry) {
  EXPECT_EQ(EditPathList("/usr/bin:/bin", "/opt/x/bin", kPrepend), "/opt/x/bin:/usr/bin:/bin");
}

TEST(EditPathListTest, AddsSeveralEntriesInOrder) {
  EXPECT_EQ(EditPathList("/c", "/a:/b", kAppend), "/c:/a:/b");
  EXPECT_EQ(EditPathList("/c", "/a:/b", kPrepend), "/a:/b:/c");
}

TEST(EditPathListTest, EmptyCurrentGivesAddition) {
  EXPECT_EQ(EditPathList("", "/a:/b", kAppend), "/a:/b");
  EXPECT_EQ(EditPathList("", "/a:/b", kPrepend), "/a:/b");
}

TEST(EditPathListTest, AppendKeepsPresentEntryInPlace) {
  EXPECT_EQ(EditPathList("/a:/b:/c", "/a", kAppend), "/a:/b:/c");
  EXPECT_EQ(EditPathList("/a:/b:/c", "/b:/d", kAppend), "/a:/b:/c:/d");
}

TEST(EditPathListTest, PrependMovesPresentEntryToFront) {
  EXPECT_EQ(EditPathList("/a:/b:/c", "/c", kPrepend), "/c:/a:/b");
  EXPECT_EQ(EditPathList("/a:/b:/c", "/c:/a", kPrepend), "/c:/a:/b");
  EXPECT_EQ(EditPathList("/a:/b:/c", "/a", kPrepend), "/a:/b:/c");
}

TEST(EditPathListTest, NoEntriesInAdditionLeavesCurrentVerbatim) {
  // Not even normalized: nothing asked for means nothing touched.
  for (const char* addition : {"", ":", ":::"}) {
    EXPECT_EQ(EditPathList("/a::/b:", addition, kAppend), "/a::/b:") << '"' << addition << '"';
    EXPECT_EQ(EditPathList("/a::/b:", addition, kPrepend), "/a::/b:") << '"' << addition << '"';
  }
  EXPECT_EQ(EditPathList("", "", kAppend), "");
}

TEST(EditPathListTest, DropsEmptyEntries) {
  EXPECT_EQ(EditPathList(":/a::/b:", "::/c::", kAppend), "/a:/b:/c");
  EXPECT_EQ(EditPathList(":/a::/b:", "::/c::", kPrepend), "/c:/a:/b");
  EXPECT_EQ(EditPathList("::", "/c", kAppend), "/c");
}

TEST(EditPathListTest, RemovesDuplicatesKeepingFirst) {
  EXPECT_EQ(EditPathList("/a:/b:/a", "/c:/c:/b", kAppend), "/a:/b:/c");
  EXPECT_EQ(EditPathList("/a:/b:/a", "/c:/c:/b", kPrepend), "/c:/b:/a");
}

TEST(EditPathListTest, ComparesEntriesExactly) {
  EXPECT_EQ(EditPathList("/a", "/a/", kAppend), "/a:/a/");
  EXPECT_EQ(EditPathList("/ab", "/a", kAppend), "/ab:/a");
  EXPECT_EQ(EditPathList("/a", "/ab", kAppend), "/a:/ab");
}

TEST(EditPathListTest, PathSeparatorsKeepSpacesInsideEntries) {
  EXPECT_EQ(EditPathList("/My Apps/bin", "/x y", kAppend), "/My Apps/bin:/x y");
}

TEST(EditPathListTest, PreloadSeparatorsSplitOnSpacesAndColons) {
  EXPECT_EQ(EditPathList("/x/a.so /x/b.so", "/y/c.so", kAppend, kPreloadSeparators),
            "/x/a.so:/x/b.so:/y/c.so");
  EXPECT_EQ(EditPathList("/x/a.so  /x/b.so:", "/y/c.so /x/a.so", kAppend, kPreloadSeparators),
            "/x/a.so:/x/b.so:/y/c.so");
  EXPECT_EQ(EditPathList("/x/a.so /x/b.so", " /x/b.so ", kPrepend, kPreloadSeparators),
            "/x/b.so:/x/a.so");
  EXPECT_EQ(EditPathList("/x/a.so", "   ", kAppend, kPreloadSeparators), "/x/a.so");
}

TEST(EditPathListTest, DocumentedExample) {
  EXPECT_EQ(EditPathList("/x/libgpuslice-addpath.so", "/y/custom.so", kAppend, kPreloadSeparators),
            "/x/libgpuslice-addpath.so:/y/custom.so");
}

TEST(EditPathListTest, IsIdempotent) {
  const char* currents[] = {"", "/a", "/a:/b:/c", ":/a::/b:/a:", "/c:/b"};
  const char* additions[] = {"/a", "/c:/a", "/d", "::/b::/d:", "/d:/d"};
  for (const char* c : currents) {
    for (const char* a : additions) {
      for (EditMode m : {kAppend, kPrepend}) {
        std::string once = EditPathList(c, a, m);
        EXPECT_EQ(EditPathList(once, a, m), once) << c << " + " << a;
      }
    }
  }
}

TEST(EditPathListTest, HandlesVeryLongValues) {
  // One entry of 100 KB, and 10k short entries (~100 KB) with many duplicates.
  std::string huge = "/" + std::string(size_t{100} * 1024, 'x');
  EXPECT_EQ(EditPathList("/a", huge, kAppend), "/a:" + huge);
  EXPECT_EQ(EditPathList("/a:" + huge, huge, kPrepend), huge + ":/a");

  std::string many, expected;
  for (int i = 0; i < 10000; ++i) {
    std::string entry = "/p/" + std::to_string(i % 5000);
    many += entry + ":";
    if (i < 5000) expected += (i == 0 ? "" : ":") + entry;
  }
  EXPECT_EQ(EditPathList("", many, kAppend), expected);
  EXPECT_EQ(EditPathList(expected, many, kAppend), expected);
  EXPECT_EQ(EditPathList(expected, "/new", kPrepend), "/new:" + expected);
}

TEST(HasEntriesTest, FindsNonEmptyEntries) {
  EXPECT_FALSE(HasEntries(""));
  EXPECT_FALSE(HasEntries(":::"));
  EXPECT_TRUE(HasEntries("::a"));
  EXPECT_TRUE(HasEntries(" "));  // a space is a (strange) path entry
  EXPECT_FALSE(HasEntries(" : ", kPreloadSeparators));
}

}  // namespace
}  // namespace gpuslice::addpath
