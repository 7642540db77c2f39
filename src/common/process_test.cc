#include "common/process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace gpuslice {
namespace {

TEST(Process, SelfIsAliveWithItsStartTime) {
  uint64_t start = ProcessStartTime(getpid());
  ASSERT_GT(start, 0u);
  EXPECT_TRUE(ProcessAlive(getpid(), start));
  EXPECT_FALSE(ProcessAlive(getpid(), start + 1));  // a reused pid is another process
  char name[32];
  ProcessName(getpid(), name, sizeof name);
  EXPECT_STRNE(name, "");
}

TEST(Process, ZombieAndReapedChildAreDead) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  // Until reaped the child is a zombie: gone for our purposes.
  for (int i = 0; i < 1000 && ProcessAlive(child, 0); ++i) usleep(1000);
  EXPECT_FALSE(ProcessAlive(child, 0));
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(ProcessAlive(child, 0));
  EXPECT_EQ(ProcessStartTime(child), 0u);
}

}  // namespace
}  // namespace gpuslice
