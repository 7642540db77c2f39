#include "daemon/tenants/registry.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "daemon/tenants/registry_fixture.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using namespace std::string_literals;

using testing::kPodA;
using testing::kPodB;

using RegistryTest = testing::RegistryFixture;

TEST_F(RegistryTest, TheFirstRegistrantOwnsTheGroupAndItsPodMayJoin) {
  auto a = registry_->Register(Reg(100, 1000, "train"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->container_pid, 1);
  EXPECT_EQ(a->cgroup.pod_uid, kPodA);
  EXPECT_EQ(a->tier, Tier::kShared);
  EXPECT_EQ(a->registered_at_ns, 1'000);
  auto g = registry_->GroupOf("train");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->owner_uid, 1000u);
  EXPECT_EQ(g->owner_pod_uid, kPodA);
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "train")).ok());
  EXPECT_EQ(registry_->MemberCount("train"), 2u);
  EXPECT_EQ(watcher_.watched, (std::set<pid_t>{100, 101}));
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"tenant_registered", "tenant_registered"}));
  EXPECT_EQ(events_[0].second["host_pid"], 100);
}

TEST_F(RegistryTest, AnotherUidOrAnotherPodIsRefused) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "train")).ok());
  auto other_uid = registry_->Register(Reg(300, 65534, "train"));
  EXPECT_EQ(other_uid.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_uid.status().message().find("belongs to uid 1000 in pod " + std::string(kPodA)),
            std::string::npos)
      << other_uid.status().message();
  EXPECT_NE(other_uid.status().message().find("uid 65534 (no pod)"), std::string::npos);
  // Same uid, other pod; same uid, no pod.
  EXPECT_EQ(registry_->Register(Reg(200, 1000, "train")).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_->Register(Reg(301, 1000, "train")).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_->MemberCount("train"), 1u);
  EXPECT_EQ(registry_->refused_count(), 3u);
  EXPECT_EQ(events_.back().first, "registration_refused");
  EXPECT_EQ(events_.back().second["code"], "PERMISSION_DENIED");
}

