// The MPS manager's real implementation (PosixMpsHost: posix_spawn, pid
// files, /proc) driving the simulated nvidia-cuda-mps-control: start on first
// acquire, sharing, stop after the last release, restart of a killed daemon,
// and recovery by a new manager on the same root. Compute modes come from an
// in-memory fake (the simulated NVML needs root to set them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.h"
#include "daemon/mps/fake_mps.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/mps/posix_mps_host.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::daemon::mps {
namespace {

using ::gpuslice::testing::BuildDir;
using ::gpuslice::testing::WaitFor;
using std::chrono::seconds;

class MpsIntegrationTest : public gpuslice::testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    // The control daemon inherits this process's environment (its simulation).
    setenv("GPUSLICE_SIM_STATE", state_.c_str(), 1);
    auto gpu = sim::SimGpu::Open({state_, "", /*observer=*/true});
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpus_.uuids[0] = (*gpu)->device(0).uuid;
    // Short: the control socket's path must fit in sun_path.
    static int counter = 0;
    options_.root = "/tmp/gs-mps." + std::to_string(getpid()) + "." + std::to_string(counter++);
    std::filesystem::remove_all(options_.root);
    options_.control_binary = BuildDir() + "/sim/bin/nvidia-cuda-mps-control";
    // Generous: the machine may be loaded.
    options_.command_timeout_ns = 20'000'000'000;
    options_.start_timeout_ns = 30'000'000'000;
    options_.stop_timeout_ns = 20'000'000'000;
  }
  void TearDown() override {
    // Whatever a failed test left running.
    auto pid = host_.ReadFile(PidFile());
    if (pid.ok()) kill(std::stoi(*pid), SIGKILL);
    unsetenv("GPUSLICE_SIM_STATE");
    unsetenv("GPUSLICE_SIM_CONFIG");  // a test's own node (UseNode)
    std::filesystem::remove_all(options_.root);
    SimProcessTest::TearDown();
  }

  // Makes the simulation `state` of node `config` the one the control daemon
  // inherits, and its GPU 0 the manager's; GPU 0's SM count (0 on failure).
  uint32_t UseNode(const std::string& state, const std::string& config) {
    setenv("GPUSLICE_SIM_STATE", state.c_str(), 1);
    setenv("GPUSLICE_SIM_CONFIG", config.c_str(), 1);
    auto gpu = sim::SimGpu::Open({state, config, /*observer=*/true});
    EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
    if (!gpu.ok()) return 0;
    gpus_.uuids[0] = (*gpu)->device(0).uuid;
    return (*gpu)->device(0).sm_count;
  }

  std::unique_ptr<MpsManager> NewManager() {
    auto m = std::make_unique<MpsManager>(options_, gpus_, host_, clock_);
    Status started = m->Start();
    EXPECT_TRUE(started.ok()) << started.ToString();
    EXPECT_TRUE(m->GetStatus().available) << m->GetStatus().reason;
    return m;
  }

  std::string PidFile() const {
    return MpsGpuDir(options_.root, gpus_.uuids[0]) + "/pipe/nvidia-cuda-mps-control.pid";
  }
  pid_t ControlPid(const MpsManager& m) {
    auto status = m.GetStatus();
    return status.gpus.empty() ? 0 : status.gpus[0].control_pid;
  }
  // Starts `gpuslice-mps-probe` (with `probe_args`) as process `n` of the
  // simulation `state`/`config`, with tenant `r`'s client environment (but
  // its CUDA_VISIBLE_DEVICES) and `extra`.
  pid_t StartClient(int n, const std::string& state, const std::string& config,
                    const AcquireResult& r, const std::vector<std::string>& extra,
                    const std::vector<std::string>& probe_args = {}) {
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state, "GPUSLICE_SIM_CONFIG=" + config};
    for (const auto& [k, v] : r.env) {
      if (k == "CUDA_VISIBLE_DEVICES") continue;
      std::string entry = k;
      entry += '=';
      entry += v;
      env.push_back(std::move(entry));
    }
    env.insert(env.end(), extra.begin(), extra.end());
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice-mps-probe"};
    argv.insert(argv.end(), probe_args.begin(), probe_args.end());
    return Spawn(n, argv, env);
  }
  // Process `n`'s "ready" line (the probe's JSON), once printed (null if not
  // within 30 s).
  nlohmann::json ReadyLine(int n) {
    nlohmann::json found;
    WaitFor(
        [&] {
          const std::string out = Read("out" + std::to_string(n));
          if (out.find("\"ready\"") == std::string::npos) return false;
          found = nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false);
          return true;
        },
        seconds(30));
    return found;
  }

  MpsOptions options_;
  testing::FakeGpus gpus_{1};
  PosixMpsHost host_;
  MonotonicClock clock_;
};

