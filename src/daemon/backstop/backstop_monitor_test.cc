#include "daemon/backstop/backstop_monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "daemon/backstop/fake_signaller.h"
#include "daemon/gpu/fake_backend.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Kind = MemoryBackstop::FindingKind;
using ComputeKind = ComputeBackstop::FindingKind;
constexpr uint64_t kGiB = 1ull << 30;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

using Events = std::vector<std::pair<std::string, nlohmann::json>>;
std::vector<std::string> TypesOf(const Events& events) {
  std::vector<std::string> out;
  for (const auto& [type, data] : events) out.push_back(type);
  return out;
}

class BackstopMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (pid_t pid : {100, 101, 200}) {
      proc_.Add(pid, std::to_string(pid), 1000, 1, "0::/user.slice/u.scope\n");
    }
    monitor_.Sample();
    snapshot_ = *monitor_.Current();
    ASSERT_TRUE(
        registry_
            .SetGroup("a",
                      {{kAllGpus, {.memory_bytes = 4 * kGiB, .compute_percent = std::nullopt}}}, {})
            .ok());
    Register(100, "a");
    Register(101, "a");
  }
  void Register(pid_t pid, const std::string& group, GpuLimit own = {}) {
    Registration reg;
    reg.pid = pid;
    reg.uid = 1000;
    reg.group = group;
    reg.devices = {"GPU-fake-0", "GPU-fake-1"};
    reg.limits = own;
    ASSERT_TRUE(registry_.Register(reg).ok());
  }
  // The memory check alone (the compute check is the next fixture's).
  std::unique_ptr<BackstopMonitor> Make(
      MemoryBackstop::Action action = MemoryBackstop::Action::kReport,
      std::function<bool(uint32_t)> ignored = nullptr) {
    BackstopMonitor::Options options;
    options.memory =
        MemoryBackstop::Options{.action = action, .allowance_per_process_bytes = 2ull << 20};
    options.proc_root = proc_.root();
    options.is_ignored = std::move(ignored);
    return std::make_unique<BackstopMonitor>(
        std::move(options), backend_,
        BackstopMonitor::Actions{.killer =
                                     [this](pid_t pid) {
                                       killed_.push_back(pid);
                                       return true;
                                     },
                                 .signaller = signaller_,
                                 .terminator = nullptr},
        nullptr,
        [this](std::string_view type, const nlohmann::json& data) {
          events_.emplace_back(std::string(type), data);
        },
        BackstopMonitor::Clocks{clock_, clock_});
  }
  std::vector<MemoryBackstop::Finding> Tick(BackstopMonitor& m) {
    return m.Tick(snapshot_, registry_.TakeView()).memory;
  }
  std::vector<std::string> EventTypes() const { return TypesOf(events_); }

  FakeProc proc_;
  FakeBackend backend_{2};
  SimulatedClock clock_;
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, clock_, watcher_, nullptr, {}};
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000)};
  Snapshot snapshot_;
  FakeSignaller signaller_;
  std::vector<pid_t> killed_;
  Events events_;
};

TEST_F(BackstopMonitorTest, AGroupOverItsLimitByTheDriversCountIsReportedPublishedAndCounted) {
  auto m = Make();
  backend_.SetProcesses(1, {{100, 3 * kGiB}, {101, 2 * kGiB}});
  auto findings = Tick(*m);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].kind, Kind::kOverLimit);
  EXPECT_EQ(findings[0].gpu, 1u);
  EXPECT_EQ(findings[0].uuid, "GPU-fake-1");
  EXPECT_EQ(findings[0].group, "a");
  EXPECT_EQ(findings[0].limit_bytes, 4 * kGiB);
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_over_limit"));
  EXPECT_EQ(events_[0].second["group"], "a");
  EXPECT_EQ(events_[0].second["used_bytes"], 5 * kGiB);
  EXPECT_TRUE(Tick(*m).empty()) << "edge-triggered";
  EXPECT_EQ(m->Count(Kind::kOverLimit), 1u);
  EXPECT_THAT(m->FormatMetrics(),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"over_limit\"} 1\n"));
  EXPECT_TRUE(killed_.empty()) << "report only";

  backend_.SetProcesses(1, {{100, 3 * kGiB}});
  ASSERT_EQ(Tick(*m).size(), 1u);
  EXPECT_EQ(events_.back().first, "backstop_back_under");
  EXPECT_THAT(m->FormatMetrics(),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"back_under_limit\"} 1\n"));
}

TEST_F(BackstopMonitorTest, TheLimitIsTheGroupsLoweredByItsTenantsOwn) {
  Register(200, "b", {.memory_bytes = kGiB, .compute_percent = std::nullopt});  // no group limit
  auto m = Make();
  backend_.SetProcesses(0, {{200, 2 * kGiB}, {100, kGiB}});
  auto findings = Tick(*m);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].group, "b");
  EXPECT_EQ(findings[0].limit_bytes, kGiB);
}