TEST_F(RegistryTest, BadRequestsAreRefusedAndChangeNothing) {
  EXPECT_EQ(registry_->Register(Reg(100, 1000, "a/b")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->Register(Reg(999, 1000, "g")).status().code(), StatusCode::kNotFound);
  Registration bad = Reg(100, 1000, "g");
  bad.limits.compute_percent = 0;
  EXPECT_EQ(registry_->Register(bad).status().code(), StatusCode::kInvalidArgument);
  watcher_.dead.insert(101);  // exits between identification and watch
  EXPECT_EQ(registry_->Register(Reg(101, 1000, "g")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(registry_->Tenants().empty());
  EXPECT_TRUE(registry_->Groups().empty());
}

TEST_F(RegistryTest, TierAndGroupConflicts) {
  Registration mps = Reg(100, 1000, "g");
  mps.tier = Tier::kMps;
  ASSERT_TRUE(registry_->Register(mps).ok());
  Registration shared = Reg(101, 1000, "g");
  shared.tier = Tier::kShared;
  EXPECT_EQ(registry_->Register(shared).status().code(), StatusCode::kFailedPrecondition);
  shared.tier.reset();
  auto joined = registry_->Register(shared);
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->tier, Tier::kMps);
  // One process, one group; registering again in the same group is fine.
  EXPECT_EQ(registry_->Register(Reg(100, 1000, "other")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  EXPECT_EQ(registry_->MemberCount("g"), 2u);
}

TEST_F(RegistryTest, ForgedHintsAreFlaggedAndNotShown) {
  Registration r = Reg(100, 1000, "g");
  r.hints = {"b-0", "prod", "app", kPodB};
  auto t = registry_->Register(r);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->cgroup.pod_uid, kPodA);  // the host's word, not the client's
  EXPECT_EQ(t->hints.pod_name, "") << "its environment says a-0";
  EXPECT_EQ(t->hints.pod_namespace, "prod");  // nothing contradicts it
  EXPECT_EQ(t->hints.pod_uid, kPodB);         // shown as claimed_pod_uid
  ASSERT_EQ(t->hint_conflicts.size(), 2u);
  EXPECT_NE(t->hint_conflicts[0].find("pod_uid"), std::string::npos);
  EXPECT_NE(t->hint_conflicts[1].find("pod_name: claimed \"b-0\""), std::string::npos);
}

TEST_F(RegistryTest, AProcessInNoPodShowsNoPodOrContainer) {
  Registration r = Reg(301, 1000, "g");
  r.hints = {"web-0", "", "app", ""};
  auto t = registry_->Register(r);
  ASSERT_TRUE(t.ok());
  const nlohmann::json view = TenantJson(*t);
  EXPECT_EQ(view["pod"], "");
  EXPECT_EQ(view["container"], "");
  EXPECT_EQ(view["container_id"], "");
  EXPECT_EQ(t->hint_conflicts.size(), 2u);  // both claims, named
}

TEST_F(RegistryTest, LimitsComeFromTheGroupAndATenantCanOnlyLowerThem) {
  ASSERT_TRUE(
      registry_
          ->SetGroup("g", {{kAllGpus, {8ull << 30, 50}}, {"GPU-1", {4ull << 30, {}}}}, std::nullopt)
          .ok());
  EXPECT_EQ(events_.back().first, "group_limits_changed");
  Registration r = Reg(100, 1000, "g");
  r.limits = {16ull << 30, 30};  // more memory than the group's: ignored; less compute: kept
  auto t = registry_->Register(r);
  ASSERT_TRUE(t.ok());
  auto eff = registry_->EffectiveLimits(*t);
  EXPECT_EQ(eff["GPU-0"], (GpuLimit{8ull << 30, 30}));
  EXPECT_EQ(eff["GPU-1"], (GpuLimit{4ull << 30, 30}));
  // The group made by an admin is owned by its first registrant.
  EXPECT_EQ(registry_->GroupOf("g")->owner_uid, 1000u);
  EXPECT_EQ(registry_->SetGroup("g", {{kAllGpus, {{}, 101}}}, std::nullopt).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->SetGroup("g", {}, Tier::kMps).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, ATenantsOwnLimitsArePerGpuAndOnlyLowerTheGroups) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {8ull << 30, 50}}}, std::nullopt).ok());
  Registration r = Reg(100, 1000, "g");
  r.devices = {"GPU-0", "GPU-1"};
  r.limits = {{}, 40};                            // every GPU
  r.gpu_limits = {{"GPU-1", {2ull << 30, 90}},    // lower memory; compute 90 > 40
                  {"GPU-0", {16ull << 30, {}}}};  // more than the group's: ignored
  auto t = registry_->Register(r);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(LimitOn(t->requested, "GPU-1"), (GpuLimit{2ull << 30, 40}));
  auto eff = registry_->EffectiveLimits(*t);
  EXPECT_EQ(eff["GPU-0"], (GpuLimit{8ull << 30, 40}));
  EXPECT_EQ(eff["GPU-1"], (GpuLimit{2ull << 30, 40}));
  // The group's control view: its tenants' tightest on each GPU.
  Registration other = Reg(101, 1000, "g");
  other.gpu_limits = {{"GPU-0", {1ull << 30, {}}}};
  ASSERT_TRUE(registry_->Register(other).ok());
  auto control = registry_->ControlOf("g");
  ASSERT_TRUE(control.has_value());
  EXPECT_EQ(LimitOn(control->requested, "GPU-0"), (GpuLimit{1ull << 30, 40}));
  EXPECT_EQ(LimitOn(control->requested, "GPU-1"), (GpuLimit{2ull << 30, 40}));
  EXPECT_EQ(LimitOn(control->requested, "GPU-7"), (GpuLimit{{}, 40}));
  // Saved and read back per GPU.
  auto again = TenantFromJson(TenantJson(*t));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->requested, t->requested);
  Registration bad = Reg(102, 1000, "g");
  bad.gpu_limits = {{"GPU-0", {{}, 0}}};
  EXPECT_EQ(registry_->Register(bad).status().code(), StatusCode::kInvalidArgument);
}

