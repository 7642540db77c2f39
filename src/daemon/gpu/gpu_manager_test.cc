#include "daemon/gpu/gpu_manager.h"

#include <gtest/gtest.h>

#include <condition_variable>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

LeaseOptions Lease(const std::string& holder, int64_t seconds) {
  return LeaseOptions{holder, seconds * kSecond, false};
}

uint32_t PowerMw(FakeBackend& b, uint32_t gpu) { return b.Read(gpu)->power_limit_mw; }

Status SetPower(GpuManager& m, uint32_t gpu, uint32_t watts, const LeaseOptions& lease) {
  return m.Set({gpu}, PowerLimit{watts * 1000}, lease)[0].get();
}

class GpuManagerTest : public ::testing::Test {
 protected:
  FakeBackend backend_{2};
  SimulatedClock clock_{1000 * kSecond};
  GpuManager manager_{backend_, clock_};
};

TEST_F(GpuManagerTest, CommandsForOneGpuRunInSubmissionOrder) {
  // Hold GPU 0's first command until everything is queued.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  backend_.SetHook([&](uint32_t gpu, const SettingValue& v) {
    if (gpu == 0 && v == SettingValue(PowerLimit{300'000})) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
    }
  });
  auto a = manager_.Set({0}, PowerLimit{300'000}, Lease("a", 60));
  auto b = manager_.Set({0}, PowerLimit{400'000}, Lease("b", 60));
  auto c = manager_.Set({0}, Persistence{true}, Lease("c", 60));
  // GPU 1 is not held up by GPU 0.
  ASSERT_TRUE(manager_.Set({1}, PowerLimit{500'000}, Lease("d", 60))[0].get().ok());
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(a[0].get().ok());
  ASSERT_TRUE(b[0].get().ok());
  ASSERT_TRUE(c[0].get().ok());
  std::vector<SettingValue> gpu0;
  for (const auto& call : backend_.Calls()) {
    if (call.index == 0) gpu0.push_back(call.value);
  }
  ASSERT_EQ(gpu0.size(), 3u);
  EXPECT_EQ(gpu0[0], SettingValue(PowerLimit{300'000}));
  EXPECT_EQ(gpu0[1], SettingValue(PowerLimit{400'000}));
  EXPECT_EQ(gpu0[2], SettingValue(Persistence{true}));
  EXPECT_EQ(PowerMw(backend_, 0), 400'000u);
}

TEST_F(GpuManagerTest, PerGpuErrorsAreReportedPerGpuAndTheOthersUndone) {
  backend_.FailSets(1, PermissionDenied("no permission"));
  auto f = manager_.Set({0, 1}, PowerLimit{300'000}, Lease("a", 60));
  EXPECT_EQ(f[0].get().code(), StatusCode::kAborted);  // rule 10 (gpu_manager_fault_test.cc)
  Status s = f[1].get();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_EQ(PowerMw(backend_, 1), 700'000u);
  EXPECT_TRUE(manager_.Leases().empty());
}

TEST_F(GpuManagerTest, OutOfRangeIsRefusedNamingTheRange) {
  Status s = SetPower(manager_, 0, 900, Lease("a", 60));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("200-700 W"), std::string::npos) << s.message();
  EXPECT_TRUE(backend_.Calls().empty());
  Status c = manager_.Set({0}, GpuClocks{ClockRange{300, 5000}}, Lease("a", 60))[0].get();
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.message().find("1980"), std::string::npos) << c.message();
}

TEST_F(GpuManagerTest, LeaseExpiryRevertsToTheBaseline) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 60)).ok());
  clock_.Advance(59 * kSecond);
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());  // drains GPU 0's queue
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  clock_.Advance(1 * kSecond);
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(manager_.Leases().empty());
}

TEST_F(GpuManagerTest, StackedLeasesRevertInOrder) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 100)).ok());
  ASSERT_TRUE(SetPower(manager_, 0, 400, Lease("b", 10)).ok());
  ASSERT_TRUE(SetPower(manager_, 0, 500, Lease("c", 50)).ok());
  EXPECT_EQ(PowerMw(backend_, 0), 500'000u);
  // b (not the most recent) expires: nothing changes on the device.
  clock_.Advance(10 * kSecond);
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 500'000u);
  // c expires: back to a's value.
  clock_.Advance(40 * kSecond);
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  // a released: back to the value before the first lease.
  ASSERT_TRUE(manager_.Release({0}, SettingKind::kPowerLimit, "a")[0].get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
}

TEST_F(GpuManagerTest, ReleasingALeaseNotHeldIsNotFound) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 100)).ok());
  Status s = manager_.Release({0}, SettingKind::kPowerLimit, "b")[0].get();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
}

TEST_F(GpuManagerTest, RenewingReplacesTheHoldersLease) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 10)).ok());
  ASSERT_TRUE(SetPower(manager_, 0, 350, Lease("a", 100)).ok());
  clock_.Advance(20 * kSecond);
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 350'000u);
  ASSERT_EQ(manager_.Leases().size(), 1u);
}

TEST_F(GpuManagerTest, PermanentDropsLeasesAndIsNotReverted) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 10)).ok());
  ASSERT_TRUE(SetPower(manager_, 0, 450, LeaseOptions{"op", std::nullopt, true}).ok());
  EXPECT_TRUE(manager_.Leases().empty());
  clock_.Advance(20 * kSecond);
  manager_.ExpireDue();
  manager_.RevertAll();
  EXPECT_EQ(PowerMw(backend_, 0), 450'000u);
}

