#include "daemon/gpu/xid_watch.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>

namespace gpuslice::daemon {
namespace {

using namespace std::chrono_literals;

TEST(IsCriticalXid, ApplicationErrorsAreNotTheGpus) {
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) EXPECT_FALSE(IsCriticalXid(xid)) << xid;
  for (uint64_t xid : {48, 63, 64, 74, 79, 92, 94, 95, 119, 999}) {
    EXPECT_TRUE(IsCriticalXid(xid)) << xid;
  }
}

// Events the test pushes; Wait blocks on a condition until one is there or
// the timeout passes.
class QueueSource final : public XidWatch::Source {
 public:
  void Push(XidWatch::Event e) {
    std::lock_guard lock(mu_);
    events_.push_back(e);
    cv_.notify_all();
  }
  void Fail() {
    std::lock_guard lock(mu_);
    fail_ = true;
    cv_.notify_all();
  }
  StatusOr<std::optional<XidWatch::Event>> Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || fail_; });
    if (fail_) return Unavailable("the event set is gone");
    if (events_.empty()) return std::optional<XidWatch::Event>();
    const XidWatch::Event e = events_.front();
    events_.pop_front();
    return std::optional(e);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<XidWatch::Event> events_;
  bool fail_ = false;
};

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(XidWatch, ACriticalXidMarksItsGpuAndStays) {
  auto source = std::make_unique<QueueSource>();
  QueueSource* events = source.get();
  XidWatch watch(std::move(source), 20ms);
  watch.Start();
  events->Push({1, 13});  // an application's: counted, not critical
  ASSERT_TRUE(WaitFor([&] { return watch.Of(1).errors == 1; }));
  EXPECT_EQ(watch.Of(1), (XidState{1, 13, 0}));
  events->Push({1, 79});  // fallen off the bus
  events->Push({1, 31});
  ASSERT_TRUE(WaitFor([&] { return watch.Of(1).errors == 3; }));
  EXPECT_EQ(watch.Of(1), (XidState{3, 31, 79}));  // still unhealthy after a later benign one
  EXPECT_EQ(watch.Of(0), XidState{});             // the other GPU saw nothing
  // A failing source ends the watch; what was seen stays.
  events->Fail();
  watch.Stop();
  EXPECT_EQ(watch.Of(1).critical, 79u);
}

}  // namespace
}  // namespace gpuslice::daemon
