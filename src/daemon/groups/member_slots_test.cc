#include "daemon/groups/member_slots.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpuslice::daemon {
namespace {

// A /proc with the files MatchSlots reads, under a temporary directory.
class MemberSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/member_slots." + std::to_string(getpid());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Host pid `host` whose NSpid line is `nspid` ("" : no such line) and
  // whose stat start time is `start`.
  void Process(int32_t host, const std::string& nspid, uint64_t start) {
    const std::string dir = root_ + "/" + std::to_string(host);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/status")
        << "Name:\tw (x)\n"
        << (nspid.empty() ? "" : "NSpid:\t" + nspid + "\n") << "PPid:\t1\n";
    std::string stat = std::to_string(host) + " (a) b) S";
    for (int field = 4; field < 22; ++field) stat += " " + std::to_string(field);
    std::ofstream(dir + "/stat") << stat << " " << start << " 23 24\n";
  }

  std::string root_;
};

TEST_F(MemberSlotsTest, EachHostPidGetsTheSlotItsInnermostPidAndStartTimeOwn) {
  Process(5000, "5000\t7", 111);  // in a container: pid 7 there
  Process(5001, "5001\t7", 222);  // another container's pid 7
  Process(5002, "", 333);         // a kernel without NSpid: the host pid
  Process(5003, "5003", 444);     // on the host, its slot since taken by another start
  const std::vector<SlotOwner> owners = {{.slot = 3, .pid = 7, .start_time = 222},
                                         {.slot = 4, .pid = 7, .start_time = 111},
                                         {.slot = 9, .pid = 5002, .start_time = 333},
                                         {.slot = 10, .pid = 5003, .start_time = 445}};
  const auto members = MatchSlots({5000, 5001, 5002, 5003, 5004, -1}, owners, root_);
  ASSERT_EQ(members.size(), 6u);
  EXPECT_EQ(members[0].pid, 5000);
  EXPECT_EQ(members[0].slot, 4);
  EXPECT_EQ(members[1].slot, 3);
  EXPECT_EQ(members[2].slot, 9);
  EXPECT_EQ(members[3].slot, -1);  // start time differs: another process
  EXPECT_EQ(members[4].slot, -1);  // gone
  EXPECT_EQ(members[5].slot, -1);
}

TEST_F(MemberSlotsTest, ThisProcessMatchesTheSlotItJoined) {
  std::filesystem::create_directories(root_ + "/shm");
  auto seg = GroupSegment::Open(root_ + "/shm", "g", /*create=*/true);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  // The start time the limiter records: /proc/self/stat's.
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 1));
  std::string field;
  for (int i = 3; i < 22; ++i) fields >> field;
  uint64_t start = 0;
  fields >> start;
  const int slot = *(*seg)->Join(getpid(), start, "me");
  const auto members = MatchSlots({getpid()}, SlotOwners(**seg), "/proc");
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].slot, slot);
}

}  // namespace
}  // namespace gpuslice::daemon
