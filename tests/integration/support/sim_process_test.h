// SimProcessTest: a GoogleTest fixture for tests that run real programs on a
// private simulated GPU. Each test gets its own directory, simulator state
// file and (for the limiter) segment directory; programs from
// ${GPUSLICE_BUILD_DIR}/bin are spawned with the simulated driver selected
// and their stdout/stderr captured in numbered files; leftover children are
// killed at the end.
//
// Header-only: include it from one test binary (it links gpuslice_sim_core
// and nlohmann_json).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/core/sim_gpu.h"
#include "sim/core/stats.h"

namespace gpuslice::testing {

inline std::string BuildDir() {
  const char* dir = getenv("GPUSLICE_BUILD_DIR");
  return dir != nullptr ? dir : ".";
}

// Polls `condition` every 10 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// What shell command `cmd` writes on its standard output (redirect its
// standard error into it where wanted: `2>&1`); empty if it cannot start.
inline std::string CommandOutput(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  return out;
}

class SimProcessTest : public ::testing::Test {
 protected:
  using json = nlohmann::json;

  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // parameterised tests' names
    dir_ = ::testing::TempDir() + "/gpuslice." + std::to_string(getpid()) + "." + name;
    std::filesystem::remove_all(dir_);
    mkdir(dir_.c_str(), 0700);
    state_ = dir_ + "/sim.state";
    shm_dir_ = dir_ + "/shm";
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts gpuslice-workload with `args` on this test's simulation; stdout and
  // stderr go to files numbered `n`.
  pid_t Start(int n, const std::vector<std::string>& args,
              const std::vector<std::string>& extra_env = {}) {
    return StartProgram("gpuslice-workload", n, args, extra_env);
  }

  // Starts ${build}/bin/`program` the same way; `extra_env` entries are
  // NAME=VALUE and come after the simulator's.
  pid_t StartProgram(const std::string& program, int n, const std::vector<std::string>& args,
                     const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {program.starts_with("/") ? program
                                                              : BuildDir() + "/bin/" + program};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib",
                                    "GPUSLICE_SIM_STATE=" + state_};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return Spawn(n, argv, env);
  }

  // Above the kernel's largest pid_max (2^22): never a process.
  static constexpr pid_t kNoProcess = 1 << 23;

  // Starts argv[0] (a path) with exactly `env`; stdout and stderr go to the
  // files "out<n>" and "err<n>" of this test's directory. If it cannot be
  // started the test fails and the result is kNoProcess.
  pid_t Spawn(int n, std::vector<std::string> argv, std::vector<std::string> env) {
    std::vector<char*> argv_c, env_c;
    for (auto& a : argv) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    for (auto& e : env) env_c.push_back(e.data());
    env_c.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, (dir_ + "/out" + std::to_string(n)).c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ + "/err" + std::to_string(n)).c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0 || pid <= 0) {
      // A pid no process has: a test that goes on to kill() it (or -1, or 0,
      // which would signal every process, or this group) harms nothing.
      ADD_FAILURE() << "cannot start " << argv[0] << ": " << strerror(rc);
      return kNoProcess;
    }
    children_.push_back(pid);
    return pid;
  }

  // Waits for `pid`; its exit code, or 128 + signal.
  int Join(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(children_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // The simulator's ground truth (`gpuslice sim stats --json`).
  json Stats() {
    auto gpu = sim::SimGpu::Open({state_, "", /*observer=*/true});
    if (!gpu.ok()) return json::object();
    return (*gpu)->WithState([&](sim::SimState& s) { return sim::StatsJson(s, (*gpu)->NowNs()); });
  }

  json Process(const json& stats, pid_t pid) {
    for (const auto& p : stats.value("processes", json::array())) {
      if (p["pid"] == pid) return p;
    }
    return json::object();
  }

  // Waits (20 s at most) until every pid in `pids` has run a kernel on the
  // simulated GPU; fails the test with the programs' standard errors if not.
  void WaitRunning(const std::vector<pid_t>& pids) {
    const bool running = WaitFor(
        [&] {
          const json s = Stats();
          for (pid_t p : pids) {
            const json proc = Process(s, p);
            if (proc.empty() || proc["devices"][0]["kernels"].get<uint64_t>() == 0) return false;
          }
          return true;
        },
        std::chrono::seconds(20));
    std::string errors;
    for (const auto& f : std::filesystem::directory_iterator(dir_)) {
      if (f.path().filename().string().starts_with("err")) errors += Read(f.path().filename());
    }
    ASSERT_TRUE(running) << errors;
  }

  // The share (percent) of device 0's time that `pids` (host pids, as the
  // simulator names processes) together took over the next `span`, from the
  // simulator's ground truth.
  double ShareOfDevice(const std::vector<pid_t>& pids, std::chrono::milliseconds span) {
    auto busy = [&](const json& s) {
      double sum = 0;
      for (pid_t p : pids) {
        const json proc = Process(s, p);
        if (!proc.empty()) sum += proc["devices"][0]["busy_ns"].get<double>();
      }
      return sum;
    };
    const json a = Stats();
    std::this_thread::sleep_for(span);
    const json b = Stats();
    const double elapsed = b.value("clock_ns", 0.0) - a.value("clock_ns", 0.0);
    return elapsed > 0 ? 100.0 * (busy(b) - busy(a)) / elapsed : 0;
  }

  std::string dir_, state_, shm_dir_;
  std::vector<pid_t> children_;
};

}  // namespace gpuslice::testing
