// GpuManager's durable lease records (gpu_manager.h rules 6-8): saved before
// the device changes, refused when they cannot be saved, restored after a
// crash. FakeBackend plays the GPUs, which keep their settings across a
// daemon's death; a SimulatedClock each plays the monotonic and wall clocks.
#include <gtest/gtest.h>

#include <mutex>

#include "daemon/gpu/fake_backend.h"
#include "daemon/gpu/gpu_manager.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kWallStart = 1'790'000'000 * kSecond;

LeaseOptions Lease(const std::string& holder, int64_t seconds) {
  return LeaseOptions{holder, seconds * kSecond, false};
}

uint32_t PowerMw(FakeBackend& b, uint32_t gpu) { return b.Read(gpu)->power_limit_mw; }

// The state directory, in memory: the last saved record, and failures on demand.
class FakeJournal {
 public:
  Status Save(const json& data) {
    std::lock_guard lock(mu_);
    if (fail_) return Unavailable("disk full");
    saved_ = data;
    ++saves_;
    return Status::Ok();
  }
  std::optional<json> Saved() const {
    std::lock_guard lock(mu_);
    return saved_;
  }
  int saves() const {
    std::lock_guard lock(mu_);
    return saves_;
  }
  void Fail(bool fail) {
    std::lock_guard lock(mu_);
    fail_ = fail;
  }
  // What StateStore::Load would answer.
  StatusOr<json> Load() const {
    std::lock_guard lock(mu_);
    if (!saved_) return NotFound("no record");
    return *saved_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<json> saved_;
  int saves_ = 0;
  bool fail_ = false;
};

// The stacks of the saved record, parsed (asserts it parses).
std::vector<LeaseStackRecord> Stacks(const std::optional<json>& data) {
  if (!data) return {};
  auto parsed = ParseLeaseRecords(*data);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : std::vector<LeaseStackRecord>{};
}

// One daemon run: a manager on the shared backend, journal and wall clock,
// with its own monotonic clock (which starts again at each run).
struct DaemonRun {
  DaemonRun(FakeBackend& backend, FakeJournal& journal, const SimulatedClock& wall,
            int64_t mono_start, std::string boot_id = "")
      : clock(mono_start), manager(backend, clock) {
    manager.SetPersistence(LeasePersistence{[&journal](const json& d) { return journal.Save(d); },
                                            &wall, std::move(boot_id)});
  }
  SimulatedClock clock;
  GpuManager manager;
};

class GpuManagerDurabilityTest : public ::testing::Test {
 protected:
  // A run that dies without reverting anything (SIGKILL): the manager is
  // destroyed, which stops its executors but never touches a device.
  std::unique_ptr<DaemonRun> Start(int64_t mono_start = 1000 * kSecond, std::string boot_id = "") {
    return std::make_unique<DaemonRun>(backend_, journal_, wall_, mono_start, std::move(boot_id));
  }
  Status SetPower(DaemonRun& r, uint32_t gpu, uint32_t watts, const LeaseOptions& lease) {
    return r.manager.Set({gpu}, PowerLimit{watts * 1000}, lease)[0].get();
  }
  // The saved record as the device was about to change, per Set call (on
  // `gpu` only, when given).
  std::vector<std::vector<LeaseStackRecord>> RecordAtEachSet(std::optional<uint32_t> gpu = {}) {
    std::lock_guard lock(mu_);
    std::vector<std::vector<LeaseStackRecord>> out;
    for (const auto& [g, stacks] : at_set_) {
      if (!gpu || g == *gpu) out.push_back(stacks);
    }
    return out;
  }
  void WatchSets() {
    backend_.SetHook([this](uint32_t gpu, const SettingValue&) {
      auto stacks = Stacks(journal_.Saved());
      std::lock_guard lock(mu_);
      at_set_.emplace_back(gpu, std::move(stacks));
    });
  }