// One reading of the registry for a tick's consumers: every group (one
// without tenants too), every tenant by host pid with its start time, and
// each group's limit lowered by its tenants' own.
TEST_F(RegistryTest, AViewHoldsEveryGroupAndTenantAtOneInstant) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {8ull << 30, 50}}}, std::nullopt).ok());
  ASSERT_TRUE(registry_->SetGroup("empty", {{kAllGpus, {{}, 20}}}, std::nullopt).ok());
  Registration r = Reg(100, 1000, "g");
  r.gpu_limits = {{"GPU-1", {2ull << 30, {}}}};
  auto t = registry_->Register(r);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "g")).ok());

  const RegistryView view = registry_->TakeView();
  EXPECT_EQ(view.groups.size(), 2u);
  EXPECT_EQ(view.control.size(), 2u);
  EXPECT_EQ(view.tenants.at(100).requested, t->requested);  // the full records
  ASSERT_EQ(view.MembersOf("g").size(), 2u);
  EXPECT_EQ(view.MembersOf("g")[1]->host_pid, 101);
  EXPECT_TRUE(view.MembersOf("empty").empty());
  EXPECT_TRUE(view.MembersOf("none").empty());
  // The registry's per-group answers are the view's.
  EXPECT_EQ(view.EffectiveLimits(*t), registry_->EffectiveLimits(*t));
  EXPECT_EQ(view.ScheduleOn("g", "GPU-1")->limit_percent,
            registry_->ScheduleOn("g", "GPU-1")->limit_percent);
  EXPECT_EQ(view.ScheduleOn("none", "GPU-1"), std::nullopt);
  EXPECT_EQ(view.GroupOf(100), "g");
  EXPECT_EQ(view.GroupOf(101), "g");
  EXPECT_EQ(view.GroupOf(102), std::nullopt);
  EXPECT_EQ(view.StartTimeOf(100), t->start_time);
  EXPECT_EQ(view.StartTimeOf(102), std::nullopt);
  EXPECT_EQ(view.control.at("g").host_pids, (std::vector<int32_t>{100, 101}));
  EXPECT_EQ(view.control.at("g").LimitOn("GPU-1"), registry_->ControlOf("g")->LimitOn("GPU-1"));
  EXPECT_EQ(view.LimitOf("g", "GPU-0"), (GpuLimit{8ull << 30, 50}));
  EXPECT_EQ(view.LimitOf("g", "GPU-1"), (GpuLimit{2ull << 30, 50}));
  EXPECT_EQ(view.LimitOf("empty", "GPU-0"), (GpuLimit{{}, 20}));
  EXPECT_EQ(view.LimitOf("none", "GPU-0"), std::nullopt);
  // A view is a copy: what changes after it is not in it.
  registry_->OnExited({101});
  EXPECT_EQ(view.GroupOf(101), "g");
  const RegistryView later = registry_->TakeView();
  EXPECT_EQ(later.GroupOf(101), std::nullopt);
  EXPECT_GT(later.version, view.version);                   // the newer view says so
  EXPECT_EQ(registry_->TakeView().version, later.version);  // nothing changed since
}

