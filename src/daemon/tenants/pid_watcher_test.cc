#include "daemon/tenants/pid_watcher.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <set>

#include "daemon/tenants/identity.h"

namespace gpuslice::daemon {
namespace {

using namespace std::chrono_literals;

// A child that waits until killed.
pid_t ForkSleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

class PidWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    watcher_.SetExitCallback([this](const std::vector<pid_t>& exited) {
      std::lock_guard lock(mu_);
      exited_.insert(exited.begin(), exited.end());
      cv_.notify_all();
    });
    ASSERT_TRUE(watcher_.Start().ok());
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    watcher_.Stop();  // no callback may run once the members it touches are gone
  }
  pid_t Child() {
    children_.push_back(ForkSleeper());
    return children_.back();
  }
  // Whether `pid`'s exit was reported within `deadline`.
  bool WaitExit(pid_t pid, std::chrono::milliseconds deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, deadline, [&] { return exited_.count(pid) > 0; });
  }
  bool Reported(pid_t pid) {
    std::lock_guard lock(mu_);
    return exited_.count(pid) > 0;
  }

  PidWatcher watcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<pid_t> exited_;
  std::vector<pid_t> children_;
};

TEST_F(PidWatcherTest, AKilledProcessIsReportedWithinASecond) {
  const pid_t a = Child();
  const pid_t b = Child();
  ASSERT_TRUE(watcher_.Watch(a, ReadStartTime("/proc", a)).ok());
  ASSERT_TRUE(watcher_.Watch(b, 0).ok());
  EXPECT_EQ(watcher_.WatchCount(), 2u);
  ASSERT_EQ(kill(a, SIGKILL), 0);
  ASSERT_TRUE(WaitExit(a, 1s)) << "the exit of " << a << " was not reported within 1 s";
  EXPECT_FALSE(Reported(b));
  EXPECT_EQ(watcher_.WatchCount(), 1u);
}

TEST_F(PidWatcherTest, AZombieCountsAsExited) {
  // A child that exits on its own and is never reaped stays a zombie; it exited all the same.
  const pid_t pid = fork();
  if (pid == 0) {
    usleep(50'000);
    _exit(0);
  }
  children_.push_back(pid);
  ASSERT_TRUE(watcher_.Watch(pid, 0).ok());
  EXPECT_TRUE(WaitExit(pid, 1s));
}

TEST_F(PidWatcherTest, UnwatchedProcessesAreNotReported) {
  const pid_t a = Child();
  const pid_t b = Child();
  ASSERT_TRUE(watcher_.Watch(a, 0).ok());
  ASSERT_TRUE(watcher_.Watch(b, 0).ok());
  watcher_.Unwatch(a);
  kill(a, SIGKILL);
  kill(b, SIGKILL);
  ASSERT_TRUE(WaitExit(b, 1s));
  EXPECT_FALSE(Reported(a));
}

TEST_F(PidWatcherTest, RefusesAMissingProcessOrAWrongStartTime) {
  const pid_t a = Child();
  EXPECT_EQ(watcher_.Watch(a, ReadStartTime("/proc", a) + 1).code(), StatusCode::kNotFound);
  kill(a, SIGKILL);
  waitpid(a, nullptr, 0);
  children_.clear();
  EXPECT_EQ(watcher_.Watch(a, 0).code(), StatusCode::kNotFound);
  EXPECT_EQ(watcher_.Watch(0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(watcher_.WatchCount(), 0u);
}

}  // namespace
}  // namespace gpuslice::daemon
