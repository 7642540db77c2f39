#include "sim/core/xid_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace gpuslice::sim {
namespace {

TEST(XidLog, LinesAppendedAfterAnOffsetAreReadOnceComplete) {
  const std::string state = ::testing::TempDir() + "xid_log_test." + std::to_string(getpid());
  unlink(XidLogPath(state).c_str());
  uint64_t next = 0;
  EXPECT_TRUE(ReadXids(state, 0, &next).empty());  // no file
  EXPECT_EQ(XidLogSize(state), 0u);
  ASSERT_TRUE(AppendXid(state, 0, 13).ok());
  const uint64_t registered = XidLogSize(state);
  ASSERT_TRUE(AppendXid(state, 1, 79).ok());
  ASSERT_TRUE(AppendXid(state, 0, 48).ok());
  EXPECT_FALSE(AppendXid(state, -1, 48).ok());
  auto all = ReadXids(state, registered, &next);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].device, 1);
  EXPECT_EQ(all[0].xid, 79u);
  EXPECT_EQ(all[0].offset, registered);
  EXPECT_EQ(all[1].device, 0);
  EXPECT_EQ(all[1].xid, 48u);
  EXPECT_EQ(next, XidLogSize(state));
  // A partial line (a writer mid-way) waits; a malformed one is skipped.
  std::ofstream(XidLogPath(state), std::ios::app) << "junk\n1 9";
  uint64_t after = 0;
  EXPECT_TRUE(ReadXids(state, next, &after).empty());
  EXPECT_EQ(after, next + 5);
  std::ofstream(XidLogPath(state), std::ios::app) << "4\n";
  auto last = ReadXids(state, after, &after);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].xid, 94u);
  EXPECT_EQ(after, XidLogSize(state));
  unlink(XidLogPath(state).c_str());
}

}  // namespace
}  // namespace gpuslice::sim
