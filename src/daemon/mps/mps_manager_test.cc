#include "daemon/mps/mps_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/mps/fake_mps.h"

namespace gpuslice::daemon::mps {
namespace {

using ::testing::ElementsAre;
using testing::FakeGpus;
using testing::FakeHost;
using ::testing::HasSubstr;

constexpr char kRoot[] = "/run/gpuslice/mps";

class MpsManagerTest : public ::testing::Test {
 protected:
  MpsManagerTest() : gpus_(2), host_(clock_) {}

  // A manager on the shared fakes (a "daemon restart" is a new one).
  std::unique_ptr<MpsManager> NewManager() {
    MpsOptions options;
    options.root = kRoot;
    auto manager = std::make_unique<MpsManager>(options, gpus_, host_, clock_);
    EXPECT_TRUE(manager->Start().ok());
    return manager;
  }

  AcquireResult Acquire(MpsManager& m, const std::string& tenant, const std::string& gpus,
                        TenantSettings settings = {}) {
    auto result = m.Acquire({tenant, gpus, settings});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() ? *result : AcquireResult{};
  }

  std::string Pipe(int gpu) const { return MpsGpuDir(kRoot, gpus_.uuids[gpu]) + "/pipe"; }

  GpuMpsStatus GpuStatus(const MpsManager& m, int index) {
    for (const auto& g : m.GetStatus().gpus) {
      if (g.index == index) return g;
    }
    ADD_FAILURE() << "no MPS daemon on GPU " << index;
    return {};
  }

  SimulatedClock clock_;
  FakeGpus gpus_;
  FakeHost host_;
};

TEST_F(MpsManagerTest, FirstAcquireStartsDaemonInExclusiveProcessMode) {
  gpus_.modes[0] = ComputeMode::kProhibited;
  auto m = NewManager();
  AcquireResult r = Acquire(*m, "alice", "0");

  EXPECT_EQ(r.tier, Tier::kMps);
  EXPECT_EQ(host_.starts, 1);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kExclusiveProcess);
  EXPECT_EQ(gpus_.modes[1], ComputeMode::kDefault);
  EXPECT_EQ(host_.start_env["CUDA_VISIBLE_DEVICES"], gpus_.uuids[0]);
  EXPECT_EQ(host_.start_env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0));
  EXPECT_EQ(r.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0));
  EXPECT_FALSE(r.env.contains("CUDA_MPS_LOG_DIRECTORY"));  // the control daemon's, not a client's
  EXPECT_EQ(r.env["CUDA_VISIBLE_DEVICES"], gpus_.uuids[0]);
  EXPECT_FALSE(r.env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));

  GpuMpsStatus g = GpuStatus(*m, 0);
  EXPECT_TRUE(g.running);
  EXPECT_EQ(g.control_pid, host_.DaemonOf(Pipe(0)));
  EXPECT_EQ(g.previous_compute_mode, ComputeMode::kProhibited);
  EXPECT_THAT(g.tenants, ElementsAre("alice"));
}

TEST_F(MpsManagerTest, SecondAcquireSharesTheDaemon) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  AcquireResult r = Acquire(*m, "bob", "0");
  EXPECT_EQ(r.tier, Tier::kMps);
  EXPECT_EQ(host_.starts, 1);
  EXPECT_THAT(GpuStatus(*m, 0).tenants, ElementsAre("alice", "bob"));
}

TEST_F(MpsManagerTest, ReleaseOfLastTenantQuitsAndRestoresComputeMode) {
  gpus_.modes[0] = ComputeMode::kProhibited;
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  Acquire(*m, "bob", "0");
  const pid_t pid = host_.DaemonOf(Pipe(0));

  ASSERT_TRUE(m->Release("alice").ok());
  EXPECT_TRUE(host_.ProcessAlive(pid));
  EXPECT_EQ(host_.CountCommands("quit"), 0);

  ASSERT_TRUE(m->Release("bob").ok());
  EXPECT_EQ(host_.CountCommands("quit"), 1);
  EXPECT_FALSE(host_.ProcessAlive(pid));
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kProhibited);
  EXPECT_TRUE(m->GetStatus().gpus.empty());
  EXPECT_TRUE(m->Tenants().empty());
}

