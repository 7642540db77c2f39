#include "limiter/graph_memory_charges.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "limiter/ledger_fixture.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// The simulator's graph pool in small (docs/sim.md "Graph memory"): an
// exec's allocations are mapped at its first run (the pool grows by what its
// free memory lacks), kept between runs and after the exec is destroyed,
// and released by a trim of the idle ones.
class FakeGraphPool : public GraphMemDriver {
 public:
  std::optional<PoolUsage> Usage(int ordinal) override {
    if (ordinal != 0 || !known) return std::nullopt;
    return PoolUsage{reserved, used};
  }
  CUresult Run(uint64_t exec) {
    auto& [need, mapped] = execs[exec];
    if (!mapped) {
      const uint64_t free = reserved - used;
      if (need > free) reserved += need - free;
      used += need;
      mapped = true;
    }
    peak = std::max(peak, reserved + outside);
    return CUDA_SUCCESS;
  }
  void Destroy(uint64_t exec) {
    if (execs[exec].second) used -= execs[exec].first;
    execs.erase(exec);
  }
  void Trim() {
    for (auto& [h, e] : execs) {
      if (e.second) used -= e.first;
      e.second = false;
    }
    reserved = used;
  }
  std::map<uint64_t, std::pair<uint64_t, bool>> execs;  // need, mapped
  uint64_t reserved = 0;
  uint64_t used = 0;
  uint64_t outside = 0;  // what else the process holds on the device
  uint64_t peak = 0;
  bool known = true;
};

class GraphMemChargesTest : public LedgerFixture {
 protected:
  GraphMemChargesTest() : LedgerFixture(100 * kMiB) {}
  // An exec whose allocation nodes need `bytes`.
  void Instantiate(uint64_t exec, uint64_t bytes) {
    driver_.execs[exec] = {bytes, false};
    charges_.Instantiated(exec, 0, device_, bytes);
  }
  // A launch through the charges, as the hooks make it.
  CUresult Launch(uint64_t exec) {
    called_ = false;
    return charges_.Run(exec, [&] {
      called_ = true;
      used_at_call_ = Used();
      return driver_.Run(exec);
    });
  }
  void Outside(uint64_t bytes) {
    ASSERT_TRUE(ledger_.Reserve(device_, bytes).has_value());
    driver_.outside += bytes;
  }

  FakeGraphPool driver_;
  GraphMemCharges charges_{ledger_, driver_};
  bool called_ = false;
  uint64_t used_at_call_ = 0;
};

// A graph whose memory does not fit fails its launch with out-of-memory
// before the driver maps anything: the group never passes its cap. (Before,
// graph memory was not charged at all: the launch went through and the
// driver held 120 MiB against a 100 MiB cap.)
TEST_F(GraphMemChargesTest, AGraphThatWouldPassTheCapFailsItsLaunch) {
  Outside(40 * kMiB);
  Instantiate(1, 80 * kMiB);
  EXPECT_EQ(Launch(1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(called_) << "the driver was called";
  EXPECT_LE(driver_.peak, 100 * kMiB);
  EXPECT_EQ(Used(), 40 * kMiB);
}

// The first launch reserves the graph's memory before the driver maps it;
// relaunches cost nothing more (the mapping is kept), so a group at its
// cap keeps running its graph.
TEST_F(GraphMemChargesTest, TheFirstLaunchIsChargedAheadAndRelaunchesAreFree) {
  Outside(40 * kMiB);
  Instantiate(1, 60 * kMiB);
  ASSERT_EQ(Launch(1), CUDA_SUCCESS);
  EXPECT_EQ(used_at_call_, 100 * kMiB);  // held while the driver maps it
  EXPECT_EQ(Used(), 100 * kMiB);
  EXPECT_EQ(charges_.charged(0), 60 * kMiB);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Launch(1), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 100 * kMiB);
  EXPECT_LE(driver_.peak, 100 * kMiB);
}

// A destroyed exec's memory stays in the graph pool (charged) and serves
// the next exec without a new charge; a trim gives it back.
TEST_F(GraphMemChargesTest, DestroyedMemoryStaysChargedUntilATrim) {
  Instantiate(1, 60 * kMiB);
  ASSERT_EQ(Launch(1), CUDA_SUCCESS);
  driver_.Destroy(1);
  charges_.Destroyed(1);
  EXPECT_EQ(Used(), 60 * kMiB);  // the driver keeps it
  Instantiate(2, 60 * kMiB);
  ASSERT_EQ(Launch(2), CUDA_SUCCESS);
  EXPECT_EQ(used_at_call_, 60 * kMiB);  // its free memory served: nothing ahead
  driver_.Destroy(2);
  charges_.Destroyed(2);
  driver_.Trim();
  charges_.Trimmed(0);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(charges_.charged(0), 0u);
}

// After a trim an exec maps again at its next launch: charged ahead again,
// and refused if the room went meanwhile.
TEST_F(GraphMemChargesTest, ATrimmedExecIsChargedAgainAtItsNextLaunch) {
  Instantiate(1, 60 * kMiB);
  ASSERT_EQ(Launch(1), CUDA_SUCCESS);
  driver_.Trim();
  charges_.Trimmed(0);
  EXPECT_EQ(Used(), 0u);
  Outside(50 * kMiB);
  EXPECT_EQ(Launch(1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(called_);
  EXPECT_LE(driver_.peak, 100 * kMiB);
}

// Execs without allocation nodes, and a driver that cannot report the graph
// pool, are run without a charge.
TEST_F(GraphMemChargesTest, WhatCannotBeToldIsNotCharged) {
  EXPECT_EQ(Launch(7), CUDA_SUCCESS);
  EXPECT_TRUE(called_);
  driver_.known = false;
  Instantiate(1, 60 * kMiB);
  EXPECT_EQ(Launch(1), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u);
}

}  // namespace
}  // namespace gpuslice::limiter