TEST_F(BackstopMonitorTest, AnUnregisteredProcessIsReportedOnceAndIgnoredOnesNever) {
  auto m = Make(MemoryBackstop::Action::kReport, [](uint32_t pid) { return pid == 7; });
  backend_.SetProcesses(0, {{999, kGiB}, {7, 50 * kGiB}});
  auto findings = Tick(*m);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].kind, Kind::kUnregistered);
  EXPECT_THAT(findings[0].pids, ElementsAre(999u));
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_unregistered_process"));
  EXPECT_FALSE(events_[0].second.contains("group"));
  EXPECT_TRUE(Tick(*m).empty());
  EXPECT_EQ(m->Count(Kind::kUnregistered), 1u);
}

TEST_F(BackstopMonitorTest, KillModeKillsTheLargestProcessOfTheGroup) {
  auto m = Make(MemoryBackstop::Action::kKill);
  backend_.SetProcesses(0, {{100, 1 * kGiB}, {101, 4 * kGiB}});
  auto findings = Tick(*m);
  EXPECT_THAT(killed_, ElementsAre(101));
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_over_limit", "backstop_killed"));
  EXPECT_EQ(m->Count(Kind::kKilled), 1u);
}

TEST_F(BackstopMonitorTest, AGpuWhoseProcessesCannotBeReadIsSkipped) {
  auto m = Make();
  Snapshot ghost = snapshot_;
  GpuInfo gone;
  gone.index = 9;
  gone.uuid = "GPU-gone";
  ghost.gpus.push_back(gone);
  backend_.SetProcesses(0, {{100, 5 * kGiB}});
  EXPECT_EQ(m->Tick(ghost, registry_.TakeView()).memory.size(), 1u);
}

class BackstopMonitorComputeTest : public ::testing::Test {
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
    monitor_.Sample();
    snapshot_ = *monitor_.Current();
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The compute check alone (the memory check is the previous fixture's).
  std::unique_ptr<BackstopMonitor> Make(ComputeBackstop::Action action, FakeSignaller& signaller) {
    BackstopMonitor::Options options;
    options.compute = ComputeBackstop::Options{};
    options.compute->action = action;
    options.duty.period_ns = 200 * kMs;
    options.proc_root = proc_.root();
    options.is_ignored = [](uint32_t pid) { return pid == 7; };
    return std::make_unique<BackstopMonitor>(
        options, backend_,
        BackstopMonitor::Actions{.killer = nullptr, .signaller = signaller, .terminator = nullptr},
        store_.get(),
        [this](std::string_view type, const nlohmann::json& data) {
          events_.emplace_back(std::string(type), data);
        },
        BackstopMonitor::Clocks{mono_, real_});
  }
  std::vector<ComputeBackstop::Finding> Sample(BackstopMonitor& m) {
    return m.Tick(snapshot_, registry_.TakeView()).compute;
  }
  // Every 500 ms until a finding: processes 100 and 101 at `share` each.
  std::vector<ComputeBackstop::Finding> RunUntilFinding(BackstopMonitor& m, uint32_t share) {
    backend_.SetProcesses(0, {{100, 1 << 20}, {101, 1 << 20}});
    for (int i = 0; i < 40; ++i) {
      mono_.Advance(500 * kMs);
      real_.Advance(500 * kMs);
      const auto us = static_cast<uint64_t>(real_.NowNs() / 1000);
      backend_.AddUtilization(0, {{100, us, share}, {101, us, share}});
      auto f = Sample(m);
      if (!f.empty()) return f;
    }
    return {};
  }
  std::vector<std::string> EventTypes() const { return TypesOf(events_); }

  FakeProc proc_;
  FakeBackend backend_{2};
  SimulatedClock mono_{10 * kS};
  SimulatedClock real_{1'700'000'000 * kS};
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, mono_, watcher_, nullptr, {}};
  std::filesystem::path dir_;
  std::unique_ptr<StateStore> store_;
  FakeSignaller signaller_;
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000)};
  Snapshot snapshot_;
  Events events_;
};

