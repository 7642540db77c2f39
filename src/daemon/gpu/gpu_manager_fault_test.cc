// NVML errors in the middle of a setting that spans several GPUs
// (gpu_manager.h rule 10; docs/errors.md "Faults injected, and their tested outcomes"): one GPU
// refuses, every GPU that took the change is undone, and what cannot be undone is kept, counted and
// retried. FakeBackend's FailSets plays NVML's errors (the NVML backend maps NVML_ERROR_UNKNOWN to
// kInternal, NO_PERMISSION to kPermissionDenied, GPU_IS_LOST to kUnavailable).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <ostream>
#include <thread>

#include "daemon/gpu/fake_backend.h"
#include "daemon/gpu/gpu_manager.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

LeaseOptions Lease(const std::string& holder, int64_t seconds) {
  return LeaseOptions{holder, seconds * kSecond, false};
}
LeaseOptions Permanent(const std::string& holder) {
  return LeaseOptions{holder, std::nullopt, true};
}

// One setting kind: two values that differ from each other and from the
// fake GPU's own value.
struct KindCase {
  const char* name;
  SettingKind kind;
  SettingValue first;
  SettingValue second;
};

void PrintTo(const KindCase& c, std::ostream* os) { *os << c.name; }

const KindCase kKinds[] = {
    {"PowerLimit", SettingKind::kPowerLimit, PowerLimit{300'000}, PowerLimit{400'000}},
    {"GpuClocks", SettingKind::kGpuClocks, GpuClocks{ClockRange{1200, 1500}},
     GpuClocks{ClockRange{900, 1100}}},
    {"MemoryClocks", SettingKind::kMemoryClocks, MemoryClocks{ClockRange{1000, 2000}},
     MemoryClocks{ClockRange{800, 900}}},
    // Persistence has two values: "first" is the change, "second" the way back.
    {"Persistence", SettingKind::kPersistence, Persistence{true}, Persistence{false}},
    {"ComputeMode", SettingKind::kComputeMode, ComputeModeSetting{ComputeMode::kExclusiveProcess},
     ComputeModeSetting{ComputeMode::kProhibited}},
};

// The NVML errors a setting can meet half way.
const Status kNvmlUnknown = Internal("nvmlDeviceSet...: Unknown Error");

class AllOrNothingTest : public ::testing::TestWithParam<KindCase> {
 protected:
  SettingValue Shown(uint32_t gpu) { return *backend_.Get(gpu, GetParam().kind); }
  std::vector<SettingValue> SetsOn(uint32_t gpu) {
    std::vector<SettingValue> out;
    for (const auto& c : backend_.Calls()) {
      if (c.index == gpu) out.push_back(c.value);
    }
    return out;
  }
  // Blocks GPU 1's next Set until GPU 0's has been applied, so the failure
  // on GPU 1 comes after GPU 0 took the change ("step k after step k-1").
  void OrderGpu0BeforeGpu1(const std::function<void()>& then = {}) {
    backend_.SetHook([this, then](uint32_t gpu, const SettingValue&) {
      if (gpu != 1 || ordered_) return;
      ordered_ = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (SetsOn(0).empty() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (then) then();
    });
  }

  FakeBackend backend_{3};
  SimulatedClock clock_{1000 * kSecond};
  GpuManager manager_{backend_, clock_};
  std::atomic<bool> ordered_{false};
};

TEST_P(AllOrNothingTest, AnNvmlErrorOnOneGpuUndoesTheOthers) {
  const KindCase& k = GetParam();
  const SettingValue original0 = Shown(0);
  const SettingValue original1 = Shown(1);
  const SettingValue original2 = Shown(2);
  OrderGpu0BeforeGpu1();
  backend_.FailSets(1, kNvmlUnknown);
  auto f = manager_.Set({0, 1, 2}, k.first, Lease("a", 60));
  const Status s0 = f[0].get();
  const Status s1 = f[1].get();
  const Status s2 = f[2].get();
  EXPECT_EQ(s1.code(), StatusCode::kInternal) << s1.ToString();
  EXPECT_EQ(s0.code(), StatusCode::kAborted) << s0.ToString();
  EXPECT_EQ(s2.code(), StatusCode::kAborted) << s2.ToString();
  EXPECT_NE(s0.message().find("GPU 1 refused it"), std::string::npos) << s0.message();
  EXPECT_NE(s0.message().find("undone"), std::string::npos) << s0.message();
  // Every GPU shows what it showed before; GPU 0 took the value, then went back.
  EXPECT_EQ(Shown(0), original0);
  EXPECT_EQ(Shown(1), original1);
  EXPECT_EQ(Shown(2), original2);
  EXPECT_EQ(SetsOn(0), (std::vector<SettingValue>{k.first, original0}));
  EXPECT_TRUE(manager_.Leases().empty());
  EXPECT_TRUE(manager_.Reverts().pending.empty());
  EXPECT_EQ(manager_.Reverts().failures_total, 0u);
}

TEST_P(AllOrNothingTest, TheLeaseAnUndoneChangeReplacedComesBack) {
  const KindCase& k = GetParam();
  ASSERT_TRUE(manager_.Set({0}, k.second, Lease("b", 600))[0].get().ok());
  ASSERT_TRUE(manager_.Set({0}, k.first, Lease("a", 600))[0].get().ok());
  // "a" changes its value on GPUs 0 and 1; GPU 1 refuses.
  backend_.FailSets(1, kNvmlUnknown);
  auto f = manager_.Set({0, 1}, k.second, Lease("a", 60));
  EXPECT_EQ(f[0].get().code(), StatusCode::kAborted);
  EXPECT_EQ(f[1].get().code(), StatusCode::kInternal);
  // "a"'s old lease is back on top, with its value and expiry.
  auto leases = manager_.Leases();
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0].holder, "b");
  EXPECT_EQ(leases[1].holder, "a");
  EXPECT_EQ(leases[1].value, k.first);
  EXPECT_EQ(leases[1].expires_ns, clock_.NowNs() + 600 * kSecond);
  EXPECT_TRUE(leases[1].effective);
  EXPECT_EQ(Shown(0), k.first);
}

