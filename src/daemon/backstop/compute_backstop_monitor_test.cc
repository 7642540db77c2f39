#include "daemon/backstop/compute_backstop_monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>

#include "daemon/backstop/fake_signaller.h"
#include "daemon/gpu/fake_backend.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Kind = ComputeBackstop::FindingKind;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

class ComputeBackstopMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (pid_t pid : {100, 101}) {
      proc_.Add(pid, std::to_string(pid), 1000, 77, "0::/user.slice/u.scope\n");
    }
    ASSERT_TRUE(
        registry_
            .SetGroup("a", {{kAllGpus, {.memory_bytes = std::nullopt, .compute_percent = 30}}}, {})
            .ok());
    for (pid_t pid : {100, 101}) {
      Registration reg;
      reg.pid = pid;
      reg.uid = 1000;
      reg.group = "a";
      reg.devices = {"GPU-fake-0"};
      ASSERT_TRUE(registry_.Register(reg).ok());
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("compute-backstop-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ComputeBackstopMonitor> Make(ComputeBackstop::Action action,
                                               FakeSignaller& signaller) {
    ComputeBackstopMonitor::Options options;
    options.backstop.action = action;
    options.duty.period_ns = 200 * kMs;
    options.proc_root = proc_.root();
    options.is_ignored = [](uint32_t pid) { return pid == 7; };
    return std::make_unique<ComputeBackstopMonitor>(
        options, backend_, registry_, signaller, store_.get(), nullptr,
        [this](std::string_view type, const nlohmann::json& data) {
          events_.emplace_back(std::string(type), data);
        },
        ComputeBackstopMonitor::Clocks{mono_, real_});
  }
  // Every 500 ms until a finding: processes 100 and 101 at `share` each.
  std::vector<ComputeBackstop::Finding> RunUntilFinding(ComputeBackstopMonitor& m, uint32_t share) {
    backend_.SetProcesses(0, {{100, 1 << 20}, {101, 1 << 20}});
    for (int i = 0; i < 40; ++i) {
      mono_.Advance(500 * kMs);
      real_.Advance(500 * kMs);
      const auto us = static_cast<uint64_t>(real_.NowNs() / 1000);
      backend_.AddUtilization(0, {{100, us, share}, {101, us, share}});
      auto f = m.Sample();
      if (!f.empty()) return f;
    }
    return {};
  }
  std::vector<std::string> EventTypes() const {
    std::vector<std::string> out;
    for (const auto& [type, data] : events_) out.push_back(type);
    return out;
  }

  FakeProc proc_;
  FakeBackend backend_{2};
  SimulatedClock mono_{10 * kS};
  SimulatedClock real_{1'700'000'000 * kS};
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, mono_, watcher_, nullptr, {}};
  std::filesystem::path dir_;
  std::unique_ptr<StateStore> store_;
  FakeSignaller signaller_;
  std::vector<std::pair<std::string, nlohmann::json>> events_;
};

TEST_F(ComputeBackstopMonitorTest, AnUnregisteredProcessIsPublishedAndCounted) {
  auto m = Make(ComputeBackstop::Action::kReport, signaller_);
  backend_.SetProcesses(1, {{999, 1 << 20}, {7, 1 << 20}});  // 7: an MPS server, left out
  auto f = m->Sample();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kUnregistered);
  EXPECT_EQ(f[0].gpu, 1u);
  EXPECT_EQ(f[0].uuid, "GPU-fake-1");
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_compute_unregistered"));
  EXPECT_EQ(events_[0].second["pids"], nlohmann::json::array({999}));
  EXPECT_EQ(events_[0].second["uuid"], "GPU-fake-1");
  EXPECT_EQ(m->Count(Kind::kUnregistered), 1u);
  EXPECT_THAT(m->FormatMetrics(false),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"compute_unregistered\"} 1\n"));
  EXPECT_THAT(m->FormatMetrics(false), Not(HasSubstr("# TYPE")));
  EXPECT_THAT(m->FormatMetrics(true), HasSubstr("# TYPE gpuslice_backstop_findings_total counter"));
  EXPECT_TRUE(m->Sample().empty()) << "edge-triggered";
}

TEST_F(ComputeBackstopMonitorTest, AGroupOverItsLimitIsThrottledAndStopContinuesIt) {
  auto m = Make(ComputeBackstop::Action::kThrottle, signaller_);
  auto f = RunUntilFinding(*m, 40);  // 80 against 30
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, Kind::kOverLimit);
  EXPECT_EQ(f[0].limit_percent, 30u);
  EXPECT_EQ(f[1].kind, Kind::kThrottleStarted);
  EXPECT_THAT(EventTypes(),
              ElementsAre("backstop_over_compute_limit", "backstop_throttle_started"));
  EXPECT_EQ(events_[1].second["run_percent"], 38);
  // Recorded before the first stop, with the tenants' start times.
  auto record = store_->Load(kComputeBackstopRecordName);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_THAT(*ProcessRefsFromJson(*record), ElementsAre(ProcessRef{100, 77}, ProcessRef{101, 77}));
  EXPECT_EQ(m->Advance(), mono_.NowNs() + (200 - 75) * kMs);
  EXPECT_THAT(signaller_.stopped, ElementsAre(100, 101));

  m->Stop();
  EXPECT_THAT(signaller_.stopped, IsEmpty());
  EXPECT_EQ(EventTypes().back(), "backstop_throttle_stopped");
  EXPECT_EQ(events_.back().second["detail"], "the daemon stops");
  EXPECT_FALSE(store_->Load(kComputeBackstopRecordName).ok()) << "cleared";
  EXPECT_TRUE(m->Sample().empty()) << "stopped: nothing more";
  EXPECT_EQ(m->Advance(), INT64_MAX);
}

