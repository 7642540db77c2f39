#include "daemon/backstop/signaller.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "daemon/tenants/identity.h"

namespace gpuslice::daemon {
namespace {

TEST(PidfdSignallerTest, SignalsOnlyTheProcessWithThatStartTime) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) pause();
  }
  ASSERT_GT(child, 0);  // every kill below is to this pid only
  const uint64_t start = ReadStartTime("/proc", child);
  ASSERT_NE(start, 0u);
  PidfdSignaller signaller;

  EXPECT_FALSE(signaller.Send({child, start + 1}, SIGSTOP)) << "another process's start time";
  EXPECT_FALSE(signaller.Send({child, 0}, SIGSTOP)) << "an unknown start time";
  ASSERT_TRUE(signaller.Send({child, start}, SIGSTOP));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  EXPECT_TRUE(WIFSTOPPED(status));
  ASSERT_TRUE(signaller.Send({child, start}, SIGCONT));
  ASSERT_EQ(waitpid(child, &status, WCONTINUED), child);
  EXPECT_TRUE(WIFCONTINUED(status));

  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(signaller.Send({child, start}, SIGCONT)) << "gone";
}

TEST(PidfdSignallerTest, NeverSignalsAPidBelowTwoOrItself) {
  PidfdSignaller signaller;
  // SIGCONT: harmless if it were sent; the point is that it is not.
  EXPECT_FALSE(signaller.Send({0, 1}, SIGCONT));
  EXPECT_FALSE(signaller.Send({-1, 1}, SIGCONT));
  EXPECT_FALSE(signaller.Send({1, ReadStartTime("/proc", 1)}, SIGCONT));
  EXPECT_FALSE(signaller.Send({getpid(), ReadStartTime("/proc", getpid())}, SIGCONT));
}

}  // namespace
}  // namespace gpuslice::daemon
