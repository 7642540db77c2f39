// What the group segment's tests share (group_segment_test.cc and the
// views' tests: memory_ledger_test.cc, compute_schedule_test.cc,
// compute_usage_test.cc, control_role_test.cc): a temporary segment
// directory, forked members, and waits with a deadline.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "shm/group_segment.h"
#include "shm/ledger_eviction_testing.h"
#include "shm/raw_layout_testing.h"

namespace gpuslice::segment_test {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";

// Ledger lock deadlines: short, so that a test evicting a holder runs fast;
// long, for a locker that must never evict (far beyond any test's waits).
constexpr int64_t kShortDeadlineNs = 20'000'000;
constexpr int64_t kStoppedDeadlineNs = 50'000'000;
constexpr int64_t kLongDeadlineNs = 10'000'000'000;

// Waits until `done()` holds, at most `timeout_ns`; false if it never did.
template <typename F>
bool WaitUntil(F done, int64_t timeout_ns = 10'000'000'000) {
  const int64_t until = MonotonicNs() + timeout_ns;
  while (!done()) {
    if (MonotonicNs() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

inline uint64_t Shared(const uint64_t& field) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(field)).load();
}

// The slots' sum on `dev` (invariant 1: memory_used never below it).
inline uint64_t SlotsSum(const GroupSegment& seg, int dev) {
  uint64_t sum = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) sum += seg.ledger().SlotMemory(s, dev);
  return sum;
}

// A forked child, killed (whether stopped or running) and reaped unless the
// test reaped it itself (then it sets `pid` to -1).
struct Child {
  explicit Child(pid_t p) : pid(p) {}
  ~Child() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid;
};

class SegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> OpenGroup(const char* group = "g1") {
    auto seg = GroupSegment::Open(dir_, group, true);
    EXPECT_TRUE(seg.ok()) << seg.status().ToString();
    return seg.ok() ? std::move(seg).value() : nullptr;
  }

  // Runs `child` in a forked process that then dies with SIGKILL (no cleanup);
  // waits for it. `child` may signal readiness by writing to the pipe.
  template <typename F>
  void InChildThenKill(F child) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      child();
      raise(SIGKILL);
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
  }

  std::string dir_;
};

}  // namespace gpuslice::segment_test