TEST_F(MpsIntegrationTest, StartsOnFirstAcquireSharesAndStopsAfterLastRelease) {
  auto m = NewManager();
  auto a = m->Acquire({"a", "0", {.active_thread_percentage = 50}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->tier, Tier::kMps) << a->reason;
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kExclusiveProcess);
  const pid_t pid = ControlPid(*m);
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(host_.ProcessAlive(pid));
  EXPECT_EQ(std::stoi(*host_.ReadFile(PidFile())), pid);
  EXPECT_EQ(a->env.at("CUDA_MPS_PIPE_DIRECTORY"),
            MpsGpuDir(options_.root, gpus_.uuids[0]) + "/pipe");

  auto b = m->Acquire({"b", gpus_.uuids[0], {}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->tier, Tier::kMps);
  EXPECT_EQ(ControlPid(*m), pid);
  EXPECT_EQ(m->GetStatus().gpus[0].tenants.size(), 2u);

  m->CheckHealth();  // a real control round trip
  EXPECT_EQ(m->GetStatus().gpus[0].health, Health::kHealthy) << m->GetStatus().gpus[0].last_error;
  EXPECT_EQ(m->GetStatus().gpus[0].restarts, 0);

  ASSERT_TRUE(m->Release("a").ok());
  EXPECT_TRUE(host_.ProcessAlive(pid));
  ASSERT_TRUE(m->Release("b").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(pid); }, seconds(20)));
  EXPECT_EQ(host_.ReadFile(PidFile()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
}

TEST_F(MpsIntegrationTest, HealthCheckRestartsAKilledDaemon) {
  auto m = NewManager();
  ASSERT_EQ(m->Acquire({"a", "0", {}})->tier, Tier::kMps);
  const pid_t old_pid = ControlPid(*m);
  ASSERT_GT(old_pid, 0);
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !host_.ProcessAlive(old_pid); }, seconds(20)));

  m->CheckHealth();
  const pid_t new_pid = ControlPid(*m);
  EXPECT_GT(new_pid, 0);
  EXPECT_NE(new_pid, old_pid);
  EXPECT_TRUE(host_.ProcessAlive(new_pid));
  EXPECT_EQ(m->GetStatus().gpus[0].restarts, 1);
  m->CheckHealth();
  EXPECT_EQ(m->GetStatus().gpus[0].health, Health::kHealthy) << m->GetStatus().gpus[0].last_error;

  ASSERT_TRUE(m->Release("a").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(new_pid); }, seconds(20)));
}

TEST_F(MpsIntegrationTest, NewManagerOnTheSameRootKeepsTenantsAndDaemon) {
  auto first = NewManager();
  ASSERT_EQ(first->Acquire({"a", "0", {}})->tier, Tier::kMps);
  const pid_t pid = ControlPid(*first);
  first.reset();  // gpusliced restarts; MPS keeps running

  auto second = NewManager();
  EXPECT_EQ(ControlPid(*second), pid);
  ASSERT_EQ(second->Tenants().size(), 1u);
  EXPECT_EQ(second->Tenants()[0].name, "a");
  EXPECT_EQ(second->Tenants()[0].tier, Tier::kMps);

  ASSERT_TRUE(second->Release("a").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(pid); }, seconds(20)));
}

// MPS v3 on an r615 node: the manager probes protocol 3 from the simulated
// control binary, starts its daemon with a namespace per tenant, and each
// tenant's processes are capped by their namespace.
TEST_F(MpsIntegrationTest, OnAnR615NodeEachTenantsNamespaceCapsItsClients) {
  const std::string config = R"({"driver_version":"615.10"})";
  const std::string state = state_ + ".r615";
  const uint32_t sms = UseNode(state, config);
  ASSERT_GT(sms, 0u);

  auto m = NewManager();
  EXPECT_EQ(m->GetStatus().protocol, 3);
  auto a = m->Acquire({"a", "0", {.active_thread_percentage = 30}});
  auto b = m->Acquire({"b", "0", {.active_thread_percentage = 60}});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tier, Tier::kMps) << a->reason;
  const std::string pipe = MpsGpuDir(options_.root, gpus_.uuids[0]) + "/pipe";
  EXPECT_EQ(a->env.at("CUDA_MPS_PIPE_DIRECTORY"), pipe + "/gpuslice/a");
  EXPECT_FALSE(a->env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));

  // A process of each tenant; one asks for more than its namespace allows.
  const pid_t pa = StartClient(1, state, config, *a, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90"});
  const pid_t pb = StartClient(2, state, config, *b, {});
  const nlohmann::json ra = ReadyLine(1);
  const nlohmann::json rb = ReadyLine(2);
  std::cerr << "v3 clients: a " << ra.dump() << ", b " << rb.dump() << "\n";
  EXPECT_EQ(ra.value("mps", 0), 1) << ra.dump() << Read("err1");
  EXPECT_EQ(ra.value("sms", 0u), sms * 30 / 100) << "a's namespace caps its 90 %";
  EXPECT_EQ(rb.value("sms", 0u), sms * 60 / 100);
  Join(pa);
  Join(pb);
  ASSERT_TRUE(m->Release("a").ok());
  ASSERT_TRUE(m->Release("b").ok());
}

