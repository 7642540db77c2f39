// The group segment's system calls failing (segment_os.h, FaultySegmentOs):
// whichever call fails, an open, a removal or a fork's reopen fails with a
// defined error and leaves no descriptor or mapping behind, and what it left
// on disk is never trusted by the next open.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "shm/faulty_segment_os.h"
#include "shm/group_segment.h"

namespace gpuslice {
namespace {

using Call = FaultySegmentOs::Call;

constexpr const char* kUuid = "GPU-00000000-1111-2222-3333-444444444444";

class GroupSegmentFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-segment-fault-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/shm";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string root_;
  std::string dir_;  // made by the first open
};

// Every call an attaching open makes, failing at each of its first uses:
// the open either fails as Unavailable with nothing held, or (a call whose
// failure it can do without) succeeds; either way a later open gets a
// valid segment.
TEST_F(GroupSegmentFaultTest, AnOpenFailsCleanlyWhicheverCallFails) {
  int failed_opens = 0;
  int group = 0;
  for (Call call : {Call::kMkdir, Call::kChmod, Call::kOpen, Call::kFcntlLock, Call::kFstat,
                    Call::kFlock, Call::kFchmod, Call::kFtruncate, Call::kMmap}) {
    for (int nth = 0; nth < 3; ++nth) {
      const std::string name = "g" + std::to_string(group++);
      FaultySegmentOs os;
      os.FailAt(call, nth, EIO);
      {
        auto seg = GroupSegment::Open(dir_, name, /*create=*/true, os);
        if (!seg.ok()) {
          ++failed_opens;
          EXPECT_EQ(seg.status().code(), StatusCode::kUnavailable) << seg.status().ToString();
          EXPECT_EQ(os.injected(), 1);
        } else {
          EXPECT_TRUE((*seg)->AttachDevice(kUuid).ok());
        }
      }
      EXPECT_EQ(os.open_fds(), 0) << "call " << static_cast<int>(call) << " #" << nth;
      EXPECT_EQ(os.mappings(), 0) << "call " << static_cast<int>(call) << " #" << nth;
      // What the failure left (a file of size 0, or sized and all zeros) is
      // made a segment again, never trusted as one.
      auto again = GroupSegment::Open(dir_, name, /*create=*/true);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      auto d = (*again)->AttachDevice(kUuid);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      EXPECT_EQ((*again)->ledger().MemoryUsed(*d), 0u);
    }
  }
  EXPECT_GE(failed_opens, 7) << "each necessary call failed an open at least once";
}

TEST_F(GroupSegmentFaultTest, InterruptedLocksAreTakenAgain) {
  FaultySegmentOs os;
  os.FailAt(Call::kFcntlLock, 0, EINTR);  // the attach lock's wait
  os.FailAt(Call::kFlock, 0, EINTR);      // creation's lock
  auto seg = GroupSegment::Open(dir_, "g", /*create=*/true, os);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ(os.injected(), 2);
  EXPECT_TRUE((*seg)->AttachDevice(kUuid).ok());
}

TEST_F(GroupSegmentFaultTest, AnObserversOpenOfAFailedCreationSaysItIsNotASegment) {
  {
    FaultySegmentOs os;
    os.FailAt(Call::kFtruncate, 1, ENOSPC);  // the file exists, empty
    ASSERT_FALSE(GroupSegment::Open(dir_, "g", /*create=*/true, os).ok());
  }
  auto observer = GroupSegment::Open(dir_, "g", /*create=*/false);
  ASSERT_FALSE(observer.ok());
  EXPECT_EQ(observer.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(GroupSegmentFaultTest, ARemovalThatCannotUnlinkSaysSoAndKeepsTheFile) {
  { ASSERT_TRUE(GroupSegment::Open(dir_, "g", /*create=*/true).ok()); }  // detached at once
  FaultySegmentOs os;
  os.FailAt(Call::kUnlink, 0, EACCES);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g", /*grace_ns=*/0, MonotonicNs(), os);
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(removed.status().message().find("cannot remove"), std::string::npos);
  EXPECT_EQ(os.open_fds(), 0);
  EXPECT_EQ(os.mappings(), 0);
  EXPECT_TRUE(std::filesystem::exists(GroupSegment::PathFor(dir_, "g")));
  // Once the call works, the same removal goes through.
  removed = GroupSegment::RemoveIfAbandoned(dir_, "g", 0, MonotonicNs(), os);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_EQ(os.open_fds(), 0);
}

TEST_F(GroupSegmentFaultTest, AReopenThatFailsKeepsTheHandleItHad) {
  FaultySegmentOs os;
  auto seg = GroupSegment::Open(dir_, "g", /*create=*/true, os);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  ASSERT_TRUE((*seg)->Join(getpid(), 1, "member").ok());
  for (Call call : {Call::kOpen, Call::kFcntlLock}) {
    os.FailAt(call, 0, EMFILE);
    const Status s = (*seg)->ReopenAfterFork();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_EQ(os.open_fds(), 1) << "only the handle's own descriptor";
  }
  EXPECT_TRUE((*seg)->AttachDevice(kUuid).ok());
  auto observer = GroupSegment::Open(dir_, "g", /*create=*/false);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  EXPECT_TRUE((*observer)->IsLiveMember(getpid())) << "the member's lock is still held";
  seg->reset();
  EXPECT_EQ(os.open_fds(), 0);
  EXPECT_EQ(os.mappings(), 0);
}

}  // namespace
}  // namespace gpuslice