  FakeBackend backend_{2};
  FakeJournal journal_;
  SimulatedClock wall_{kWallStart};
  std::mutex mu_;
  std::vector<std::pair<uint32_t, std::vector<LeaseStackRecord>>> at_set_;
};

TEST_F(GpuManagerDurabilityTest, TheLeaseIsSavedBeforeTheDeviceChanges) {
  WatchSets();
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("uid:0", 60)).ok());
  auto at_set = RecordAtEachSet();
  ASSERT_EQ(at_set.size(), 1u);
  const std::vector<LeaseStackRecord> expected = {
      {"GPU-fake-0",
       0,
       SettingKind::kPowerLimit,
       PowerLimit{700'000},
       {{"uid:0", PowerLimit{300'000}, kWallStart + 60 * kSecond, 60 * kSecond}}}};
  EXPECT_EQ(at_set[0], expected);
  EXPECT_EQ(Stacks(journal_.Saved()), expected);
}

TEST_F(GpuManagerDurabilityTest, AReleaseIsSavedAsARevertBeforeTheDeviceChanges) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("uid:0", 60)).ok());
  WatchSets();
  ASSERT_TRUE(run->manager.Release({0}, SettingKind::kPowerLimit, "uid:0")[0].get().ok());
  auto at_set = RecordAtEachSet();
  ASSERT_EQ(at_set.size(), 1u);
  // While the device goes back, the record still knows where to (rule 7).
  const std::vector<LeaseStackRecord> reverting = {
      {"GPU-fake-0", 0, SettingKind::kPowerLimit, PowerLimit{700'000}, {}}};
  EXPECT_EQ(at_set[0], reverting);
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
}

TEST_F(GpuManagerDurabilityTest, ExpiryAndPermanentChangesAreSavedBeforeTheDevice) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 100)).ok());
  ASSERT_TRUE(SetPower(*run, 0, 400, Lease("b", 10)).ok());
  WatchSets();
  run->clock.Advance(10 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());  // drains GPU 0's queue
  // b (effective) expired: the record lost b before the device went to a's value.
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  auto at_set = RecordAtEachSet();
  ASSERT_EQ(at_set.size(), 1u);
  ASSERT_EQ(at_set[0].size(), 1u);
  ASSERT_EQ(at_set[0][0].leases.size(), 1u);
  EXPECT_EQ(at_set[0][0].leases[0].holder, "a");

  ASSERT_TRUE(SetPower(*run, 1, 300, Lease("a", 10)).ok());
  const size_t before = RecordAtEachSet().size();
  ASSERT_TRUE(SetPower(*run, 1, 450, LeaseOptions{"op", std::nullopt, true}).ok());
  at_set = RecordAtEachSet();
  ASSERT_EQ(at_set.size(), before + 1);
  // GPU 1's stack became the permanent value as a baseline to go to (rule 7).
  const LeaseStackRecord permanent{
      "GPU-fake-1", 1, SettingKind::kPowerLimit, PowerLimit{450'000}, {}};
  ASSERT_EQ(at_set.back().size(), 2u);
  EXPECT_EQ(at_set.back()[1], permanent);
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 1u);  // GPU 0's lease a only
  EXPECT_EQ(PowerMw(backend_, 1), 450'000u);
}

TEST_F(GpuManagerDurabilityTest, AFailedSaveRefusesTheChangeAndChangesNothing) {
  auto run = Start();
  journal_.Fail(true);
  Status s = SetPower(*run, 0, 300, Lease("a", 60));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("could not be saved"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("disk full"), std::string::npos) << s.message();
  EXPECT_TRUE(backend_.Calls().empty());
  EXPECT_TRUE(run->manager.Leases().empty());
  EXPECT_EQ(run->manager.Set({0}, PowerLimit{450'000}, LeaseOptions{"op", std::nullopt, true})[0]
                .get()
                .code(),
            StatusCode::kUnavailable);
  EXPECT_TRUE(backend_.Calls().empty());

  // A release and an expiry that cannot be saved keep the lease and the device.
  journal_.Fail(false);
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  journal_.Fail(true);
  EXPECT_EQ(run->manager.Release({0}, SettingKind::kPowerLimit, "a")[0].get().code(),
            StatusCode::kUnavailable);
  run->clock.Advance(60 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  EXPECT_EQ(run->manager.Leases().size(), 1u);
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 1u);
  // Once the disk is back, the next tick ends the lease.
  journal_.Fail(false);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(run->manager.Leases().empty());
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

TEST_F(GpuManagerDurabilityTest, ADeviceFailureLeavesTheRecordAsBefore) {
  auto run = Start();
  backend_.FailSets(0, PermissionDenied("no permission"));
  EXPECT_EQ(SetPower(*run, 0, 300, Lease("a", 60)).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(run->manager.Leases().empty());
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

TEST_F(GpuManagerDurabilityTest, RevertAllLeavesAnEmptyRecord) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  ASSERT_TRUE(
      run->manager.Set({1}, ComputeModeSetting{ComputeMode::kExclusiveProcess}, Lease("b", 60))[0]
          .get()
          .ok());
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 2u);
  run->manager.RevertAll();
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kDefault);
  ASSERT_TRUE(journal_.Saved().has_value());
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

TEST_F(GpuManagerDurabilityTest, AKeptLeaseStaysInTheRecordAtStopAndComesBackAtStart) {
  {
    auto run = Start();
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
    ASSERT_TRUE(
        run->manager.HoldComputeMode(1, ComputeMode::kExclusiveProcess, "mps", std::nullopt).ok());
    run->manager.RevertAll();  // a clean stop
    EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
    const auto stacks = Stacks(journal_.Saved());
    ASSERT_EQ(stacks.size(), 1u);
    ASSERT_EQ(stacks[0].leases.size(), 1u);
    EXPECT_EQ(stacks[0].leases[0].holder, "mps");
    EXPECT_TRUE(stacks[0].leases[0].kept);
  }
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kExclusiveProcess);
  auto run = Start();
  RestoreReport report = run->manager.Restore(journal_.Load());
  EXPECT_EQ(report.kept, 1);
  // Still the kept one: the next stop leaves it again, a release ends it.
  run->manager.RevertAll();
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kExclusiveProcess);
  auto next = Start();
  next->manager.Restore(journal_.Load());
  ASSERT_TRUE(next->manager.ReleaseComputeMode(1, "mps").ok());
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kDefault);
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

TEST_F(GpuManagerDurabilityTest, RestoreKeepsRunningLeasesOnTheWallTimeLeft) {
  {
    auto run = Start();
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
    ASSERT_TRUE(
        run->manager.HoldComputeMode(1, ComputeMode::kExclusiveProcess, "mps", std::nullopt).ok());
  }  // SIGKILL
  // Someone reset the device while the daemon was down; 100 s passed; the
  // machine rebooted (the monotonic clock starts again).
  backend_.Mutate(0, [](GpuInfo& g) { g.power_limit_mw = 700'000; });
  wall_.Advance(100 * kSecond);
  auto run = Start(/*mono_start=*/5 * kSecond);
  RestoreReport report = run->manager.Restore(journal_.Load());
  EXPECT_FALSE(report.refused);
  EXPECT_EQ(report.kept, 2);
  EXPECT_EQ(report.reverted, 0);
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);  // set again
  EXPECT_EQ(backend_.Read(1)->compute_mode, ComputeMode::kExclusiveProcess);
  auto leases = run->manager.Leases();
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0].holder, "a");
  EXPECT_EQ(leases[0].baseline, SettingValue(PowerLimit{700'000}));
  EXPECT_EQ(leases[0].expires_ns, 5 * kSecond + 500 * kSecond);
  EXPECT_EQ(leases[1].holder, "mps");
  EXPECT_EQ(leases[1].expires_ns, std::nullopt);
  // The expiry is the original one, on the wall clock.
  auto stacks = Stacks(journal_.Saved());
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0].leases[0].expires_at_ns, kWallStart + 600 * kSecond);
  // And it still ends on time.
  run->clock.Advance(499 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  run->clock.Advance(1 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 1u);  // the compute-mode hold
}

TEST_F(GpuManagerDurabilityTest, RestoreRevertsLeasesThatExpiredWhileDown) {
  {
    auto run = Start();
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
    ASSERT_TRUE(SetPower(*run, 0, 400, Lease("b", 10)).ok());
    ASSERT_TRUE(SetPower(*run, 1, 250, Lease("a", 10)).ok());
  }
  wall_.Advance(11 * kSecond);
  auto run = Start(/*mono_start=*/0);
  WatchSets();
  RestoreReport report = run->manager.Restore(journal_.Load());
  EXPECT_EQ(report.kept, 1);
  EXPECT_EQ(report.reverted, 2);
  // GPU 0: b expired, a is still running: the device goes to a's value.
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  // GPU 1: back to its baseline at once; the record kept the revert until done.
  EXPECT_EQ(PowerMw(backend_, 1), 700'000u);
  // GPU 0 went to a's value with b gone from the record.
  for (const auto& at : RecordAtEachSet(0)) {
    ASSERT_FALSE(at.empty());
    EXPECT_EQ(at[0].gpu_uuid, "GPU-fake-0");
    EXPECT_EQ(at[0].leases.size(), 1u);
  }
  // GPU 1 went back while the record said "reverting" (rule 7).
  auto at_gpu1 = RecordAtEachSet(1);
  ASSERT_EQ(at_gpu1.size(), 1u);
  ASSERT_FALSE(at_gpu1[0].empty());
  EXPECT_EQ(at_gpu1[0].back().gpu_uuid, "GPU-fake-1");
  EXPECT_TRUE(at_gpu1[0].back().leases.empty());
  ASSERT_EQ(run->manager.Leases().size(), 1u);
  EXPECT_EQ(run->manager.Leases()[0].holder, "a");
  auto stacks = Stacks(journal_.Saved());
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].gpu_uuid, "GPU-fake-0");
}

TEST_F(GpuManagerDurabilityTest, RestoreFindsGpusByUuidAndDropsMissingOnes) {
  const std::vector<LeaseStackRecord> records = {
      // GPU-fake-1 was index 0 in the run that saved this.
      {"GPU-fake-1",
       0,
       SettingKind::kPowerLimit,
       PowerLimit{700'000},
       {{"a", PowerLimit{300'000}, kWallStart + 60 * kSecond}}},
      {"GPU-gone",
       1,
       SettingKind::kPowerLimit,
       PowerLimit{700'000},
       {{"a", PowerLimit{250'000}, kWallStart + 60 * kSecond}, {"b", PowerLimit{260'000}, {}}}},
  };
  auto run = Start();
  RestoreReport report = run->manager.Restore(LeaseRecordsJson(records));
  EXPECT_EQ(report.kept, 1);
  EXPECT_EQ(report.dropped, 2);
  EXPECT_EQ(PowerMw(backend_, 1), 300'000u);
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  ASSERT_EQ(run->manager.Leases().size(), 1u);
  EXPECT_EQ(run->manager.Leases()[0].gpu, 1u);
  auto stacks = Stacks(journal_.Saved());
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].gpu_uuid, "GPU-fake-1");
  EXPECT_EQ(stacks[0].gpu_index, 1u);
}

TEST_F(GpuManagerDurabilityTest, RestoreRefusesAMalformedRecordAndStartsEmpty) {
  auto run = Start();
  json bad = LeaseRecordsJson({{"GPU-fake-0",
                                0,
                                SettingKind::kPowerLimit,
                                PowerLimit{700'000},
                                {{"a", PowerLimit{300'000}, std::nullopt}}}});
  bad["stacks"][0]["leases"][0]["value"] = {{"watts", "lots"}};
  RestoreReport report = run->manager.Restore(bad);
  EXPECT_TRUE(report.refused);
  EXPECT_EQ(report.kept + report.reverted + report.dropped, 0);
  // What StateStore answers for a truncated or other-version file.
  report = run->manager.Restore(FailedPrecondition("state file leases.json is truncated"));
  EXPECT_TRUE(report.refused);
  report = run->manager.Restore(NotFound("no record"));
  EXPECT_FALSE(report.refused);
  EXPECT_TRUE(backend_.Calls().empty());
  EXPECT_TRUE(run->manager.Leases().empty());
  // The daemon works as usual afterwards.
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 1u);
}

// Fault injection: CLOCK_REALTIME jumps (an NTP step, an operator's `date`)
// while the daemon runs. A running lease ends on the monotonic clock, so a
// wall-clock jump either way neither ends it early nor keeps it late; the
// record keeps the wall-clock expiry it was given (docs/errors.md).
TEST_F(GpuManagerDurabilityTest, WallClockJumpsWhileRunningDoNotMoveAnExpiry) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  wall_.Advance(86'400 * kSecond);  // a day ahead
  run->clock.Advance(30 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  wall_.Set(kWallStart - 3600 * kSecond);  // an hour before the lease began
  run->clock.Advance(29 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  auto stacks = Stacks(journal_.Saved());
  ASSERT_EQ(stacks.size(), 1u);
  ASSERT_EQ(stacks[0].leases.size(), 1u);
  EXPECT_EQ(stacks[0].leases[0].expires_at_ns, kWallStart + 60 * kSecond);
  run->clock.Advance(1 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(run->manager.Leases().empty());
}

// Fault: the wall clock stepped back an hour while the daemon was down, in the
// same boot. The lease saved its expiry on this boot's monotonic clock too, so
// the restarted daemon ends it exactly when promised, not an hour later.
TEST_F(GpuManagerDurabilityTest, WallClockSteppedBackAcrossARestartDoesNotExtendALease) {
  {
    auto run = Start(1000 * kSecond, "boot-A");
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
    auto stacks = Stacks(journal_.Saved());
    ASSERT_EQ(stacks.size(), 1u);
    EXPECT_EQ(stacks[0].leases[0].lease_ns, 600 * kSecond);
    EXPECT_EQ(stacks[0].leases[0].boot_id, "boot-A");
    EXPECT_EQ(stacks[0].leases[0].expires_mono_ns, 1600 * kSecond);
  }  // SIGKILL
  // 100 s later (the monotonic clock runs on: same boot), the wall clock is
  // stepped back an hour.
  wall_.Advance(100 * kSecond - 3600 * kSecond);
  auto run = Start(1100 * kSecond, "boot-A");
  RestoreReport report = run->manager.Restore(journal_.Load());
  EXPECT_EQ(report.kept, 1);
  auto leases = run->manager.Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].expires_ns, 1600 * kSecond);  // 500 s left, as promised
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  run->clock.Advance(499 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  run->clock.Advance(1 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);  // reverted on time
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

// The same across a reboot (a new boot id: the monotonic expiry means
// nothing): the wall clock is all there is, but a lease never gets more than
// the duration it was granted for. Without the cap it would get 4,100 s.
TEST_F(GpuManagerDurabilityTest, WallClockSteppedBackAcrossARebootIsCappedByTheLeaseDuration) {
  {
    auto run = Start(1000 * kSecond, "boot-A");
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
  }
  wall_.Advance(100 * kSecond - 3600 * kSecond);
  auto run = Start(5 * kSecond, "boot-B");
  RestoreReport report = run->manager.Restore(journal_.Load());
  EXPECT_EQ(report.kept, 1);
  auto leases = run->manager.Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].expires_ns, 5 * kSecond + 600 * kSecond);
  // The record now holds the new boot's expiries.
  auto stacks = Stacks(journal_.Saved());
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].leases[0].boot_id, "boot-B");
  EXPECT_EQ(stacks[0].leases[0].expires_mono_ns, 605 * kSecond);
  EXPECT_EQ(stacks[0].leases[0].expires_at_ns, wall_.NowNs() + 600 * kSecond);
  run->clock.Advance(600 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
}

// Fault: NVML fails (NVML_ERROR_UNKNOWN) while a lease expires. The device
// keeps the leased value, so the record keeps the revert (an emptied stack)
// and ExpireDue retries it with backoff (1 s, 2 s, 4 s ...) until it goes
// through; each failure and the final success are counted and reported.
TEST_F(GpuManagerDurabilityTest, ARevertTheGpuRefusesIsKeptAndRetriedWithBackoff) {
  auto run = Start();
  std::mutex events_mu;
  std::vector<std::string> events;
  run->manager.SetEventListener([&](std::string_view type, const json&) {
    std::lock_guard lock(events_mu);
    events.emplace_back(type);
  });
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  const Status nvml_unknown = Internal("NVML_ERROR_UNKNOWN: Unknown Error");
  backend_.FailSets(0, nvml_unknown);
  backend_.FailSets(0, nvml_unknown);
  auto sync = [&] { ASSERT_TRUE(run->manager.Energy(0).get().ok()); };
  auto sets = [&] { return backend_.Calls().size(); };
  run->clock.Advance(60 * kSecond);
  run->manager.ExpireDue();
  sync();
  const size_t after_expiry = sets();
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);   // the GPU kept the value
  EXPECT_TRUE(run->manager.Leases().empty());  // the lease itself has ended
  auto stacks = Stacks(journal_.Saved());      // the revert is still owed, on disk too
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_TRUE(stacks[0].leases.empty());
  EXPECT_EQ(stacks[0].baseline, SettingValue(PowerLimit{700'000}));
  RevertStatus reverts = run->manager.Reverts();
  EXPECT_EQ(reverts.failures_total, 1u);
  ASSERT_EQ(reverts.pending.size(), 1u);
  EXPECT_EQ(reverts.pending[0].target, SettingValue(PowerLimit{700'000}));
  EXPECT_EQ(reverts.pending[0].attempts, 1);
  EXPECT_NE(reverts.pending[0].error.find("NVML_ERROR_UNKNOWN"), std::string::npos);
  EXPECT_NE(FormatRevertMetrics(reverts).find("gpuslice_lease_reverts_pending 1"),
            std::string::npos);

  // First retry 1 s after the failure is seen, not before.
  run->manager.ExpireDue();  // schedules it
  run->clock.Advance(999'999'999);
  run->manager.ExpireDue();
  sync();
  EXPECT_EQ(sets(), after_expiry);
  run->clock.Advance(1);
  run->manager.ExpireDue();
  sync();
  EXPECT_EQ(sets(), after_expiry + 1);  // retried, refused again
  EXPECT_EQ(run->manager.Reverts().failures_total, 2u);
  EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  // The next one 2 s later.
  run->manager.ExpireDue();
  run->clock.Advance(2 * kSecond - 1);
  run->manager.ExpireDue();
  sync();
  EXPECT_EQ(sets(), after_expiry + 1);
  run->clock.Advance(1);
  run->manager.ExpireDue();
  sync();
  EXPECT_EQ(sets(), after_expiry + 2);
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);  // reverted at last
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
  reverts = run->manager.Reverts();
  EXPECT_TRUE(reverts.pending.empty());
  EXPECT_EQ(reverts.failures_total, 2u);
  EXPECT_EQ(reverts.retried_ok_total, 1u);
  std::lock_guard lock(events_mu);
  EXPECT_EQ(events, (std::vector<std::string>{"revert_failed", "revert_failed", "revert_retried"}));
}

// A refused revert outlives the daemon: the record still owes it, so the next
// start reverts the GPU even though no lease is left.
TEST_F(GpuManagerDurabilityTest, ARefusedRevertIsDoneByTheNextStart) {
  {
    auto run = Start();
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
    backend_.FailSets(0, Internal("NVML_ERROR_GPU_IS_LOST"));
    run->clock.Advance(60 * kSecond);
    run->manager.ExpireDue();
    ASSERT_TRUE(run->manager.Energy(0).get().ok());
    EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
  }  // killed before any retry
  auto run = Start(5 * kSecond);
  run->manager.Restore(journal_.Load());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
  EXPECT_TRUE(run->manager.Reverts().pending.empty());
}

// A new lease on a setting whose revert is pending takes over: the device
// shows the new value and the retry is dropped (nothing reverts it under the
// new holder); when that lease ends the baseline comes back.
TEST_F(GpuManagerDurabilityTest, ANewLeaseOverAPendingRevertEndsTheRetry) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  backend_.FailSets(0, Internal("NVML_ERROR_UNKNOWN"));
  run->clock.Advance(60 * kSecond);
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  ASSERT_EQ(run->manager.Reverts().pending.size(), 1u);
  ASSERT_TRUE(SetPower(*run, 0, 400, Lease("b", 60)).ok());
  EXPECT_TRUE(run->manager.Reverts().pending.empty());
  EXPECT_EQ(PowerMw(backend_, 0), 400'000u);
  run->clock.Advance(10 * kSecond);  // past any retry's backoff: none runs
  run->manager.ExpireDue();
  run->manager.ExpireDue();
  ASSERT_TRUE(run->manager.Energy(0).get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 400'000u);
  ASSERT_TRUE(run->manager.Release({0}, SettingKind::kPowerLimit, "b")[0].get().ok());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
}

// On stop, a revert the GPU refuses stays in the record for the next start.
TEST_F(GpuManagerDurabilityTest, ARevertRefusedAtStopStaysInTheRecord) {
  {
    auto run = Start();
    ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 600)).ok());
    backend_.FailSets(0, Internal("NVML_ERROR_UNKNOWN"));
    run->manager.RevertAll();
    EXPECT_EQ(PowerMw(backend_, 0), 300'000u);
    auto stacks = Stacks(journal_.Saved());
    ASSERT_EQ(stacks.size(), 1u);
    EXPECT_TRUE(stacks[0].leases.empty());
  }
  auto run = Start(5 * kSecond);
  run->manager.Restore(journal_.Load());
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
}

// Rule 11: the end of a revert cannot be refused; when the disk is full at
// that step the record stays behind (it still asks for a revert that is done)
// and the next ExpireDue saves it again once the disk has room.
TEST_F(GpuManagerDurabilityTest, ARecordLeftStaleByAFullDiskIsSavedAgainByExpireDue) {
  auto run = Start();
  ASSERT_TRUE(SetPower(*run, 0, 300, Lease("a", 60)).ok());
  // The release's first save (the emptied stack) works; the disk fills while
  // the device reverts, so the save that drops the stack fails.
  backend_.SetHook([this](uint32_t, const SettingValue&) { journal_.Fail(true); });
  ASSERT_TRUE(run->manager.Release({0}, SettingKind::kPowerLimit, "a")[0].get().ok());
  backend_.SetHook(nullptr);
  EXPECT_EQ(PowerMw(backend_, 0), 700'000u);
  EXPECT_TRUE(run->manager.Leases().empty());
  ASSERT_EQ(Stacks(journal_.Saved()).size(), 1u) << "the record is behind: a revert still owed";
  // Still full: ExpireDue tries, the record stays as it is.
  const int saves = journal_.saves();
  run->manager.ExpireDue();
  EXPECT_EQ(Stacks(journal_.Saved()).size(), 1u);
  // Room again: the next ExpireDue writes the record as the manager holds it.
  journal_.Fail(false);
  run->manager.ExpireDue();
  EXPECT_EQ(journal_.saves(), saves + 1);
  EXPECT_TRUE(Stacks(journal_.Saved()).empty());
  // And only once.
  run->manager.ExpireDue();
  EXPECT_EQ(journal_.saves(), saves + 1);
}

}  // namespace
}  // namespace gpuslice::daemon