TEST_F(RegistryTest, ExitsRemoveTenantsAndKeepGroups) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "g")).ok());
  EXPECT_EQ(registry_->ForgetGroup("g").code(), StatusCode::kFailedPrecondition);
  registry_->OnExited({100, 4242});
  EXPECT_FALSE(registry_->TenantOf(100).has_value());
  EXPECT_EQ(events_.back().first, "tenant_exited");
  EXPECT_EQ(events_.back().second["host_pid"], 100);
  ASSERT_TRUE(registry_->Unregister(101).ok());
  EXPECT_EQ(registry_->Unregister(101).code(), StatusCode::kNotFound);
  EXPECT_TRUE(watcher_.watched.empty() || watcher_.watched == std::set<pid_t>{100});
  ASSERT_TRUE(registry_->GroupOf("g").has_value());
  EXPECT_TRUE(registry_->ForgetGroup("g").ok());
  EXPECT_EQ(registry_->ForgetGroup("g").code(), StatusCode::kNotFound);
}

// A kubelet's unprepare (or a pod's deletion) lets a group go while its
// members' exits are not seen yet: the group goes with the last of them,
// by exit or by unregistration, and a group with no member goes at once.
TEST_F(RegistryTest, AGroupLetGoWhileMembersRunIsForgottenWithTheLast) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {1ull << 30, 40}}}, std::nullopt).ok());
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "g")).ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("g").ok());
  ASSERT_TRUE(registry_->GroupOf("g").has_value()) << "members still run";
  EXPECT_TRUE(registry_->GroupOf("g")->forget_when_empty);
  registry_->OnExited({100});
  EXPECT_TRUE(registry_->GroupOf("g").has_value()) << "101 still runs";
  events_.clear();
  registry_->OnExited({101});
  EXPECT_FALSE(registry_->GroupOf("g").has_value());
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"tenant_exited", "group_forgotten"}));
  // Gone from the checkpoint too.
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_FALSE(registry_->GroupOf("g").has_value());

  // The last member unregistering is the same.
  ASSERT_TRUE(registry_->Register(Reg(200, 1000, "h")).ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("h").ok());
  ASSERT_TRUE(registry_->Unregister(200).ok());
  EXPECT_FALSE(registry_->GroupOf("h").has_value());
  // No member: at once; an unknown group: fine.
  ASSERT_TRUE(registry_->SetGroup("e", {}, std::nullopt).ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("e").ok());
  EXPECT_FALSE(registry_->GroupOf("e").has_value());
  EXPECT_TRUE(registry_->ForgetWhenEmpty("e").ok());
}

// Someone who sets the group again (a new prepare, an admin) wants it: the
// mark goes.
TEST_F(RegistryTest, SettingAGroupAgainClearsItsMark) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("g").ok());
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {1ull << 30, 40}}}, std::nullopt).ok());
  EXPECT_FALSE(registry_->GroupOf("g")->forget_when_empty);
  registry_->OnExited({100});
  EXPECT_TRUE(registry_->GroupOf("g").has_value());
}

// The mark is checkpointed with the group: a daemon restarted before the
// last member exits still forgets the group then, and one that finds the
// members gone at its restart forgets it there.
TEST_F(RegistryTest, TheMarkSurvivesARestart) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(200, 1000, "h")).ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("g").ok());
  ASSERT_TRUE(registry_->ForgetWhenEmpty("h").ok());
  registry_.reset();  // killed
  proc_.Remove(200);  // h's member exited while the daemon was down
  watcher_.watched.clear();
  events_.clear();
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_FALSE(registry_->GroupOf("h").has_value());
  ASSERT_TRUE(registry_->GroupOf("g").has_value());
  EXPECT_TRUE(registry_->GroupOf("g")->forget_when_empty);
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"tenant_exited", "group_forgotten"}));
  registry_->OnExited({100});
  EXPECT_FALSE(registry_->GroupOf("g").has_value());
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_TRUE(registry_->Groups().empty());
}