TEST_F(MpsManagerTest, DaemonThatIgnoresQuitIsKilled) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  const pid_t pid = host_.DaemonOf(Pipe(0));
  host_.ignore_quit = true;
  ASSERT_TRUE(m->Release("alice").ok());
  EXPECT_THAT(host_.kills, ElementsAre(pid));
  EXPECT_FALSE(host_.ProcessAlive(pid));
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
}

TEST_F(MpsManagerTest, PerGpuReferenceCountsAreIndependent) {
  auto m = NewManager();
  Acquire(*m, "a", "0");
  Acquire(*m, "b", "1");
  AcquireResult both = Acquire(*m, "c", "0,1");
  EXPECT_EQ(host_.starts, 2);
  ASSERT_EQ(both.per_gpu.size(), 2u);
  EXPECT_EQ(both.per_gpu[1].env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(1));
  EXPECT_EQ(both.env, both.per_gpu[0].env);

  ASSERT_TRUE(m->Release("c").ok());
  EXPECT_EQ(m->GetStatus().gpus.size(), 2u);
  ASSERT_TRUE(m->Release("a").ok());
  ASSERT_EQ(m->GetStatus().gpus.size(), 1u);
  EXPECT_EQ(m->GetStatus().gpus[0].index, 1);
  EXPECT_NE(host_.DaemonOf(Pipe(1)), 0);
  EXPECT_EQ(host_.DaemonOf(Pipe(0)), 0);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
  EXPECT_EQ(gpus_.modes[1], ComputeMode::kExclusiveProcess);
}

TEST_F(MpsManagerTest, HealthCheckRestartsDeadDaemon) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  const pid_t old_pid = host_.DaemonOf(Pipe(0));
  m->CheckHealth();
  EXPECT_EQ(host_.starts, 1);
  EXPECT_EQ(GpuStatus(*m, 0).health, Health::kHealthy);

  host_.alive.erase(old_pid);  // it died
  m->CheckHealth();
  EXPECT_EQ(host_.starts, 2);
  GpuMpsStatus g = GpuStatus(*m, 0);
  EXPECT_NE(g.control_pid, old_pid);
  EXPECT_EQ(g.control_pid, host_.DaemonOf(Pipe(0)));
  EXPECT_EQ(g.restarts, 1);
  EXPECT_THAT(g.last_error, HasSubstr("is gone"));
  EXPECT_THAT(g.tenants, ElementsAre("alice"));
}

TEST_F(MpsManagerTest, HealthCheckRestartsUnresponsiveDaemon) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  const pid_t old_pid = host_.DaemonOf(Pipe(0));
  host_.hung.insert(old_pid);
  m->CheckHealth();
  EXPECT_THAT(host_.kills, ElementsAre(old_pid));
  EXPECT_EQ(host_.starts, 2);
  GpuMpsStatus g = GpuStatus(*m, 0);
  EXPECT_TRUE(g.running);
  EXPECT_NE(g.control_pid, old_pid);
  EXPECT_THAT(g.last_error, HasSubstr("timed out"));
}

TEST_F(MpsManagerTest, FailedRestartIsRetriedByTheNextCheck) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  host_.alive.clear();
  host_.fail_start = true;
  m->CheckHealth();
  EXPECT_FALSE(GpuStatus(*m, 0).running);
  EXPECT_EQ(GpuStatus(*m, 0).health, Health::kUnhealthy);
  host_.fail_start = false;
  m->CheckHealth();
  EXPECT_TRUE(GpuStatus(*m, 0).running);
}

TEST_F(MpsManagerTest, NewManagerReadoptsDaemonsAndTenants) {
  auto first = NewManager();
  Acquire(*first, "alice", "0", {.active_thread_percentage = 30});
  Acquire(*first, "bob", "0,1");
  const pid_t pid0 = host_.DaemonOf(Pipe(0));
  first.reset();  // the daemon restarts; MPS keeps running

  auto second = NewManager();
  EXPECT_EQ(host_.starts, 2);  // nothing started again
  EXPECT_EQ(GpuStatus(*second, 0).control_pid, pid0);
  auto tenants = second->Tenants();
  ASSERT_EQ(tenants.size(), 2u);
  EXPECT_EQ(tenants[0].name, "alice");
  EXPECT_EQ(tenants[0].settings.active_thread_percentage, 30u);
  EXPECT_THAT(tenants[1].gpus, ElementsAre(0, 1));

  ASSERT_TRUE(second->Release("alice").ok());
  ASSERT_TRUE(second->Release("bob").ok());
  EXPECT_EQ(host_.DaemonOf(Pipe(0)), 0);
  EXPECT_EQ(host_.DaemonOf(Pipe(1)), 0);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
}