// A full (here: vanished) state directory when the throttle starts: the
// record is saved by a later sample once the directory is back, so a crash
// after that still continues the processes.
TEST_F(ComputeBackstopMonitorTest, AThrottleRecordThatCannotBeSavedIsSavedByALaterSample) {
  auto m = Make(ComputeBackstop::Action::kThrottle, signaller_);
  std::filesystem::rename(dir_, dir_.string() + ".away");
  auto f = RunUntilFinding(*m, 40);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].kind, Kind::kThrottleStarted);
  std::filesystem::rename(dir_.string() + ".away", dir_);
  EXPECT_FALSE(store_->Load(kComputeBackstopRecordName).ok()) << "not saved yet";
  m->Sample();
  auto record = store_->Load(kComputeBackstopRecordName);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_THAT(*ProcessRefsFromJson(*record), ElementsAre(ProcessRef{100, 77}, ProcessRef{101, 77}));
  m->Stop();
}

// A daemon that dies with processes stopped: the next one continues them.
TEST_F(ComputeBackstopMonitorTest, ARestartContinuesWhatACrashedRunLeftStopped) {
  auto crashed = Make(ComputeBackstop::Action::kThrottle, signaller_);
  ASSERT_EQ(RunUntilFinding(*crashed, 40).size(), 2u);
  crashed->Advance();
  ASSERT_THAT(signaller_.stopped, ElementsAre(100, 101));
  // (It never reaches Stop.) The next run, on the same state directory:
  FakeSignaller next;
  events_.clear();
  auto restarted = Make(ComputeBackstop::Action::kThrottle, next);
  restarted->Recover();
  EXPECT_THAT(next.To(100), ElementsAre(SIGCONT));
  EXPECT_THAT(next.To(101), ElementsAre(SIGCONT));
  EXPECT_THAT(EventTypes(),
              ElementsAre("backstop_throttle_recovered", "backstop_throttle_recovered"));
  EXPECT_EQ(restarted->Count(Kind::kThrottleRecovered), 2u);
  EXPECT_FALSE(store_->Load(kComputeBackstopRecordName).ok()) << "cleared";
  restarted->Recover();
  EXPECT_EQ(next.sent.size(), 2u) << "nothing left to continue";
}

TEST_F(ComputeBackstopMonitorTest, ReportModeNeverSignals) {
  auto m = Make(ComputeBackstop::Action::kReport, signaller_);
  auto f = RunUntilFinding(*m, 40);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, Kind::kOverLimit);
  EXPECT_EQ(m->Advance(), INT64_MAX);
  m->Stop();
  EXPECT_THAT(signaller_.sent, IsEmpty());
}

// The monitor's own threads, on the real clocks: a throttle starts and its
// duty cycle runs on its thread; Stop continues everything.
TEST_F(ComputeBackstopMonitorTest, ItsThreadsThrottleAndStopContinuesEverything) {
  struct LockedSignaller final : Signaller {
    bool Send(const ProcessRef& process, int sig) override {
      std::lock_guard lock(mu);
      const bool sent = fake.Send(process, sig);
      changed.notify_all();
      return sent;
    }
    std::mutex mu;
    std::condition_variable changed;
    FakeSignaller fake;
  } signaller;
  MonotonicClock mono;
  RealtimeClock real;
  ComputeBackstopMonitor::Options options;
  options.backstop = {.action = ComputeBackstop::Action::kThrottle,
                      .tolerance_points = 5,
                      .over_for_ns = 0,
                      .unregistered_percent = 10};
  options.duty.period_ns = 20 * kMs;
  options.sample_interval_ns = 10 * kMs;
  options.proc_root = proc_.root();
  ComputeBackstopMonitor m(options, backend_, registry_, signaller, store_.get(), nullptr, nullptr,
                           {mono, real});
  backend_.SetProcesses(0, {{100, 1 << 20}});
  // Always newer than what the monitor asks for: 90 % for as long as it runs.
  backend_.AddUtilization(0,
                          {{100, static_cast<uint64_t>(real.NowNs() / 1000) + 3'600'000'000, 90}});
  m.Start();
  {
    std::unique_lock lock(signaller.mu);
    ASSERT_TRUE(signaller.changed.wait_for(lock, std::chrono::seconds(20), [&] {
      return signaller.fake.To(100).size() >= 4;  // stopped, continued, stopped, ...
    }));
  }
  m.Stop();
  std::lock_guard lock(signaller.mu);
  EXPECT_THAT(signaller.fake.stopped, IsEmpty());
  EXPECT_EQ(signaller.fake.To(100).back(), SIGCONT);
  EXPECT_EQ(m.Count(Kind::kThrottleStarted), 1u);
  EXPECT_EQ(m.Count(Kind::kThrottleStopped), 1u);
}

}  // namespace
}  // namespace gpuslice::daemon