// MPS v3 on an r615 node: the configuration file the manager writes is all
// that a restarted control daemon knows (a restart after a crash runs no
// namespace command), so it alone must load in the simulated control daemon
// and cap each tenant's clients: thread percentage and pinned memory, even
// for a client that asks for more.
TEST_F(MpsIntegrationTest, OnAnR615NodeTheWrittenConfigurationAloneCapsEachNamespace) {
  const std::string config = R"({"driver_version":"615.10"})";
  const std::string state = state_ + ".r615cfg";
  const uint32_t sms = UseNode(state, config);
  ASSERT_GT(sms, 0u);
  constexpr uint64_t kMiB = 1ull << 20;

  auto m = NewManager();
  ASSERT_EQ(m->GetStatus().protocol, 3);
  auto a =
      m->Acquire({"a", "0", {.active_thread_percentage = 30, .pinned_memory_limit = 512 * kMiB}});
  auto b =
      m->Acquire({"b", "0", {.active_thread_percentage = 60, .pinned_memory_limit = 1024 * kMiB}});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tier, Tier::kMps) << a->reason;
  ASSERT_EQ(b->tier, Tier::kMps) << b->reason;
  // The control daemon dies; the health check starts it again from the file.
  const pid_t old_pid = ControlPid(*m);
  ASSERT_GT(old_pid, 0);
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !host_.ProcessAlive(old_pid); }, seconds(20)));
  m->CheckHealth();
  ASSERT_EQ(m->GetStatus().gpus[0].restarts, 1) << m->GetStatus().gpus[0].last_error;
  const std::string file = MpsGpuDir(options_.root, gpus_.uuids[0]) + "/mps.toml";
  const std::string written = *host_.ReadFile(file);
  std::cerr << file << ":\n" << written;
  EXPECT_NE(written.find("[servers.gpuslice.namespaces.\"a\"]"), std::string::npos) << written;
  EXPECT_NE(written.find("[servers.gpuslice.namespaces.\"b\"]"), std::string::npos) << written;

  // a asks for 90 % and 2G; its namespace gives 30 % and 512M.
  const std::vector<std::string> alloc = {"--alloc", std::to_string(768 * kMiB)};
  const pid_t pa = StartClient(
      1, state, config, *a,
      {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G"}, alloc);
  const pid_t pb = StartClient(2, state, config, *b, {}, alloc);
  const nlohmann::json ra = ReadyLine(1);
  const nlohmann::json rb = ReadyLine(2);
  std::cerr << "clients of the restarted daemon: a " << ra.dump() << ", b " << rb.dump() << "\n";
  EXPECT_EQ(ra.value("mps", 0), 1) << ra.dump() << Read("err1");
  EXPECT_EQ(ra.value("sms", 0u), sms * 30 / 100) << ra.dump();
  EXPECT_EQ(ra.value("alloc", ""), "CUDA_ERROR_OUT_OF_MEMORY") << "a's namespace's 512M";
  EXPECT_EQ(rb.value("mps", 0), 1) << rb.dump() << Read("err2");
  EXPECT_EQ(rb.value("sms", 0u), sms * 60 / 100) << rb.dump();
  EXPECT_EQ(rb.value("alloc", ""), "CUDA_SUCCESS") << "b's namespace's 1G";
  Join(pa);
  Join(pb);
  ASSERT_TRUE(m->Release("a").ok());
  ASSERT_TRUE(m->Release("b").ok());
}

// Fault: the MPS control daemon hangs (SIGSTOP: alive, but its control socket
// never answers). The health check's control command times out (bounded by
// the command timeout, not forever), the hung daemon is killed and a new one
// started for the same tenant, which keeps its tier and environment.
TEST_F(MpsIntegrationTest, HealthCheckKillsAndRestartsAHungDaemon) {
  options_.command_timeout_ns = 5'000'000'000;
  auto m = NewManager();
  auto a = m->Acquire({"a", "0", {}});
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->tier, Tier::kMps);
  const pid_t old_pid = ControlPid(*m);
  ASSERT_GT(old_pid, 0);
  ASSERT_EQ(kill(old_pid, SIGSTOP), 0);

  const auto before = std::chrono::steady_clock::now();
  m->CheckHealth();
  // One timed-out command plus a start: well under the 30 s start timeout
  // (a check that waited on the hung daemon forever would never return).
  EXPECT_LT(std::chrono::steady_clock::now() - before, seconds(40));
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(old_pid); }, seconds(20)));
  const pid_t new_pid = ControlPid(*m);
  EXPECT_GT(new_pid, 0);
  EXPECT_NE(new_pid, old_pid);
  EXPECT_TRUE(host_.ProcessAlive(new_pid));
  auto status = m->GetStatus();
  EXPECT_EQ(status.gpus[0].restarts, 1);
  EXPECT_NE(status.gpus[0].last_error.find("restarted"), std::string::npos)
      << status.gpus[0].last_error;
  ASSERT_EQ(m->Tenants().size(), 1u);
  EXPECT_EQ(m->Tenants()[0].tier, Tier::kMps);
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kExclusiveProcess);
  m->CheckHealth();
  EXPECT_EQ(m->GetStatus().gpus[0].health, Health::kHealthy) << m->GetStatus().gpus[0].last_error;

  ASSERT_TRUE(m->Release("a").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(new_pid); }, seconds(20)));
}