TEST_F(MpsManagerTest, NewManagerRestartsDaemonThatDiedMeanwhile) {
  auto first = NewManager();
  Acquire(*first, "alice", "0");
  first.reset();
  host_.alive.clear();
  auto second = NewManager();
  EXPECT_EQ(host_.starts, 2);
  EXPECT_TRUE(GpuStatus(*second, 0).running);
  EXPECT_EQ(GpuStatus(*second, 0).restarts, 1);
}

TEST_F(MpsManagerTest, NewManagerStopsOrphanDaemons) {
  // A daemon under the root that the state does not know.
  const std::string orphan_pipe = MpsGpuDir(kRoot, gpus_.uuids[1]) + "/pipe";
  CommandSpec start{
      {FakeHost::kBinary, "-d"}, {{"CUDA_MPS_PIPE_DIRECTORY", orphan_pipe}}, "", 0, "/dev/null"};
  ASSERT_TRUE(host_.Run(start).ok());
  const pid_t orphan = host_.DaemonOf(orphan_pipe);
  ASSERT_NE(orphan, 0);

  auto m = NewManager();
  EXPECT_FALSE(host_.ProcessAlive(orphan));
  EXPECT_EQ(host_.CountCommands("quit"), 1);
  EXPECT_TRUE(m->GetStatus().gpus.empty());
}

TEST_F(MpsManagerTest, NewManagerStopsDaemonStartedBeforeACrash) {
  // The state was saved with the GPU but no tenant yet (crash mid-acquire).
  gpus_.modes[0] = ComputeMode::kProhibited;
  auto first = NewManager();
  Acquire(*first, "alice", "0");
  first.reset();
  auto state = nlohmann::json::parse(host_.files.at(std::string(kRoot) + "/state.json"));
  state["tenants"] = nlohmann::json::array();
  state["gpus"][0]["tenants"] = nlohmann::json::array();
  host_.files[std::string(kRoot) + "/state.json"] = state.dump();

  auto second = NewManager();
  EXPECT_EQ(host_.DaemonOf(Pipe(0)), 0);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kProhibited);
  EXPECT_TRUE(second->GetStatus().gpus.empty());
}

TEST_F(MpsManagerTest, CorruptStateFileIsAnError) {
  host_.files[std::string(kRoot) + "/state.json"] = "{not json";
  MpsManager m({.root = kRoot}, gpus_, host_, clock_);
  Status started = m.Start();
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(started.message(), HasSubstr("corrupt"));
}

TEST_F(MpsManagerTest, StateIsSavedAfterEveryChange) {
  auto m = NewManager();
  Acquire(*m, "alice", "1");
  auto state = nlohmann::json::parse(host_.files.at(m->StatePath()));
  EXPECT_EQ(state["tenants"][0]["name"], "alice");
  EXPECT_EQ(state["gpus"][0]["uuid"], gpus_.uuids[1]);
  EXPECT_EQ(state["gpus"][0]["control_pid"], host_.DaemonOf(Pipe(1)));
  EXPECT_EQ(state["gpus"][0]["previous_compute_mode"], "DEFAULT");
  ASSERT_TRUE(m->Release("alice").ok());
  state = nlohmann::json::parse(host_.files.at(m->StatePath()));
  EXPECT_TRUE(state["tenants"].empty());
  EXPECT_TRUE(state["gpus"].empty());
}

TEST_F(MpsManagerTest, MissingBinaryFallsBackToSharedTier) {
  host_.binary_installed = false;
  auto m = NewManager();
  AcquireResult r = Acquire(*m, "alice", "0,1");
  EXPECT_EQ(r.tier, Tier::kShared);
  EXPECT_THAT(r.reason, HasSubstr("not found"));
  EXPECT_EQ(r.env.size(), 1u);
  EXPECT_EQ(r.env["CUDA_VISIBLE_DEVICES"], gpus_.uuids[0] + "," + gpus_.uuids[1]);
  EXPECT_EQ(host_.starts, 0);
  EXPECT_FALSE(m->GetStatus().available);
  EXPECT_THAT(m->GetStatus().reason, HasSubstr("not found"));
  EXPECT_TRUE(m->Release("alice").ok());
}

