#include "limiter/ledger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "limiter/ledger_fixture.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// ---- TrackedTable ----

TEST(TrackedTableTest, InsertsFindsAndErases) {
  TrackedTable t;
  EXPECT_FALSE(t.Erase(Resource::kPointer, 42));
  ASSERT_TRUE(t.Insert(Resource::kPointer, 42, Charge{1, 7, 9}));
  EXPECT_EQ(t.size(), 1u);
  auto c = t.Erase(Resource::kPointer, 42);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->device, 1);
  EXPECT_EQ(c->bytes, 7u);
  EXPECT_EQ(c->context, 9u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.Erase(Resource::kPointer, 42));
}

TEST(TrackedTableTest, KindsNeverCollide) {
  TrackedTable t;
  ASSERT_TRUE(t.Insert(Resource::kPointer, 5, Charge{0, 1, 0}));
  ASSERT_TRUE(t.Insert(Resource::kVmmHandle, 5, Charge{0, 2, 0}));
  ASSERT_TRUE(t.Insert(Resource::kContext, 5, Charge{0, 3, 0}));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Erase(Resource::kVmmHandle, 5)->bytes, 2u);
  EXPECT_FALSE(t.Erase(Resource::kArray, 5));
  EXPECT_EQ(t.Erase(Resource::kContext, 5)->bytes, 3u);
  EXPECT_EQ(t.Erase(Resource::kPointer, 5)->bytes, 1u);
}

TEST(TrackedTableTest, InsertingAgainReplaces) {
  TrackedTable t;
  ASSERT_TRUE(t.Insert(Resource::kArray, 8, Charge{0, 1, 0}));
  ASSERT_TRUE(t.Insert(Resource::kArray, 8, Charge{2, 5, 3}));
  EXPECT_EQ(t.size(), 1u);
  auto c = t.Erase(Resource::kArray, 8);
  EXPECT_EQ(c->device, 2);
  EXPECT_EQ(c->bytes, 5u);
}

// Random inserts and erases against std::map, across growth, with keys that
// share their low bits (as device pointers do) so probe runs are long and
// backward-shift deletion is exercised.
TEST(TrackedTableTest, AgreesWithAMapUnderRandomChurn) {
  TrackedTable t;
  std::map<std::pair<int, uint64_t>, uint64_t> model;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    const auto kind = static_cast<Resource>(rng() % 2);
    const uint64_t id = (rng() % 3000) << 21;
    const auto key = std::make_pair(static_cast<int>(kind), id);
    if (rng() % 3 != 0) {
      const uint64_t bytes = rng();
      ASSERT_TRUE(t.Insert(kind, id, Charge{0, bytes, 0}));
      model[key] = bytes;
    } else {
      auto c = t.Erase(kind, id);
      auto it = model.find(key);
      ASSERT_EQ(c.has_value(), it != model.end()) << "step " << step;
      if (c) {
        EXPECT_EQ(c->bytes, it->second);
        model.erase(it);
      }
    }
    ASSERT_EQ(t.size(), model.size());
  }
  EXPECT_LE(t.size() * 2, t.capacity());
  for (const auto& [key, bytes] : model) {
    auto c = t.Erase(static_cast<Resource>(key.first), key.second);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->bytes, bytes);
  }
  EXPECT_EQ(t.size(), 0u);
}

TEST(TrackedTableTest, EraseContextTakesOnlyThatContext) {
  TrackedTable t;
  for (uint64_t i = 1; i <= 1000; ++i) {
    ASSERT_TRUE(t.Insert(Resource::kPointer, i << 21, Charge{0, i, i % 3 == 0 ? 77u : 88u}));
  }
  std::vector<Charge> freed;
  t.EraseContext(77, &freed);
  EXPECT_EQ(freed.size(), 333u);
  for (const Charge& c : freed) EXPECT_EQ(c.context, 77u);
  EXPECT_EQ(t.size(), 667u);
  for (uint64_t i = 1; i <= 1000; ++i) {
    EXPECT_EQ(t.Erase(Resource::kPointer, i << 21).has_value(), i % 3 != 0) << i;
  }
}

// ---- Ledger over a real segment ----

class LedgerTest : public LedgerFixture {
 protected:
  LedgerTest() : LedgerFixture(10 * kMiB) {}
};

TEST_F(LedgerTest, UnboundChargesNothing) {
  Ledger unbound;
  EXPECT_FALSE(unbound.Reserve(0, kMiB));
  unbound.Release(Charge{0, kMiB, 0});  // no slot: nothing to give back
  EXPECT_EQ(Used(), 0u);
}