// Fault: the daemon hangs just as its last tenant leaves. `quit` times out;
// the release still completes: the hung daemon is killed, and the GPU's
// compute mode restored. Nothing is left running.
TEST_F(MpsIntegrationTest, ReleaseOfTheLastTenantEndsAHungDaemon) {
  options_.command_timeout_ns = 5'000'000'000;
  options_.stop_timeout_ns = 5'000'000'000;
  auto m = NewManager();
  ASSERT_EQ(m->Acquire({"a", "0", {}})->tier, Tier::kMps);
  const pid_t pid = ControlPid(*m);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);

  Status released = m->Release("a");
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(pid); }, seconds(20)));
  EXPECT_EQ(gpus_.modes[0], ComputeMode::kDefault);
  EXPECT_TRUE(m->Tenants().empty());
  EXPECT_EQ(ControlPid(*m), 0);
}

// Fault: the daemon dies while gpusliced is down. The next gpusliced (a new
// manager on the same root) finds the tenant in its state and starts a new
// daemon for it, instead of losing the tenant or trusting a dead pid.
TEST_F(MpsIntegrationTest, ADaemonThatDiedWhileGpuslicedWasDownIsStartedAgain) {
  pid_t old_pid;
  {
    auto first = NewManager();
    ASSERT_EQ(first->Acquire({"a", "0", {}})->tier, Tier::kMps);
    old_pid = ControlPid(*first);
  }
  ASSERT_GT(old_pid, 0);
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !host_.ProcessAlive(old_pid); }, seconds(20)));

  auto second = NewManager();
  const pid_t new_pid = ControlPid(*second);
  EXPECT_GT(new_pid, 0);
  EXPECT_NE(new_pid, old_pid);
  EXPECT_TRUE(host_.ProcessAlive(new_pid));
  ASSERT_EQ(second->Tenants().size(), 1u);
  EXPECT_EQ(second->Tenants()[0].name, "a");
  second->CheckHealth();
  EXPECT_EQ(second->GetStatus().gpus[0].health, Health::kHealthy)
      << second->GetStatus().gpus[0].last_error;
  ASSERT_TRUE(second->Release("a").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(new_pid); }, seconds(20)));
}

