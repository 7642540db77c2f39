#include "daemon/groups/cpu_wait.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpuslice::daemon {
namespace {

constexpr int64_t kMs = 1'000'000;

// A fake /proc with schedstat files per thread.
class CpuWaitTest : public ::testing::Test {
 public:
  CpuWaitTest() {
    root_ = ::testing::TempDir() + "/cpuwait." + std::to_string(getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
  }
  ~CpuWaitTest() override { std::filesystem::remove_all(root_); }
  CpuWaitTest(const CpuWaitTest&) = delete;
  CpuWaitTest& operator=(const CpuWaitTest&) = delete;

 protected:
  // Thread `tid` of `pid` has waited `waited_ns` for a CPU in all.
  void Thread(int pid, int tid, int64_t waited_ns) const {
    const std::string dir = root_ + "/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/schedstat") << 123456 << " " << waited_ns << " " << 42 << "\n";
  }

  std::string root_;
};

TEST_F(CpuWaitTest, SumsEveryThreadOfEveryProcessOverTheWindow) {
  CpuWait w(root_);
  Thread(10, 10, 1000 * kMs);
  Thread(10, 11, 0);
  Thread(20, 20, 5 * kMs);
  EXPECT_EQ(w.RunDelayNs({10, 20}), 1005 * kMs);
  EXPECT_EQ(w.Sample("g", {10, 20}, 0), -1);  // one point: nothing to tell yet
  Thread(10, 10, 1300 * kMs);
  Thread(10, 11, 200 * kMs);
  Thread(20, 20, 5 * kMs);
  // 500 ms of waiting over 1 s of wall time.
  EXPECT_EQ(w.Sample("g", {20, 10}, 1000 * kMs), 5000);
  // Within kReadEveryNs: the last figure, files unread.
  Thread(10, 10, 9000 * kMs);
  EXPECT_EQ(w.Sample("g", {10, 20}, 1400 * kMs), 5000);
}

TEST_F(CpuWaitTest, AHostWithCpuToSpareReadsNearZero) {
  CpuWait w(root_);
  Thread(10, 10, 50 * kMs);
  EXPECT_EQ(w.Sample("g", {10}, 0), -1);
  Thread(10, 10, 51 * kMs);
  EXPECT_EQ(w.Sample("g", {10}, 1000 * kMs), 10);
}

TEST_F(CpuWaitTest, OtherProcessesOrUnreadableOnesStartOver) {
  CpuWait w(root_);
  Thread(10, 10, 0);
  Thread(20, 20, 0);
  EXPECT_EQ(w.Sample("g", {10}, 0), -1);
  Thread(10, 10, 100 * kMs);
  EXPECT_EQ(w.Sample("g", {10}, 1000 * kMs), 1000);
  // A member joined: its past waits are not this window's.
  Thread(20, 20, 900 * kMs);
  EXPECT_EQ(w.Sample("g", {10, 20}, 1300 * kMs), -1);
  EXPECT_EQ(w.Sample("g", {99}, 1600 * kMs), -1);  // no such process
  EXPECT_EQ(w.RunDelayNs({99, -1, 0}), std::nullopt);
  // Forgotten groups start over.
  w.Retain({});
  EXPECT_EQ(w.Sample("g", {10}, 1900 * kMs), -1);
}

TEST_F(CpuWaitTest, ReadsThisMachinesOwnThreads) {
  CpuWait w("/proc");
  const std::optional<int64_t> mine = w.RunDelayNs({getpid()});
  if (!mine) GTEST_SKIP() << "no /proc/<pid>/task/*/schedstat here (schedstats off?)";
  EXPECT_GE(*mine, 0);
}

}  // namespace
}  // namespace gpuslice::daemon