TEST_F(BackstopMonitorComputeTest, AnUnregisteredProcessIsPublishedAndCounted) {
  auto m = Make(ComputeBackstop::Action::kReport, signaller_);
  backend_.SetProcesses(1, {{999, 1 << 20}, {7, 1 << 20}});  // 7: an MPS server, left out
  auto f = Sample(*m);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, ComputeKind::kUnregistered);
  EXPECT_EQ(f[0].gpu, 1u);
  EXPECT_EQ(f[0].uuid, "GPU-fake-1");
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_compute_unregistered"));
  EXPECT_EQ(events_[0].second["pids"], nlohmann::json::array({999}));
  EXPECT_EQ(events_[0].second["uuid"], "GPU-fake-1");
  EXPECT_EQ(m->Count(ComputeKind::kUnregistered), 1u);
  EXPECT_THAT(m->FormatMetrics(),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"compute_unregistered\"} 1\n"));
  EXPECT_THAT(m->FormatMetrics(), HasSubstr("# TYPE gpuslice_backstop_findings_total counter"));
  EXPECT_THAT(m->FormatMetrics(), Not(HasSubstr("kind=\"over_limit\""))) << "memory check off";
  EXPECT_TRUE(Sample(*m).empty()) << "edge-triggered";
}

TEST_F(BackstopMonitorComputeTest, AGroupOverItsLimitIsThrottledAndStopContinuesIt) {
  auto m = Make(ComputeBackstop::Action::kThrottle, signaller_);
  auto f = RunUntilFinding(*m, 40);  // 80 against 30
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, ComputeKind::kOverLimit);
  EXPECT_EQ(f[0].limit_percent, 30u);
  EXPECT_EQ(f[1].kind, ComputeKind::kThrottleStarted);
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
  EXPECT_TRUE(Sample(*m).empty()) << "stopped: nothing more";
  EXPECT_EQ(m->Advance(), INT64_MAX);
}

// A full (here: vanished) state directory when the throttle starts: the
// record is saved by a later sample once the directory is back, so a crash
// after that still continues the processes.
TEST_F(BackstopMonitorComputeTest, AThrottleRecordThatCannotBeSavedIsSavedByALaterSample) {
  auto m = Make(ComputeBackstop::Action::kThrottle, signaller_);
  std::filesystem::rename(dir_, dir_.string() + ".away");
  auto f = RunUntilFinding(*m, 40);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].kind, ComputeKind::kThrottleStarted);
  std::filesystem::rename(dir_.string() + ".away", dir_);
  EXPECT_FALSE(store_->Load(kComputeBackstopRecordName).ok()) << "not saved yet";
  Sample(*m);
  auto record = store_->Load(kComputeBackstopRecordName);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_THAT(*ProcessRefsFromJson(*record), ElementsAre(ProcessRef{100, 77}, ProcessRef{101, 77}));
  m->Stop();
}

// A daemon that dies with processes stopped: the next one continues them.
TEST_F(BackstopMonitorComputeTest, ARestartContinuesWhatACrashedRunLeftStopped) {
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
  EXPECT_EQ(restarted->Count(ComputeKind::kThrottleRecovered), 2u);
  EXPECT_FALSE(store_->Load(kComputeBackstopRecordName).ok()) << "cleared";
  restarted->Recover();
  EXPECT_EQ(next.sent.size(), 2u) << "nothing left to continue";
}

TEST_F(BackstopMonitorComputeTest, ReportModeNeverSignals) {
  auto m = Make(ComputeBackstop::Action::kReport, signaller_);
  auto f = RunUntilFinding(*m, 40);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, ComputeKind::kOverLimit);
  EXPECT_EQ(m->Advance(), INT64_MAX);
  m->Stop();
  EXPECT_THAT(signaller_.sent, IsEmpty());
}

