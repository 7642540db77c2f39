#include "daemon/mps_gpu_control.h"

#include <gtest/gtest.h>

#include <memory>

#include "daemon/gpu/fake_backend.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/mps/fake_mps.h"
#include "daemon/mps/mps_manager.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// MPS on GpuManager's leases: the MPS manager (its control daemons on the
// fake host) sets the compute mode through MpsGpuControl only.
class MpsGpuControlTest : public ::testing::Test {
 protected:
  MpsGpuControlTest() : host_(clock_) {}

  std::unique_ptr<mps::MpsManager> NewMps() {
    auto m = std::make_unique<mps::MpsManager>(mps::MpsOptions{.root = "/run/gpuslice/mps"}, gpus_,
                                               host_, clock_);
    EXPECT_TRUE(m->Start().ok());
    return m;
  }
  void Acquire(mps::MpsManager& m, const std::string& tenant) {
    auto r = m.Acquire({tenant, "0", {}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->tier, Tier::kMps);
  }
  ComputeMode Mode() { return backend_.Read(0)->compute_mode; }
  Status LeaseMode(ComputeMode mode, int64_t seconds) {
    return manager_
        .Set({0}, ComputeModeSetting{mode}, LeaseOptions{"uid:1000", seconds * kSecond, false})[0]
        .get();
  }
  void Expire(int64_t seconds) {
    clock_.Advance(seconds * kSecond);
    manager_.ExpireDue();
    ASSERT_TRUE(manager_.Energy(0).get().ok());  // the expiry has run
  }

  SimulatedClock clock_{1000 * kSecond};
  FakeBackend backend_{1};
  GpuManager manager_{backend_, clock_};
  MpsGpuControl gpus_{backend_, manager_};
  mps::testing::FakeHost host_;
};

TEST_F(MpsGpuControlTest, ALeaseExpiringUnderARunningMpsDaemonLeavesItsMode) {
  // An operator's lease from before MPS started, then MPS on top of it.
  ASSERT_TRUE(LeaseMode(ComputeMode::kProhibited, 60).ok());
  auto mps = NewMps();
  Acquire(*mps, "alice");
  EXPECT_EQ(Mode(), ComputeMode::kExclusiveProcess);
  Expire(61);
  EXPECT_EQ(Mode(), ComputeMode::kExclusiveProcess);
  // The last tenant leaves: the mode from before any lease.
  ASSERT_TRUE(mps->Release("alice").ok());
  EXPECT_EQ(Mode(), ComputeMode::kDefault);
  EXPECT_TRUE(manager_.Leases().empty());
}

TEST_F(MpsGpuControlTest, ALeaseOnTopOfMpsGoesBackToMpssModeWhenItExpires) {
  auto mps = NewMps();
  Acquire(*mps, "alice");
  ASSERT_TRUE(LeaseMode(ComputeMode::kDefault, 60).ok());
  EXPECT_EQ(Mode(), ComputeMode::kDefault);
  Expire(61);
  EXPECT_EQ(Mode(), ComputeMode::kExclusiveProcess);
  ASSERT_TRUE(mps->Release("alice").ok());
  EXPECT_EQ(Mode(), ComputeMode::kDefault);
}

TEST_F(MpsGpuControlTest, TheDaemonsStopLeavesTheModeOfTheMpsDaemonItLeavesRunning) {
  auto mps = NewMps();
  Acquire(*mps, "alice");
  manager_.RevertAll();  // gpusliced stops; MPS's control daemon runs on
  EXPECT_EQ(Mode(), ComputeMode::kExclusiveProcess);
  const std::vector<LeaseInfo> leases = manager_.Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].holder, MpsGpuControl::kHolder);
}

TEST_F(MpsGpuControlTest, TheProbeChangesNothing) {
  ASSERT_TRUE(LeaseMode(ComputeMode::kProhibited, 60).ok());
  auto mps = NewMps();
  EXPECT_EQ(Mode(), ComputeMode::kProhibited);
  ASSERT_EQ(manager_.Leases().size(), 1u);
}

}  // namespace
}  // namespace gpuslice::daemon
