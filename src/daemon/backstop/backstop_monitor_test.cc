#include "daemon/backstop/backstop_monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "daemon/gpu/fake_backend.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = MemoryBackstop::FindingKind;
constexpr uint64_t kGiB = 1ull << 30;

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
  BackstopMonitor Make(MemoryBackstop::Action action = MemoryBackstop::Action::kReport,
                       std::function<bool(uint32_t)> ignored = nullptr) {
    return BackstopMonitor(
        {.action = action,
         .allowance_per_process_bytes = 2ull << 20,
         .is_ignored = std::move(ignored)},
        backend_, registry_,
        [this](pid_t pid) {
          killed_.push_back(pid);
          return true;
        },
        [this](std::string_view type, const nlohmann::json& data) {
          events_.emplace_back(std::string(type), data);
        });
  }
  std::vector<std::string> EventTypes() const {
    std::vector<std::string> out;
    for (const auto& [type, data] : events_) out.push_back(type);
    return out;
  }

  FakeProc proc_;
  FakeBackend backend_{2};
  SimulatedClock clock_;
  FakeWatcher watcher_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, clock_, watcher_, nullptr, {}};
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000)};
  Snapshot snapshot_;
  std::vector<pid_t> killed_;
  std::vector<std::pair<std::string, nlohmann::json>> events_;
};

TEST_F(BackstopMonitorTest, AGroupOverItsLimitByTheDriversCountIsReportedPublishedAndCounted) {
  BackstopMonitor m = Make();
  backend_.SetProcesses(1, {{100, 3 * kGiB}, {101, 2 * kGiB}});
  auto findings = m.Tick(snapshot_);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].kind, Kind::kOverLimit);
  EXPECT_EQ(findings[0].gpu, 1u);
  EXPECT_EQ(findings[0].uuid, "GPU-fake-1");
  EXPECT_EQ(findings[0].group, "a");
  EXPECT_EQ(findings[0].limit_bytes, 4 * kGiB);
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_over_limit"));
  EXPECT_EQ(events_[0].second["group"], "a");
  EXPECT_EQ(events_[0].second["used_bytes"], 5 * kGiB);
  EXPECT_TRUE(m.Tick(snapshot_).empty()) << "edge-triggered";
  EXPECT_EQ(m.Count(Kind::kOverLimit), 1u);
  EXPECT_THAT(m.FormatMetrics(),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"over_limit\"} 1\n"));
  EXPECT_TRUE(killed_.empty()) << "report only";

  backend_.SetProcesses(1, {{100, 3 * kGiB}});
  ASSERT_EQ(m.Tick(snapshot_).size(), 1u);
  EXPECT_EQ(events_.back().first, "backstop_back_under");
  EXPECT_THAT(m.FormatMetrics(),
              HasSubstr("gpuslice_backstop_findings_total{kind=\"back_under_limit\"} 1\n"));
}

TEST_F(BackstopMonitorTest, TheLimitIsTheGroupsLoweredByItsTenantsOwn) {
  Register(200, "b", {.memory_bytes = kGiB, .compute_percent = std::nullopt});  // no group limit
  BackstopMonitor m = Make();
  backend_.SetProcesses(0, {{200, 2 * kGiB}, {100, kGiB}});
  auto findings = m.Tick(snapshot_);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].group, "b");
  EXPECT_EQ(findings[0].limit_bytes, kGiB);
}

TEST_F(BackstopMonitorTest, AnUnregisteredProcessIsReportedOnceAndIgnoredOnesNever) {
  BackstopMonitor m = Make(MemoryBackstop::Action::kReport, [](uint32_t pid) { return pid == 7; });
  backend_.SetProcesses(0, {{999, kGiB}, {7, 50 * kGiB}});
  auto findings = m.Tick(snapshot_);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].kind, Kind::kUnregistered);
  EXPECT_THAT(findings[0].pids, ElementsAre(999u));
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_unregistered_process"));
  EXPECT_FALSE(events_[0].second.contains("group"));
  EXPECT_TRUE(m.Tick(snapshot_).empty());
  EXPECT_EQ(m.Count(Kind::kUnregistered), 1u);
}

TEST_F(BackstopMonitorTest, KillModeKillsTheLargestProcessOfTheGroup) {
  BackstopMonitor m = Make(MemoryBackstop::Action::kKill);
  backend_.SetProcesses(0, {{100, 1 * kGiB}, {101, 4 * kGiB}});
  auto findings = m.Tick(snapshot_);
  EXPECT_THAT(killed_, ElementsAre(101));
  EXPECT_THAT(EventTypes(), ElementsAre("backstop_over_limit", "backstop_killed"));
  EXPECT_EQ(m.Count(Kind::kKilled), 1u);
}

TEST_F(BackstopMonitorTest, AGpuWhoseProcessesCannotBeReadIsSkipped) {
  BackstopMonitor m = Make();
  Snapshot ghost = snapshot_;
  GpuInfo gone;
  gone.index = 9;
  gone.uuid = "GPU-gone";
  ghost.gpus.push_back(gone);
  backend_.SetProcesses(0, {{100, 5 * kGiB}});
  EXPECT_EQ(m.Tick(ghost).size(), 1u);
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