TEST_F(GpuManagerTest, RevertAllRestoresEveryBaselineAndRefusesNewSets) {
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("a", 100)).ok());
  ASSERT_TRUE(SetPower(manager_, 0, 400, Lease("b", 100)).ok());
  ASSERT_TRUE(manager_.Set({1}, GpuClocks{ClockRange{1000, 1200}}, Lease("a", 100))[0].get().ok());
  ASSERT_TRUE(
      manager_.Set({1}, ComputeModeSetting{ComputeMode::kExclusiveProcess}, Lease("c", 100))[0]
          .get()
          .ok());
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kExclusiveProcess);
  manager_.RevertAll();
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_EQ(backend_.Read(1)->locked_gpu_clocks, std::nullopt);
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kDefault);
  EXPECT_TRUE(manager_.Leases().empty());
  EXPECT_EQ(SetPower(manager_, 0, 300, Lease("a", 1)).code(), StatusCode::kUnavailable);
}

TEST_F(GpuManagerTest, StopRunsWhatIsQueuedThenRefuses) {
  auto queued = manager_.Set({0}, PowerLimit{300'000}, Lease("a", 100));
  manager_.Stop();
  EXPECT_TRUE(queued[0].get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  EXPECT_EQ(SetPower(manager_, 0, 400, Lease("a", 1)).code(), StatusCode::kUnavailable);
  EXPECT_EQ(manager_.Energy(1).get().status().code(), StatusCode::kUnavailable);
}

TEST_F(GpuManagerTest, ComputeModeEntryPointForMps) {
  ASSERT_TRUE(
      manager_.HoldComputeMode(0, ComputeMode::kExclusiveProcess, "mps", std::nullopt).ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kExclusiveProcess);
  clock_.Advance(1000000 * kSecond);  // no expiry
  manager_.ExpireDue();
  ASSERT_TRUE(manager_.Energy(0).get().ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kExclusiveProcess);
  ASSERT_TRUE(manager_.ReleaseComputeMode(0, "mps").ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kDefault);
}

TEST_F(GpuManagerTest, AKeptLeaseOutlivesTheStopAndTheLeasesAboveIt) {
  // Rule 12: MPS holds the exclusive mode, an operator's lease goes on top.
  ASSERT_TRUE(
      manager_.HoldComputeMode(0, ComputeMode::kExclusiveProcess, "mps", std::nullopt).ok());
  ASSERT_TRUE(
      manager_.Set({0}, ComputeModeSetting{ComputeMode::kProhibited}, Lease("uid:0", 100))[0]
          .get()
          .ok());
  ASSERT_TRUE(SetPower(manager_, 0, 300, Lease("uid:0", 100)).ok());
  manager_.RevertAll();
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kExclusiveProcess);
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  const std::vector<LeaseInfo> left = manager_.Leases();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].holder, "mps");
  EXPECT_EQ(left[0].baseline, SettingValue(ComputeModeSetting{ComputeMode::kDefault}));
}

TEST_F(GpuManagerTest, ABaselineGivenWithTheFirstLeaseIsWhereItGoesBack) {
  // A holder that changed the device before it held a lease names the mode
  // from before its change; a stack already there keeps its own.
  backend_.Mutate(0, [](GpuInfo& g) { g.compute_mode = ComputeMode::kExclusiveProcess; });
  ASSERT_TRUE(
      manager_.HoldComputeMode(0, ComputeMode::kExclusiveProcess, "mps", ComputeMode::kProhibited)
          .ok());
  ASSERT_TRUE(manager_.ReleaseComputeMode(0, "mps").ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kProhibited);

  ASSERT_TRUE(manager_.Set({0}, ComputeModeSetting{ComputeMode::kDefault}, Lease("uid:0", 100))[0]
                  .get()
                  .ok());
  ASSERT_TRUE(
      manager_.HoldComputeMode(0, ComputeMode::kExclusiveProcess, "mps", ComputeMode::kDefault)
          .ok());
  ASSERT_TRUE(manager_.Release({0}, SettingKind::kComputeMode, "uid:0")[0].get().ok());
  ASSERT_TRUE(manager_.ReleaseComputeMode(0, "mps").ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kProhibited);
}

TEST_F(GpuManagerTest, CheckSettableChangesNothing) {
  ASSERT_TRUE(manager_.CheckSettable(0, SettingKind::kComputeMode).ok());
  EXPECT_EQ(backend_.Read(0)->compute_mode, ComputeMode::kDefault);
  EXPECT_TRUE(manager_.Leases().empty());
}

TEST_F(GpuManagerTest, ChangeListenerHearsEveryChange) {
  std::mutex mu;
  std::vector<uint32_t> changed;
  manager_.SetChangeListener([&](uint32_t gpu) {
    std::lock_guard lock(mu);
    changed.push_back(gpu);
  });
  ASSERT_TRUE(SetPower(manager_, 1, 300, Lease("a", 100)).ok());
  ASSERT_TRUE(manager_.Release({1}, SettingKind::kPowerLimit, "a")[0].get().ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(changed, (std::vector<uint32_t>{1, 1}));
}

}  // namespace
}  // namespace gpuslice::daemon
