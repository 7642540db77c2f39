#include "shm/memory_ledger.h"

#include "shm/group_segment_test_fixture.h"

namespace gpuslice::segment_test {
namespace {

class MemoryLedgerTest : public SegmentTest {};

TEST_F(MemoryLedgerTest, ReserveIsAllOrNothingAgainstTheLimit) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  EXPECT_TRUE(seg->ledger().Reserve(s, d, 60 * kMiB));
  EXPECT_FALSE(seg->ledger().Reserve(s, d, 41 * kMiB));
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 60 * kMiB);
  EXPECT_TRUE(seg->ledger().Reserve(s, d, 40 * kMiB));
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 100 * kMiB);
  EXPECT_FALSE(seg->ledger().Reserve(s, d, 1));
  seg->ledger().Release(s, d, 30 * kMiB);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 70 * kMiB);
  EXPECT_EQ(seg->ledger().SlotMemory(s, d), 70 * kMiB);
  seg->ledger().Release(s, d, 1000 * kMiB);  // never below zero
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 0u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].alloc_failures, 2u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].memory_peak, 100 * kMiB);
}

// The two steps apart (the limiter's ledger orders its own slot's changes):
// the device's count is all-or-nothing against the limit and leaves the slot
// alone; the slot's count never goes below zero.

TEST_F(MemoryLedgerTest, TheDeviceAndSlotStepsApartKeepTheirContracts) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  EXPECT_TRUE(seg->ledger().ReserveDevice(d, 60 * kMiB));
  EXPECT_FALSE(seg->ledger().ReserveDevice(d, 41 * kMiB));
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 60 * kMiB);
  EXPECT_EQ(seg->ledger().SlotMemory(s, d), 0u);
  seg->ledger().AddToOwnSlot(s, d, 60 * kMiB);
  EXPECT_EQ(seg->ledger().SlotMemory(s, d), 60 * kMiB);
  seg->ledger().ChargeDevice(d, 50 * kMiB);  // whatever the limit
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 110 * kMiB);
  EXPECT_EQ(seg->ledger().TakeFromOwnSlot(s, d, 20 * kMiB), 20 * kMiB);
  EXPECT_EQ(seg->ledger().TakeFromOwnSlot(s, d, 1000 * kMiB), 40 * kMiB);  // never below zero
  EXPECT_EQ(seg->ledger().SlotMemory(s, d), 0u);
  seg->ledger().ReleaseDevice(d, 1000 * kMiB);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 0u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].alloc_failures, 1u);
  EXPECT_EQ(testing::RawLayout(*seg).devices[d].memory_peak, 110 * kMiB);
}

TEST_F(MemoryLedgerTest, LoweringBelowUsageRefusesNewAllocationsUntilUsageFalls) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  const int s = *seg->Join(getpid(), 1, "test");
  ASSERT_TRUE(seg->ledger().Reserve(s, d, 80 * kMiB));
  seg->SetMemoryLimit(d, 50 * kMiB);
  EXPECT_FALSE(seg->ledger().Reserve(s, d, 1));
  seg->ledger().Release(s, d, 40 * kMiB);
  EXPECT_TRUE(seg->ledger().Reserve(s, d, 10 * kMiB));
}

TEST_F(MemoryLedgerTest, ConcurrentReservationsNeverOvershoot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 1000 * kMiB);
  const int s = *seg->Join(getpid(), 1, "test");
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (seg->ledger().Reserve(s, d, 3 * kMiB)) {
          granted.fetch_add(1);
          if (i % 3 == 0) {
            seg->ledger().Release(s, d, 3 * kMiB);
            granted.fetch_sub(1);
          }
        }
        EXPECT_LE(seg->ledger().MemoryUsed(d), 1000 * kMiB);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seg->ledger().MemoryUsed(d), uint64_t{3} * granted.load() * kMiB);
  EXPECT_LE(seg->ledger().MemoryUsed(d), 1000 * kMiB);
  EXPECT_GT(seg->ledger().MemoryUsed(d), 1000 * kMiB - 3 * kMiB);  // the quota did fill
}

TEST_F(MemoryLedgerTest, AFailingReservationReclaimsTheDeadFirst) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  InChildThenKill([&] {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->ledger().Reserve(*s, d, 90 * kMiB)) _exit(1);
  });
  const int mine = *seg->Join(getpid(), 1, "parent");
  EXPECT_TRUE(seg->ledger().Reserve(mine, d, 50 * kMiB));
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 50 * kMiB);
}

TEST_F(MemoryLedgerTest, ProcessesAndThreadsRacingAtTheLimitNeverOvershoot) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  constexpr int kProcesses = 3;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      bool ok = seg->ReopenAfterFork().ok();
      auto s = seg->Join(getpid(), 10 + p, "racer");
      ok = ok && s.ok();
      std::atomic<bool> good{ok};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4 && ok; ++t) {
        threads.emplace_back([&] {
          for (int round = 0; round < 200; ++round) {
            int held = 0;
            while (held < 50 && seg->ledger().Reserve(*s, d, 7 * kMiB)) ++held;
            if (seg->ledger().MemoryUsed(d) > 100 * kMiB) good = false;
            for (int i = 0; i < held; ++i) seg->ledger().Release(*s, d, 7 * kMiB);
          }
        });
      }
      for (auto& th : threads) th.join();
      _exit(good && seg->ledger().SlotMemory(*s, d) == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const GroupSnapshot snap = seg->Snapshot();
  EXPECT_LE(snap.devices[0].memory_peak, 100 * kMiB);
  EXPECT_GE(snap.devices[0].memory_peak, 100 * kMiB - 7 * kMiB);  // the quota did fill
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 0u);
}

}  // namespace
}  // namespace gpuslice::segment_test