// The monitor's own threads, on the real clocks: a throttle starts and its
// duty cycle runs on its thread; Stop continues everything.
TEST_F(BackstopMonitorComputeTest, ItsThreadsThrottleAndStopContinuesEverything) {
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
  BackstopMonitor::Options options;
  options.compute = ComputeBackstop::Options{.action = ComputeBackstop::Action::kThrottle,
                                             .tolerance_points = 5,
                                             .over_for_ns = 0,
                                             .unregistered_percent = 10};
  options.duty.period_ns = 20 * kMs;
  options.proc_root = proc_.root();
  BackstopMonitor m(options, backend_,
                    {.killer = nullptr, .signaller = signaller, .terminator = nullptr},
                    store_.get(), nullptr, {mono, real});
  backend_.SetProcesses(0, {{100, 1 << 20}});
  // Always newer than what the monitor asks for: 90 % for as long as it runs.
  backend_.AddUtilization(0,
                          {{100, static_cast<uint64_t>(real.NowNs() / 1000) + 3'600'000'000, 90}});
  m.Start();
  // The daemon's monitor ticks on a thread of its own; here, every 10 ms.
  std::atomic<bool> ticking = true;
  std::thread ticker([&] {
    while (ticking.load()) {
      m.Tick(snapshot_, registry_.TakeView());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  {
    std::unique_lock lock(signaller.mu);
    ASSERT_TRUE(signaller.changed.wait_for(lock, std::chrono::seconds(20), [&] {
      return signaller.fake.To(100).size() >= 4;  // stopped, continued, stopped, ...
    }));
  }
  ticking = false;
  ticker.join();
  m.Stop();
  std::lock_guard lock(signaller.mu);
  EXPECT_THAT(signaller.fake.stopped, IsEmpty());
  EXPECT_EQ(signaller.fake.To(100).back(), SIGCONT);
  EXPECT_EQ(m.Count(ComputeKind::kThrottleStarted), 1u);
  EXPECT_EQ(m.Count(ComputeKind::kThrottleStopped), 1u);
}

// Both checks on one reading: each GPU's processes are read once per tick,
// and the metrics name every kind of both under one header.
TEST_F(BackstopMonitorComputeTest, BothChecksShareOneReadingPerTick) {
  BackstopMonitor::Options options;
  options.memory = MemoryBackstop::Options{};
  options.compute = ComputeBackstop::Options{};
  options.proc_root = proc_.root();
  BackstopMonitor m(options, backend_,
                    {.killer = nullptr, .signaller = signaller_, .terminator = nullptr},
                    store_.get(), nullptr, {mono_, real_});
  backend_.SetProcesses(1, {{999, 1 << 20}});
  const int reads = backend_.process_reads();
  const BackstopMonitor::TickResult r = m.Tick(snapshot_, registry_.TakeView());
  EXPECT_EQ(backend_.process_reads() - reads, 2) << "one read of each of the two GPUs";
  ASSERT_EQ(r.readings.size(), 2u);
  ASSERT_TRUE(r.readings[1].processes.has_value());
  EXPECT_EQ(r.readings[1].processes->at(0).pid, 999u);
  EXPECT_TRUE(r.readings[1].samples.has_value()) << "the compute check asks for samples";
  ASSERT_EQ(r.memory.size(), 1u);
  EXPECT_EQ(r.memory[0].kind, Kind::kUnregistered);
  ASSERT_EQ(r.compute.size(), 1u);
  EXPECT_EQ(r.compute[0].kind, ComputeKind::kUnregistered);
  const std::string metrics = m.FormatMetrics();
  EXPECT_EQ(metrics.find("# TYPE"), metrics.rfind("# TYPE")) << "one header";
  EXPECT_THAT(metrics, HasSubstr("{kind=\"unregistered_process\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("{kind=\"compute_unregistered\"} 1\n"));
}

// With both checks off the processes are still read (for GpuUsageCache), and
// nothing is checked or exported.
TEST_F(BackstopMonitorComputeTest, WithBothChecksOffTheReadingStillComes) {
  BackstopMonitor m({}, backend_,
                    {.killer = nullptr, .signaller = signaller_, .terminator = nullptr},
                    store_.get(), nullptr, {mono_, real_});
  backend_.SetProcesses(0, {{999, 1 << 20}});
  const BackstopMonitor::TickResult r = m.Tick(snapshot_, registry_.TakeView());
  ASSERT_EQ(r.readings.size(), 2u);
  ASSERT_TRUE(r.readings[0].processes.has_value());
  EXPECT_FALSE(r.readings[0].samples.has_value()) << "no compute check, no samples";
  EXPECT_THAT(r.memory, IsEmpty());
  EXPECT_THAT(r.compute, IsEmpty());
  EXPECT_EQ(m.FormatMetrics(), "");
}

TEST(IsMpsServerTest, ReadsTheCutCommName) {
  const std::string root = ::testing::TempDir() + "/mpsproc." + std::to_string(getpid());
  std::filesystem::create_directories(root + "/10");
  std::filesystem::create_directories(root + "/11");
  std::ofstream(root + "/10/comm") << "nvidia-cuda-mps\n";
  std::ofstream(root + "/11/comm") << "python3\n";
  EXPECT_TRUE(IsMpsServer(root, 10));
  EXPECT_FALSE(IsMpsServer(root, 11));
  EXPECT_FALSE(IsMpsServer(root, 12));
  std::filesystem::remove_all(root);
}

// The production killer on real processes: only a registered tenant, by pidfd.
TEST(TenantKillerTest, KillsOnlyARegisteredTenant) {
  SimulatedClock clock;
  FakeWatcher watcher;
  TenantRegistry registry({}, clock, watcher, nullptr, {});
  MemoryBackstop::Killer kill = TenantKiller(registry);
  EXPECT_FALSE(kill(0));
  EXPECT_FALSE(kill(-1));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_FALSE(kill(child)) << "not a tenant";
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, WNOHANG), 0) << "still running";
  Registration reg;
  reg.pid = child;
  reg.group = "g";
  ASSERT_TRUE(registry.Register(reg).ok());
  EXPECT_TRUE(kill(child));
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace
}  // namespace gpuslice::daemon
