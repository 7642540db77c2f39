#include "shm/segment_dirs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "shm/group_segment.h"

namespace gpuslice {
namespace {

class SegmentDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gs_segdirs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    shm_ = root_ + "/shm";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  static mode_t Mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  std::string root_;
  std::string shm_;
};

TEST_F(SegmentDirsTest, AClaimDirectoryIsPrivateToItsGroupAndFoundFirst) {
  ASSERT_TRUE(MakeClaimSegmentDir(shm_, "claim-a").ok());
  ASSERT_TRUE(MakeClaimSegmentDir(shm_, "claim-b").ok());
  ASSERT_TRUE(MakeClaimSegmentDir(shm_, "claim-a").ok());  // again: kept
  EXPECT_EQ(ClaimSegmentDir(shm_, "claim-a"), shm_ + "/claims/claim-a");
  EXPECT_EQ(Mode(shm_), 01777u);
  EXPECT_EQ(Mode(shm_ + "/claims"), 0711u);  // not listable by tenants on the host
  EXPECT_EQ(Mode(shm_ + "/claims/claim-a"), 01777u);
  EXPECT_EQ(GroupSegmentDirs(shm_),
            (std::vector<std::string>{shm_ + "/claims/claim-a", shm_ + "/claims/claim-b", shm_}));
  EXPECT_EQ(MakeClaimSegmentDir(shm_, "../escape").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeClaimSegmentDir(shm_, "..").code(), StatusCode::kInvalidArgument);
}

// What the CLI reads outside the daemon: a claim's group is found in its own
// directory, a local group in the shared one, each listed once.
TEST_F(SegmentDirsTest, ReadersFindEachGroupsSegmentWhereverItIs) {
  ASSERT_TRUE(MakeClaimSegmentDir(shm_, "claim-a").ok());
  auto claim = GroupSegment::Open(ClaimSegmentDir(shm_, "claim-a"), "claim-a", /*create=*/true);
  auto local = GroupSegment::Open(shm_, "local", /*create=*/true);
  ASSERT_TRUE(claim.ok() && local.ok());
  EXPECT_EQ(SegmentDirOf(shm_, "claim-a"), ClaimSegmentDir(shm_, "claim-a"));
  EXPECT_EQ(SegmentDirOf(shm_, "local"), shm_);
  EXPECT_EQ(SegmentDirOf(shm_, "nobody"), shm_);      // where a new one would go
  EXPECT_EQ(SegmentDirOf(shm_, "../claim-a"), shm_);  // never outside the tree
  EXPECT_EQ(ListAllGroups(shm_), (std::vector<std::string>{"claim-a", "local"}));
}

TEST_F(SegmentDirsTest, WithoutClaimsOnlyTheSharedDirectory) {
  EXPECT_EQ(GroupSegmentDirs(shm_), std::vector<std::string>{shm_});
}

TEST_F(SegmentDirsTest, RemovingAClaimDirectoryWaitsForItsLastAttachedSegment) {
  ASSERT_TRUE(MakeClaimSegmentDir(shm_, "claim-a").ok());
  const std::string dir = ClaimSegmentDir(shm_, "claim-a");
  std::ofstream(dir + "/junk") << "left by a tenant";
  {
    auto member = GroupSegment::Open(dir, "claim-a", /*create=*/true);
    ASSERT_TRUE(member.ok()) << member.status().message();
    EXPECT_EQ(RemoveClaimSegmentDir(shm_, "claim-a").code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(std::filesystem::exists(GroupSegment::PathFor(dir, "claim-a")));
  }
  EXPECT_TRUE(RemoveClaimSegmentDir(shm_, "claim-a").ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(RemoveClaimSegmentDir(shm_, "claim-a").ok());  // gone: OK
  EXPECT_EQ(GroupSegmentDirs(shm_), std::vector<std::string>{shm_});
}

}  // namespace
}  // namespace gpuslice