TEST_F(MpsManagerTest, NoPermissionForComputeModeFallsBackToSharedTier) {
  gpus_.deny_set = true;
  auto m = NewManager();
  AcquireResult r = Acquire(*m, "alice", "0");
  EXPECT_EQ(r.tier, Tier::kShared);
  EXPECT_THAT(r.reason, HasSubstr("compute mode"));
  EXPECT_EQ(host_.starts, 0);
}

TEST_F(MpsManagerTest, RootTooLongForTheControlSocketFallsBackToSharedTier) {
  MpsManager m({.root = "/" + std::string(90, 'r')}, gpus_, host_, clock_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_FALSE(m.GetStatus().available);
  EXPECT_THAT(m.GetStatus().reason, HasSubstr("too long"));
  EXPECT_EQ(m.Acquire({"alice", "0", {}})->tier, Tier::kShared);
}

TEST_F(MpsManagerTest, NotLinuxFallsBackToSharedTier) {
  host_.linux = false;
  auto m = NewManager();
  EXPECT_EQ(Acquire(*m, "alice", "0").tier, Tier::kShared);
  EXPECT_THAT(m->GetStatus().reason, HasSubstr("Linux"));
}

TEST_F(MpsManagerTest, StartFailureFallsBackToSharedAndRestoresMode) {
  host_.fail_start = true;
  auto m = NewManager();
  Acquire(*m, "a", "1");  // shared too
  AcquireResult r = Acquire(*m, "b", "0,1");
  EXPECT_EQ(r.tier, Tier::kShared);
  EXPECT_THAT(r.reason, HasSubstr("exited with 1"));
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
  EXPECT_EQ(gpus_.modes[1], ComputeMode::kDefault);
  EXPECT_TRUE(m->GetStatus().gpus.empty());
}

TEST_F(MpsManagerTest, RollsBackGpusStartedForAFailedMultiGpuAcquire) {
  auto m = NewManager();
  host_.fail_after_starts = 1;  // GPU 0 starts, GPU 1 fails
  AcquireResult r = Acquire(*m, "b", "0,1");
  EXPECT_EQ(host_.starts, 2);
  EXPECT_EQ(r.tier, Tier::kShared);
  EXPECT_EQ(host_.DaemonOf(Pipe(0)), 0);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
  EXPECT_TRUE(m->GetStatus().gpus.empty());
}

TEST_F(MpsManagerTest, AcquireByUuidAndSettingsInTheEnvironment) {
  auto m = NewManager();
  AcquireResult r = Acquire(*m, "alice", gpus_.uuids[1].substr(4),  // without "GPU-"
                            {.active_thread_percentage = 30,
                             .pinned_memory_limit = uint64_t{4} << 30,
                             .client_priority = 1});
  EXPECT_EQ(r.env["CUDA_VISIBLE_DEVICES"], gpus_.uuids[1]);
  EXPECT_EQ(r.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(r.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4G");
  EXPECT_EQ(r.env["CUDA_MPS_CLIENT_PRIORITY"], "1");

  auto updated = m->UpdateSettings("alice", {.pinned_memory_limit = uint64_t{1536} << 20});
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=1536M");
  EXPECT_EQ(updated->env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");  // kept
}

TEST_F(MpsManagerTest, SettingsReachRunningServersOfASoleTenant) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  host_.servers[Pipe(0)][4242] = {};
  ASSERT_TRUE(m->UpdateSettings("alice", {.active_thread_percentage = 40}).ok());
  EXPECT_EQ(host_.CountCommands("set_active_thread_percentage 4242 40"), 1);

  Acquire(*m, "bob", "0");  // now shared: no server-wide change
  ASSERT_TRUE(m->UpdateSettings("alice", {.active_thread_percentage = 50}).ok());
  EXPECT_EQ(host_.CountCommands("set_active_thread_percentage"), 1);
}

TEST_F(MpsManagerTest, AcquireAgainWithSameGpusReplacesSettings) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  AcquireResult r = Acquire(*m, "alice", "0", {.active_thread_percentage = 20});
  EXPECT_EQ(r.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "20");
  EXPECT_EQ(host_.starts, 1);
  EXPECT_EQ(m->Acquire({"alice", "1", {}}).status().code(), StatusCode::kAlreadyExists);
}

TEST_F(MpsManagerTest, TerminateClientFindsItsServer) {
  auto m = NewManager();
  Acquire(*m, "alice", "0");
  host_.servers[Pipe(0)][500] = {601, 602};
  host_.servers[Pipe(0)][700] = {801};
  ASSERT_TRUE(m->TerminateClient("0", 801).ok());
  EXPECT_EQ(host_.CountCommands("terminate_client 700 801"), 1);
  EXPECT_EQ(m->TerminateClient("0", 999).code(), StatusCode::kNotFound);
  EXPECT_EQ(m->TerminateClient("1", 601).code(), StatusCode::kNotFound);  // no daemon there
  EXPECT_EQ(m->TerminateClient("0", 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(MpsManagerTest, BadInputIsRejected) {
  auto m = NewManager();
  auto code = [&](const std::string& tenant, const std::string& gpus, TenantSettings s = {}) {
    return m->Acquire({tenant, gpus, s}).status().code();
  };
  EXPECT_EQ(code("", "0"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(".hidden", "0"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("a/b", "0"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", ""), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "0,"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "0,0"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "2"), StatusCode::kNotFound);
  EXPECT_EQ(code("t", "99999999999"), StatusCode::kNotFound);
  EXPECT_EQ(code("t", "GPU-nope"), StatusCode::kNotFound);
  EXPECT_EQ(code("t", "0", {.active_thread_percentage = 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "0", {.active_thread_percentage = 101}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "0", {.pinned_memory_limit = 1000}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("t", "0", {.client_priority = 2}), StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Release("nobody").code(), StatusCode::kNotFound);
  EXPECT_EQ(m->UpdateSettings("nobody", {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(host_.starts, 0);
  EXPECT_TRUE(m->Tenants().empty());
}

}  // namespace
}  // namespace gpuslice::daemon::mps

namespace gpuslice::daemon::mps {
namespace {

// A state file that cannot be written is never dropped silently: each failed
// save is counted and its error kept (the daemon's metrics and
// GET /v1/mps/status show them), and the tenant is served all the same.
TEST_F(MpsManagerTest, AFailedStateSaveIsCountedAndKept) {
  auto m = NewManager();
  EXPECT_EQ(m->GetStatus().save_failures, 0u);
  host_.fail_writes = true;
  AcquireResult r = Acquire(*m, "alice", "0");
  EXPECT_EQ(r.tier, Tier::kMps);
  const MpsStatus s = m->GetStatus();
  EXPECT_GE(s.save_failures, 1u);
  EXPECT_NE(s.last_save_error.find("Permission denied"), std::string::npos) << s.last_save_error;
  const uint64_t failures = s.save_failures;
  host_.fail_writes = false;
  ASSERT_TRUE(m->Release("alice").ok());
  EXPECT_EQ(m->GetStatus().save_failures, failures) << "a save that works is not counted";
}

TEST_F(MpsManagerTest, TheProtocolIsProbedFromTheControlBinary) {
  auto m = NewManager();
  EXPECT_EQ(m->GetStatus().protocol, 2) << "a binary without MPS v3";
  EXPECT_EQ(host_.probe_env.at("CUDA_MPS_PROTOCOL_VERSION"), "3")
      << "an inherited variable must not answer for the binary";
  host_.protocol3 = true;
  EXPECT_EQ(NewManager()->GetStatus().protocol, 3);
  host_.binary_installed = false;
  EXPECT_EQ(NewManager()->GetStatus().protocol, 0) << "no MPS, no protocol";
}

TEST_F(MpsManagerTest, OnV3EachTenantGetsANamespaceWithItsLimits) {
  host_.protocol3 = true;
  auto m = NewManager();
  AcquireResult a = Acquire(*m, "alice", "0", {.active_thread_percentage = 30});
  AcquireResult b = Acquire(*m, "bob", "0", {.pinned_memory_limit = uint64_t{2} << 30});
  // The daemon was started with -p 3 and a configuration file.
  ASSERT_GE(host_.start_argv.size(), 6u);
  EXPECT_EQ(host_.start_argv[2], "-p");
  EXPECT_EQ(host_.start_argv[3], "3");
  EXPECT_EQ(host_.start_argv[4], "-a");
  EXPECT_NE(host_.files[host_.start_argv[5]].find("[servers.gpuslice]"), std::string::npos);
  EXPECT_EQ(host_.start_env["CUDA_MPS_PROTOCOL_VERSION"], "3");
  // Each tenant reaches its own namespace; its limits are there, not in its
  // environment.
  EXPECT_EQ(a.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0) + "/gpuslice/alice");
  EXPECT_EQ(b.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0) + "/gpuslice/bob");
  EXPECT_FALSE(a.env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_FALSE(b.env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  auto& ns = host_.namespaces[Pipe(0)];
  ASSERT_EQ(ns.size(), 2u);
  EXPECT_NE(ns["alice"].find("--active-thread-percentage=30"), std::string::npos) << ns["alice"];
  EXPECT_NE(ns["bob"].find("--pinned-memory-limit=2G"), std::string::npos) << ns["bob"];
  // A change reaches the namespace (for new clients), though bob shares the daemon.
  ASSERT_TRUE(m->UpdateSettings("alice", {.active_thread_percentage = 20}).ok());
  EXPECT_NE(ns["alice"].find("namespace set"), std::string::npos) << ns["alice"];
  EXPECT_NE(ns["alice"].find("--active-thread-percentage=20"), std::string::npos) << ns["alice"];
  // Leaving deletes it; a restarted daemon's configuration holds who is left.
  ASSERT_TRUE(m->Release("alice").ok());
  EXPECT_FALSE(ns.contains("alice"));
  auto again = NewManager();
  EXPECT_EQ(again->Tenants().size(), 1u);
}

TEST_F(MpsManagerTest, OnV2TenantsKeepTheirVariables) {
  auto m = NewManager();  // the binary speaks protocol 2
  AcquireResult a = Acquire(*m, "alice", "0", {.active_thread_percentage = 30});
  EXPECT_EQ(a.env["CUDA_MPS_PIPE_DIRECTORY"], Pipe(0));
  EXPECT_EQ(a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(host_.start_argv.size(), 2u) << "no -p 3";
  EXPECT_EQ(host_.start_env["CUDA_MPS_PROTOCOL_VERSION"], "2");
  EXPECT_TRUE(host_.namespaces[Pipe(0)].empty());
}

// One control daemon per GPU, each with its own lock: while GPU 0's daemon
// hangs inside a control command (the fake's command never returns until the
// test unblocks it), a tenant on GPU 1 is placed and released, and the
// status, the tenant list and the state file stay available. With one lock
// for the whole manager, every call below would wait for GPU 0's command.
TEST_F(MpsManagerTest, AHungDaemonOnOneGpuNeverBlocksTenantsOnAnother) {
  auto m = NewManager();
  Acquire(*m, "a", "0");
  const pid_t hung = GpuStatus(*m, 0).control_pid;
  ASSERT_GT(hung, 0);
  host_.Block(hung);
  // Stuck in GPU 0's get_server_list, holding GPU 0's lock.
  std::thread checker([&] { m->CheckHealth(); });
  host_.WaitForStuckCalls(1);

  auto other_gpu = std::async(std::launch::async, [&] {
    auto b = m->Acquire({"b", "1", {.active_thread_percentage = 30}});
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b.ok() ? b->tier : Tier::kShared, Tier::kMps);
    const MpsStatus status = m->GetStatus();
    EXPECT_EQ(status.gpus.size(), 2u);
    EXPECT_EQ(m->Tenants().size(), 2u);
    auto saved = MpsState::Parse(*host_.ReadFile(std::string(kRoot) + "/state.json"));
    EXPECT_TRUE(saved.ok() && saved->tenants.size() == 2u);
    EXPECT_TRUE(m->Release("b").ok());
  });
  // A deadline, not a measurement: generous for a loaded machine, and never
  // reached unless the call waits for GPU 0.
  const bool done = other_gpu.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(done) << "placing a tenant on GPU 1 waited for GPU 0's hung daemon";
  EXPECT_EQ(host_.StuckCalls(), 1) << "GPU 0's command was still stuck throughout";

  host_.Unblock(hung);
  checker.join();
  if (!done) other_gpu.wait();
  EXPECT_FALSE(host_.ProcessAlive(hung));  // the timed-out daemon was replaced
  EXPECT_GT(GpuStatus(*m, 0).control_pid, 0);
  ASSERT_EQ(m->Tenants().size(), 1u);
  EXPECT_EQ(m->Tenants()[0].name, "a");
  auto saved = MpsState::Parse(*host_.ReadFile(std::string(kRoot) + "/state.json"));
  ASSERT_TRUE(saved.ok());
  ASSERT_EQ(saved->gpus.size(), 1u);
  EXPECT_EQ(saved->gpus[0].uuid, gpus_.uuids[0]);
}

}  // namespace
}  // namespace gpuslice::daemon::mps