TEST_P(AllOrNothingTest, APermanentChangeIsUndoneWithTheLeasesItDropped) {
  const KindCase& k = GetParam();
  const SettingValue original0 = Shown(0);
  ASSERT_TRUE(manager_.Set({0}, k.second, Lease("b", 600))[0].get().ok());
  OrderGpu0BeforeGpu1();
  backend_.FailSets(1, Unavailable("nvmlDeviceSet...: GPU is lost"));
  auto f = manager_.Set({0, 1}, k.first, Permanent("a"));
  EXPECT_EQ(f[0].get().code(), StatusCode::kAborted);
  EXPECT_EQ(f[1].get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Shown(0), k.second);
  auto leases = manager_.Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].holder, "b");
  EXPECT_EQ(leases[0].baseline, original0);  // its end still goes back to the old value
  ASSERT_TRUE(manager_.Release({0}, k.kind, "b")[0].get().ok());
  EXPECT_EQ(Shown(0), original0);
}

TEST_P(AllOrNothingTest, AnUndoTheGpuRefusesIsCountedAndRetried) {
  const KindCase& k = GetParam();
  const SettingValue original0 = Shown(0);
  // GPU 0 takes the change, then refuses the way back once.
  OrderGpu0BeforeGpu1([this] { backend_.FailSets(0, kNvmlUnknown); });
  backend_.FailSets(1, kNvmlUnknown);
  auto f = manager_.Set({0, 1}, k.first, Lease("a", 60));
  const Status s0 = f[0].get();
  EXPECT_EQ(s0.code(), StatusCode::kAborted);
  EXPECT_NE(s0.message().find("the undo failed and is retried"), std::string::npos) << s0.message();
  EXPECT_EQ(f[1].get().code(), StatusCode::kInternal);
  EXPECT_EQ(Shown(0), k.first);
  RevertStatus r = manager_.Reverts();
  EXPECT_EQ(r.failures_total, 1u);
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].gpu, 0u);
  EXPECT_EQ(r.pending[0].target, original0);
  EXPECT_TRUE(manager_.Leases().empty());  // the lease is gone; only the revert is owed
  // The retry (rule 9's backoff: scheduled, then due a second later).
  manager_.ExpireDue();
  clock_.Advance(kSecond);
  manager_.ExpireDue();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!manager_.Reverts().pending.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(manager_.Reverts().pending.empty());
  EXPECT_EQ(manager_.Reverts().retried_ok_total, 1u);
  EXPECT_EQ(Shown(0), original0);
}

INSTANTIATE_TEST_SUITE_P(EverySetting, AllOrNothingTest, ::testing::ValuesIn(kKinds),
                         [](const auto& param) { return std::string(param.param.name); });

TEST(AllOrNothingSaveTest, ARecordThatCannotBeSavedOnOneGpuUndoesTheOthers) {
  FakeBackend backend(2);
  SimulatedClock clock(1000 * kSecond);
  SimulatedClock wall(1'790'000'000 * kSecond);
  GpuManager manager(backend, clock);
  std::atomic<int> saves{0};
  // The second save (GPU 1's lease, whichever GPU comes second) fails: a full disk.
  manager.SetPersistence(LeasePersistence{[&saves](const nlohmann::json&) {
                                            return ++saves == 2
                                                       ? Unavailable("No space left on device")
                                                       : Status::Ok();
                                          },
                                          &wall});
  auto f = manager.Set({0, 1}, PowerLimit{300'000}, Lease("a", 60));
  const Status a = f[0].get();
  const Status b = f[1].get();
  // One GPU was refused for the record, the other undone.
  EXPECT_TRUE((a.code() == StatusCode::kUnavailable && b.code() == StatusCode::kAborted) ||
              (a.code() == StatusCode::kAborted && b.code() == StatusCode::kUnavailable))
      << a.ToString() << " / " << b.ToString();
  EXPECT_EQ(backend.Read(0)->power_limit_mw, 700'000u);
  EXPECT_EQ(backend.Read(1)->power_limit_mw, 700'000u);
  EXPECT_TRUE(manager.Leases().empty());
}

TEST(AllOrNothingSaveTest, OneGpuStaysAsBefore) {
  FakeBackend backend(1);
  SimulatedClock clock(1000 * kSecond);
  GpuManager manager(backend, clock);
  backend.FailSets(0, kNvmlUnknown);
  auto f = manager.Set({0}, PowerLimit{300'000}, Lease("a", 60));
  EXPECT_EQ(f[0].get().code(), StatusCode::kInternal);
  EXPECT_EQ(backend.Read(0)->power_limit_mw, 700'000u);
  EXPECT_TRUE(manager.Leases().empty());
}

}  // namespace
}  // namespace gpuslice::daemon