TEST_F(LedgerTest, ReservesWithinTheLimitAndJoinsOnFirstCharge) {
  EXPECT_TRUE(segment_->Snapshot().members.empty());
  auto a = ledger_.Reserve(device_, 6 * kMiB);
  ASSERT_TRUE(a);
  EXPECT_EQ(segment_->Snapshot().members.size(), 1u);
  EXPECT_FALSE(ledger_.Reserve(device_, 5 * kMiB));  // would overshoot 10 MiB
  EXPECT_EQ(Used(), 6 * kMiB);
  ledger_.Release(*a);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(LedgerTest, AFreeGivesBackWhatItsAllocationWasCharged) {
  auto c = ledger_.Reserve(device_, 3 * kMiB);
  ASSERT_TRUE(c);
  ledger_.Track(Resource::kPointer, 0x7000'0000, *c);
  EXPECT_EQ(ledger_.tracked(), 1u);
  auto back = ledger_.Untrack(Resource::kPointer, 0x7000'0000);
  ASSERT_TRUE(back);
  ledger_.Release(*back);
  EXPECT_EQ(Used(), 0u);
  EXPECT_FALSE(ledger_.Untrack(Resource::kPointer, 0x7000'0000));  // a double free: nothing
}

// The fast path: the group's count first, the slot when the pointer is
// recorded; a free takes both back.
TEST_F(LedgerTest, TheFastPathChargesTheGroupThenTheSlotAndAFreeTakesBoth) {
  auto c = ledger_.ReserveDevice(device_, 3 * kMiB);
  ASSERT_TRUE(c);
  const int slot = ledger_.slot();
  ASSERT_GE(slot, 0);
  EXPECT_EQ(Used(), 3 * kMiB);
  EXPECT_EQ(segment_->ledger().SlotMemory(slot, device_), 0u);  // not recorded yet
  ledger_.TrackReserved(Resource::kPointer, 0x7000'0000, *c);
  EXPECT_EQ(segment_->ledger().SlotMemory(slot, device_), 3 * kMiB);
  EXPECT_FALSE(ledger_.ReserveDevice(device_, 8 * kMiB));  // would overshoot 10 MiB
  EXPECT_EQ(Used(), 3 * kMiB);

  auto back = ledger_.UntrackAndRelease(Resource::kPointer, 0x7000'0000);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->bytes, 3 * kMiB);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(segment_->ledger().SlotMemory(slot, device_), 0u);
  EXPECT_FALSE(ledger_.UntrackAndRelease(Resource::kPointer, 0x7000'0000));  // a double free
  EXPECT_EQ(Used(), 0u);
}

TEST_F(LedgerTest, AReservationTheDriverRefusedGivesBackOnlyTheGroupsCount) {
  auto kept = ledger_.Reserve(device_, 2 * kMiB);  // the slot holds 2 MiB
  ASSERT_TRUE(kept);
  auto c = ledger_.ReserveDevice(device_, 4 * kMiB);
  ASSERT_TRUE(c);
  ledger_.ReleaseReserved(*c);
  EXPECT_EQ(Used(), 2 * kMiB);
  EXPECT_EQ(segment_->ledger().SlotMemory(ledger_.slot(), device_), 2 * kMiB);
}

// Every path that changes the slot (the fast one, Reserve/Release, forced
// charges) from many threads at once: the slot ends where the group's count
// does, so a reaper that gave back a dead member's slot would leave the
// group exactly charged.
TEST_F(LedgerTest, ThreadsMixingThePathsKeepTheSlotEqualToTheGroupsCount) {
  segment_->SetMemoryLimit(device_, kUnlimitedBytes);
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 1; i <= 2000; ++i) {
        const uint64_t id = (uint64_t(t) << 40) | (i << 21);
        if (auto c = ledger_.ReserveDevice(device_, kMiB)) {
          ledger_.TrackReserved(Resource::kPointer, id, *c);
        }
        auto other = ledger_.Reserve(device_, 2 * kMiB);
        ledger_.ForceCharge(Charge{device_, kMiB, 0});
        if (i % 2 == 0) {
          ASSERT_TRUE(ledger_.UntrackAndRelease(Resource::kPointer, id));
        }
        if (other) ledger_.Release(*other);
        ledger_.Release(Charge{device_, kMiB, 0});
      }
    });
  }
  for (auto& th : threads) th.join();
  // Half the pointers are still held: 1 MiB each.
  EXPECT_EQ(Used(), uint64_t{kThreads} * 1000 * kMiB);
  EXPECT_EQ(segment_->ledger().SlotMemory(ledger_.slot(), device_), Used());
  EXPECT_EQ(ledger_.tracked(), uint64_t{kThreads} * 1000);
}

TEST_F(LedgerTest, SettleChargesOrGivesBackTheDifference) {
  auto c = ledger_.Reserve(device_, 4 * kMiB);
  ASSERT_TRUE(c);
  ledger_.Track(Resource::kArray, 1, *c);
  ledger_.Settle(Resource::kArray, 1, 2 * kMiB);
  EXPECT_EQ(Used(), 2 * kMiB);
  ledger_.Settle(Resource::kArray, 1, 12 * kMiB);  // above the limit: the driver already gave it
  EXPECT_EQ(Used(), 12 * kMiB);
  ledger_.Release(*ledger_.Untrack(Resource::kArray, 1));
  EXPECT_EQ(Used(), 0u);
}

TEST_F(LedgerTest, ADestroyedContextGivesBackItsMemory) {
  for (uint64_t i = 1; i <= 4; ++i) {
    auto c = ledger_.Reserve(device_, kMiB);
    ASSERT_TRUE(c);
    c->context = i % 2 == 0 ? 0xc1 : 0xc2;
    ledger_.Track(Resource::kPointer, i << 21, *c);
  }
  ledger_.ReleaseContext(0xc1);
  EXPECT_EQ(Used(), 2 * kMiB);
  EXPECT_EQ(ledger_.tracked(), 2u);
  ledger_.ReleaseContext(0);  // 0: memory that outlives contexts, never released this way
  EXPECT_EQ(Used(), 2 * kMiB);
}

TEST_F(LedgerTest, PrimaryContextIsChargedOnceAndGivenBackWithItsMemory) {
  ASSERT_TRUE(ledger_.PrimaryNeedsCharge(device_));
  auto charge = ledger_.Reserve(device_, 2 * kMiB);
  ledger_.PrimaryRetainDone(device_, 0xab, charge);
  EXPECT_FALSE(ledger_.PrimaryNeedsCharge(device_));
  // A racing retain that charged too gives its surplus back.
  ledger_.PrimaryRetainDone(device_, 0xab, ledger_.Reserve(device_, 2 * kMiB));
  EXPECT_EQ(Used(), 2 * kMiB);
  auto mem = ledger_.Reserve(device_, kMiB);
  mem->context = 0xab;
  ledger_.Track(Resource::kPointer, 1 << 21, *mem);
  ledger_.PrimaryRelease(device_, false);  // one retain left
  EXPECT_EQ(Used(), 3 * kMiB);
  ledger_.PrimaryRelease(device_, false);
  EXPECT_EQ(Used(), 0u);
  EXPECT_TRUE(ledger_.PrimaryNeedsCharge(device_));
}

TEST_F(LedgerTest, ResetPrimaryEndsEveryRetain) {
  ledger_.PrimaryRetainDone(device_, 0xab, ledger_.Reserve(device_, kMiB));
  ledger_.PrimaryRetainDone(device_, 0xab, std::nullopt);
  ledger_.PrimaryRelease(device_, true);
  EXPECT_EQ(Used(), 0u);
  EXPECT_TRUE(ledger_.PrimaryNeedsCharge(device_));
}

// Each thread fills the group until refused, then frees what it holds; the
// group's count never passes the limit, and everything comes back.
TEST_F(LedgerTest, ThreadsRacingAtTheLimitNeverOvershootAndGiveEverythingBack) {
  constexpr int kThreads = 8;
  std::atomic<uint64_t> peak{0};
  std::atomic<uint64_t> refusals{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t next = 1;
      for (int round = 0; round < 300; ++round) {
        std::vector<uint64_t> held;
        while (auto c = ledger_.Reserve(device_, 3 * kMiB)) {
          const uint64_t id = (uint64_t(t) << 40) | (next++ << 21);
          ledger_.Track(Resource::kPointer, id, *c);
          held.push_back(id);
          const uint64_t used = Used();
          uint64_t seen = peak.load();
          while (used > seen && !peak.compare_exchange_weak(seen, used)) {
          }
        }
        refusals.fetch_add(1);
        for (uint64_t id : held) {
          auto back = ledger_.Untrack(Resource::kPointer, id);
          ASSERT_TRUE(back);
          ledger_.Release(*back);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(peak.load(), 10 * kMiB);
  EXPECT_EQ(peak.load(), 9 * kMiB);  // three 3 MiB charges fit, a fourth never
  EXPECT_EQ(refusals.load(), uint64_t{kThreads} * 300);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(ledger_.tracked(), 0u);
}

TEST_F(LedgerTest, AForkedChildStartsEmptyAndJoinsAsItself) {
  auto c = ledger_.Reserve(device_, kMiB);
  ledger_.Track(Resource::kPointer, 1 << 21, *c);
  ledger_.LockForFork();
  const pid_t pid = fork();
  ledger_.UnlockForFork();  // in both processes, before anything can return
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ledger_.ResetInChild();
    if (segment_->ReopenAfterFork().ok() && ledger_.tracked() == 0 &&
        !ledger_.Untrack(Resource::kPointer, 1 << 21) && ledger_.Reserve(device_, kMiB) &&
        Used() == 2 * kMiB) {
      _exit(0);
    }
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ledger_.tracked(), 1u);  // the parent's record stays
}

}  // namespace
}  // namespace gpuslice::limiter