TEST_F(RegistryTest, RestoreReadoptsLiveTenantsAndDropsDeadOnes) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {1ull << 30, 40}}}, std::nullopt).ok());
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(200, 1000, "h")).ok());
  registry_.reset();  // the daemon is killed: nothing is cleaned up
  // While it was down: 101's pid was reused by another process, 200 exited.
  proc_.Add(101, "101", 1000, 99, Cgroup(kPodA, "2"));
  proc_.Remove(200);
  watcher_.watched.clear();
  events_.clear();
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  auto tenants = registry_->Tenants();
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0].host_pid, 100);
  EXPECT_EQ(tenants[0].container_pid, 1);
  EXPECT_EQ(watcher_.watched, std::set<pid_t>{100});
  auto g = registry_->GroupOf("g");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(LimitOn(g->limits, "GPU-0"), (GpuLimit{1ull << 30, 40}));
  EXPECT_EQ(g->owner_uid, 1000u);
  EXPECT_TRUE(registry_->GroupOf("h").has_value());  // groups are kept
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"tenant_exited", "tenant_exited"}));
  // The reconciled state was saved: a second restart agrees.
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_EQ(registry_->Tenants().size(), 1u);
}

TEST_F(RegistryTest, AnUnreadableCheckpointStartsEmptyAndIsSetAside) {
  std::ofstream(store_->PathOf("tenants")) << R"({"format": "gpuslice-state", "vers)";
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_TRUE(registry_->Tenants().empty());
  EXPECT_TRUE(std::filesystem::exists(store_->PathOf("tenants") + ".bad"));
  EXPECT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
}

TEST_F(RegistryTest, ARegistrationThatCannotBeSavedIsUndone) {
  std::filesystem::remove_all(state_dir_);
  std::ofstream(state_dir_) << "not a directory";  // every save now fails
  auto t = registry_->Register(Reg(100, 1000, "g"));
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(registry_->Tenants().empty());
  EXPECT_FALSE(registry_->GroupOf("g").has_value());
  EXPECT_TRUE(watcher_.watched.empty());
  std::filesystem::remove(state_dir_);
}

// A full (here: vanished) state directory when a tenant exits: the exit is
// not undone, the checkpoint is behind, and RetryCheckpoint saves it once the
// directory is back, so a restart does not find the tenant again.
TEST_F(RegistryTest, AnExitThatCannotBeSavedIsSavedByTheNextRetry) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "g")).ok());
  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "g")).ok());
  EXPECT_TRUE(registry_->RetryCheckpoint().ok()) << "nothing owed";
  std::filesystem::rename(state_dir_, state_dir_ + ".away");
  registry_->OnExited({100});
  EXPECT_EQ(registry_->Tenants().size(), 1u);
  EXPECT_FALSE(registry_->RetryCheckpoint().ok()) << "still no directory";
  std::filesystem::rename(state_dir_ + ".away", state_dir_);
  EXPECT_TRUE(registry_->RetryCheckpoint().ok());
  auto saved = store_->Load("tenants");
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_EQ(saved->at("tenants").size(), 1u);
  EXPECT_EQ(saved->at("tenants")[0]["host_pid"], 101);
  EXPECT_TRUE(registry_->RetryCheckpoint().ok());
}

// With the real /proc and the real pidfd watcher: a killed tenant is gone
// within a second.
TEST(RegistryLivenessTest, AKilledTenantIsRemovedWithinASecond) {
  SimulatedClock clock;
  PidWatcher watcher;
  TenantRegistry registry({}, clock, watcher, nullptr, nullptr);
  watcher.SetExitCallback([&](const std::vector<pid_t>& pids) { registry.OnExited(pids); });
  ASSERT_TRUE(watcher.Start().ok());
  const pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  Registration r;
  r.pid = child;
  r.group = "live";
  auto t = registry.Register(r);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->uid, geteuid());
  kill(child, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + 1s;
  while (registry.TenantOf(child) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(registry.TenantOf(child).has_value()) << "still registered after 1 s";
  waitpid(child, nullptr, 0);
  watcher.Stop();
}

}  // namespace
}  // namespace gpuslice::daemon