// One control daemon per GPU, each with its own lock, with real processes:
// GPU 0's control daemon is SIGSTOPped (alive, its socket never answers) and
// a health check is stuck in its command; meanwhile a tenant on GPU 1 gets
// its own daemon and is released, and the status answers, well before GPU
// 0's command times out.
TEST_F(MpsIntegrationTest, AHungDaemonOnGpu0NeverBlocksATenantOnGpu1) {
  const std::string config = R"({"device_count":2})";
  const std::string state = state_ + ".two";
  setenv("GPUSLICE_SIM_STATE", state.c_str(), 1);
  setenv("GPUSLICE_SIM_CONFIG", config.c_str(), 1);
  struct Unset {
    ~Unset() { unsetenv("GPUSLICE_SIM_CONFIG"); }
  } unset;
  auto gpu = sim::SimGpu::Open({state, config, /*observer=*/true});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  testing::FakeGpus two(2);
  two.uuids = {(*gpu)->device(0).uuid, (*gpu)->device(1).uuid};
  options_.command_timeout_ns = 60'000'000'000;  // GPU 0's command outlasts the test's deadline
  // The real host, telling when GPU 0's health check command has started.
  class Host final : public MpsHost {
   public:
    Host(PosixMpsHost& real, std::string pipe) : real_(real), pipe_(std::move(pipe)) {}
    bool IsLinux() override { return real_.IsLinux(); }
    StatusOr<std::string> FindExecutable(std::string_view p) override {
      return real_.FindExecutable(p);
    }
    StatusOr<CommandResult> Run(const CommandSpec& spec) override {
      auto pipe = spec.env.find("CUDA_MPS_PIPE_DIRECTORY");
      if (pipe != spec.env.end() && pipe->second == pipe_ &&
          spec.stdin_text == "get_server_list\n" && !started_) {
        started_ = true;
        stuck.set_value();
      }
      return real_.Run(spec);
    }
    bool ProcessAlive(pid_t pid) override { return real_.ProcessAlive(pid); }
    Status Kill(pid_t pid, int signal) override { return real_.Kill(pid, signal); }
    StatusOr<std::string> ReadFile(const std::string& p) override { return real_.ReadFile(p); }
    Status WriteFileAtomic(const std::string& p, std::string_view c) override {
      return real_.WriteFileAtomic(p, c);
    }
    Status RemoveFile(const std::string& p) override { return real_.RemoveFile(p); }
    Status MakeDirs(const std::string& p) override { return real_.MakeDirs(p); }
    StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
      return real_.ListDir(p);
    }
    void SleepNs(int64_t ns) override { real_.SleepNs(ns); }
    std::promise<void> stuck;

   private:
    PosixMpsHost& real_;
    const std::string pipe_;
    std::atomic<bool> started_ = false;
  } host(host_, MpsGpuDir(options_.root, two.uuids[0]) + "/pipe");
  auto stuck = host.stuck.get_future();
  MpsManager m(options_, two, host, clock_);
  ASSERT_TRUE(m.Start().ok());
  ASSERT_EQ(m.Acquire({"a", "0", {}})->tier, Tier::kMps);
  const pid_t hung = m.GetStatus().gpus[0].control_pid;
  ASSERT_GT(hung, 0);
  ASSERT_EQ(kill(hung, SIGSTOP), 0);
  auto check = std::async(std::launch::async, [&] { m.CheckHealth(); });
  // Whatever a failed assertion leaves running (the daemons are children of
  // init); destroyed first, so that a check stuck on GPU 0 ends at once.
  struct KillLeft {
    ~KillLeft() {
      for (const std::string& uuid : uuids) {
        auto pid = host.ReadFile(MpsGpuDir(root, uuid) + "/pipe/nvidia-cuda-mps-control.pid");
        const int n = pid.ok() ? std::atoi(pid->c_str()) : 0;
        if (n > 0) kill(n, SIGKILL);
      }
    }
    PosixMpsHost& host;
    std::string root;
    std::vector<std::string> uuids;
  } kill_left{host_, options_.root, two.uuids};
  ASSERT_EQ(stuck.wait_for(seconds(30)), std::future_status::ready);

  const auto before = std::chrono::steady_clock::now();
  auto b = m.Acquire({"b", "1", {}});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->tier, Tier::kMps) << b->reason;
  auto status = m.GetStatus();
  ASSERT_EQ(status.gpus.size(), 2u);
  const pid_t other = status.gpus[1].control_pid;
  EXPECT_GT(other, 0);
  EXPECT_NE(other, hung);
  ASSERT_TRUE(m.Release("b").ok());
  EXPECT_TRUE(WaitFor([&] { return !host_.ProcessAlive(other); }, seconds(20)));
  const auto took = std::chrono::steady_clock::now() - before;
  // A deadline, not a measurement: GPU 0's command has a minute to time out.
  EXPECT_LT(took, seconds(30)) << "GPU 1's tenant waited for GPU 0's hung daemon";
  EXPECT_EQ(check.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "GPU 0's check was still stuck throughout";
  std::cerr << "GPU 1 placed and released in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms while GPU 0 hung\n";

  kill(hung, SIGKILL);  // the check's command then fails at once; it restarts GPU 0's daemon
  check.wait();
  ASSERT_TRUE(m.Release("a").ok());
  const auto left = m.GetStatus();
  EXPECT_TRUE(left.gpus.empty());
}

}  // namespace
}  // namespace gpuslice::daemon::mps
