#include "common/thread_annotations.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>

namespace gpuslice {
namespace {

class Counter {
 public:
  void Add() {
    MutexLock lock(mu_);
    ++n_;
    cv_.notify_all();
  }
  // Waits until n_ reaches `n`, with the mutex released while waiting.
  void WaitFor(int n) {
    MutexLock lock(mu_);
    cv_.wait(lock, [&]() REQUIRES(mu_) { return n_ >= n; });
  }
  // Unlocks for a callback, locks again: the destructor must not unlock twice.
  int AddUnlockedThenRead() {
    MutexLock lock(mu_);
    lock.Unlock();
    Add();
    lock.Lock();
    return n_;
  }
  // Unlocks and leaves the scope unlocked.
  bool UnlockEarly() {
    MutexLock lock(mu_);
    lock.Unlock();
    if (!mu_.TryLock()) return false;
    mu_.Unlock();
    return true;
  }
  bool Free() {
    if (!mu_.TryLock()) return false;
    mu_.Unlock();
    return true;
  }

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  int n_ GUARDED_BY(mu_) = 0;
};

TEST(MutexLockTest, ConditionVariableWaitsWithTheMutexReleased) {
  Counter c;
  std::thread t([&] {
    for (int i = 0; i < 3; ++i) c.Add();
  });
  c.WaitFor(3);
  t.join();
  EXPECT_TRUE(c.Free());
}

TEST(MutexLockTest, UnlockAndLockAgainInsideTheScope) {
  Counter c;
  EXPECT_EQ(c.AddUnlockedThenRead(), 1);
  EXPECT_TRUE(c.Free());
}

TEST(MutexLockTest, ScopeLeftUnlockedReleasesNothingTwice) {
  Counter c;
  EXPECT_TRUE(c.UnlockEarly());
  EXPECT_TRUE(c.Free());
}

}  // namespace
}  // namespace gpuslice
