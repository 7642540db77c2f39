// Test fakes for the MPS manager: GPUs with compute modes in memory, and a
// host whose `nvidia-cuda-mps-control` is a model of NVIDIA's (a daemon per
// pipe directory, a pid file, commands on stdin), with files in memory and
// sleeps that advance a SimulatedClock. Test-only. FakeHost's methods may be
// called from several threads (each takes its mutex; a command to a `blocked`
// daemon waits, without it, until Unblock()); its public fields are for the
// test's own thread while no other thread calls it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/mps/mps_host.h"

namespace gpuslice::daemon::mps::testing {

class FakeGpus final : public GpuModeControl {
 public:
  explicit FakeGpus(int count) {
    for (int i = 0; i < count; ++i) {
      uuids.push_back("GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd");
      modes.push_back(ComputeMode::kDefault);
    }
  }
  StatusOr<int> DeviceCount() override { return static_cast<int>(uuids.size()); }
  StatusOr<std::string> Uuid(int index) override { return uuids.at(index); }
  StatusOr<ComputeMode> GetComputeMode(int index) override { return modes.at(index); }
  Status CheckComputeModeSettable(int index) override {
    (void)modes.at(index);
    return deny_set ? PermissionDenied("NVML_ERROR_NO_PERMISSION") : Status::Ok();
  }
  // A hold as GpuManager's lease of one holder: the mode, and back to the
  // baseline when released.
  Status HoldComputeMode(int index, ComputeMode mode, ComputeMode baseline) override {
    if (deny_set) return PermissionDenied("NVML_ERROR_NO_PERMISSION");
    if (!held.contains(index)) held[index] = baseline;
    modes.at(index) = mode;
    return Status::Ok();
  }
  Status ReleaseComputeMode(int index) override {
    auto it = held.find(index);
    if (it == held.end()) return Status::Ok();
    modes.at(index) = it->second;
    held.erase(it);
    return Status::Ok();
  }

  std::vector<std::string> uuids;
  std::vector<ComputeMode> modes;
  std::map<int, ComputeMode> held;  // the holds' baselines, by index
  bool deny_set = false;
};

class FakeHost final : public MpsHost {
 public:
  static constexpr char kBinary[] = "/usr/bin/nvidia-cuda-mps-control";

  explicit FakeHost(SimulatedClock& clock) : clock_(clock) {}

  bool protocol3 = false;  // the control binary speaks MPS v3
  std::vector<std::string> start_argv;
  std::set<pid_t> v3_daemons;
  // Per pipe directory: namespace -> the last create/set command line.
  std::map<std::string, std::map<std::string, std::string>> namespaces;
  std::map<std::string, std::string> probe_env;

  // --- MpsHost ---
  bool IsLinux() override { return linux; }
  StatusOr<std::string> FindExecutable(std::string_view program) override {
    std::lock_guard lock(mu_);
    if (!binary_installed) return NotFound(std::string(program) + " not found on PATH");
    return std::string(kBinary);
  }
  StatusOr<CommandResult> Run(const CommandSpec& spec) override {
    std::unique_lock lock(mu_);
    CommandResult result;
    if (spec.argv.size() == 4 && spec.argv[1] == "-p" && spec.argv[3] == "-h") {
      // The protocol probe: a v3 binary lists its modules.
      probe_env = spec.env;
      result.out = "usage: nvidia-cuda-mps-control [-d | -f]\n";
      if (protocol3 && spec.argv[2] == "3") result.out += "  server list\n  namespace list\n";
      return result;
    }
    const std::string pipe = spec.env.at("CUDA_MPS_PIPE_DIRECTORY");
    if (spec.argv.size() >= 2 && spec.argv[1] == "-d") {
      ++starts;
      start_env = spec.env;
      start_argv = spec.argv;
      if (fail_start || starts > fail_after_starts) {
        result.exit_code = 1;
        return result;
      }
      const pid_t pid = next_pid++;
      alive.insert(pid);
      if (std::find(spec.argv.begin(), spec.argv.end(), "3") != spec.argv.end())
        v3_daemons.insert(pid);
      files[pipe + "/nvidia-cuda-mps-control.pid"] = std::to_string(pid) + "\n";
      return result;
    }
    const pid_t pid = DaemonOf(pipe);
    if (pid == 0) {
      result.exit_code = 1;
      result.err = "Cannot find MPS control daemon process\n";
      return result;
    }
    if (blocked.contains(pid)) {
      // Hung until the test says otherwise: the caller is stuck in here.
      ++stuck_calls;
      stuck_cv_.notify_all();
      stuck_cv_.wait(lock, [&] { return !blocked.contains(pid); });
      --stuck_calls;
      result.timed_out = true;
      result.exit_code = 128 + SIGKILL;
      return result;
    }
    if (hung.contains(pid)) {
      clock_.Advance(spec.timeout_ns);
      result.timed_out = true;
      result.exit_code = 128 + SIGKILL;
      return result;
    }
    std::istringstream lines(spec.stdin_text);
    std::string line;
    while (std::getline(lines, line)) {
      commands.push_back(line);
      std::istringstream words(line);
      std::string verb;
      words >> verb;
      if (verb == "quit") {
        if (!ignore_quit) {
          alive.erase(pid);
          files.erase(pipe + "/nvidia-cuda-mps-control.pid");
        }
      } else if (verb == "get_server_list") {
        for (const auto& [server, clients] : servers[pipe]) {
          result.out += std::to_string(server) + "\n";
        }
      } else if (verb == "namespace") {
        // MPS v3: what a v3 daemon's namespaces hold, by pipe directory.
        std::string what, server, name;
        words >> what >> server >> name;
        name = name.substr(name.find('=') + 1);
        if (!v3_daemons.contains(pid)) {
          result.out += "Error: this MPS control daemon speaks protocol 2\n";
        } else if (what == "create" && namespaces[pipe].contains(name)) {
          result.out += "Error: namespace " + name + " exists\n";
        } else if (what == "delete") {
          namespaces[pipe].erase(name);
        } else {
          namespaces[pipe][name] = line;
        }
      } else if (verb == "get_client_list") {
        pid_t server = 0;
        words >> server;
        for (pid_t client : servers[pipe][server]) result.out += std::to_string(client) + "\n";
      }
    }
    return result;
  }
  bool ProcessAlive(pid_t pid) override {
    std::lock_guard lock(mu_);
    return alive.contains(pid);
  }
  Status Kill(pid_t pid, int signal) override {
    std::lock_guard lock(mu_);
    kills.push_back(pid);
    if (signal == SIGKILL) alive.erase(pid);
    return Status::Ok();
  }
  StatusOr<std::string> ReadFile(const std::string& path) override {
    std::lock_guard lock(mu_);
    auto it = files.find(path);
    if (it == files.end()) return NotFound(path + ": No such file or directory");
    return it->second;
  }
  Status WriteFileAtomic(const std::string& path, std::string_view contents) override {
    std::lock_guard lock(mu_);
    if (fail_writes) return PermissionDenied(path + ": Permission denied");
    files[path] = std::string(contents);
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    std::lock_guard lock(mu_);
    files.erase(path);
    return Status::Ok();
  }
  Status MakeDirs(const std::string& path) override {
    std::lock_guard lock(mu_);
    dirs.insert(path);
    return Status::Ok();
  }
  StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    std::lock_guard lock(mu_);
    std::set<std::string> names;
    auto add = [&](const std::string& p) {
      if (p.size() > path.size() + 1 && p.starts_with(path + "/")) {
        const std::string rest = p.substr(path.size() + 1);
        names.insert(rest.substr(0, rest.find('/')));
      }
    };
    for (const auto& [p, contents] : files) add(p);
    for (const auto& d : dirs) add(d);
    return std::vector<std::string>(names.begin(), names.end());
  }
  void SleepNs(int64_t ns) override {
    std::lock_guard lock(mu_);
    clock_.Advance(ns);
  }

  // --- test helpers ---
  // Makes commands to daemon `pid` hang (until Unblock), or ends that.
  void Block(pid_t pid) {
    std::lock_guard lock(mu_);
    blocked.insert(pid);
  }
  void Unblock(pid_t pid) {
    {
      std::lock_guard lock(mu_);
      blocked.erase(pid);
    }
    stuck_cv_.notify_all();
  }
  // Waits until `n` calls are stuck on blocked daemons (no deadline: the
  // caller bounds the test with its own).
  void WaitForStuckCalls(int n) {
    std::unique_lock lock(mu_);
    stuck_cv_.wait(lock, [&] { return stuck_calls >= n; });
  }
  int StuckCalls() {
    std::lock_guard lock(mu_);
    return stuck_calls;
  }
  // The live daemon whose pid file is in `pipe`, or 0.
  pid_t DaemonOf(const std::string& pipe) {
    auto it = files.find(pipe + "/nvidia-cuda-mps-control.pid");
    if (it == files.end()) return 0;
    const pid_t pid = std::stoi(it->second);
    return alive.contains(pid) ? pid : 0;
  }
  int CountCommands(const std::string& prefix) const {
    int n = 0;
    for (const auto& c : commands) n += c.starts_with(prefix) ? 1 : 0;
    return n;
  }

  bool linux = true;
  bool binary_installed = true;
  bool fail_start = false;
  int fail_after_starts = 1 << 30;  // starts after this many fail
  bool ignore_quit = false;
  bool fail_writes = false;
  std::set<pid_t> alive;
  std::set<pid_t> hung;     // daemons whose control channel does not answer
  std::set<pid_t> blocked;  // daemons whose commands wait for Unblock()
  int stuck_calls = 0;
  std::map<std::string, std::string> files;
  std::set<std::string> dirs;
  // pipe dir -> server pid -> client pids
  std::map<std::string, std::map<pid_t, std::vector<pid_t>>> servers;
  std::vector<std::string> commands;
  std::vector<pid_t> kills;
  std::map<std::string, std::string> start_env;
  int starts = 0;
  pid_t next_pid = 1000;

 private:
  SimulatedClock& clock_;
  std::mutex mu_;
  std::condition_variable stuck_cv_;
};

}  // namespace gpuslice::daemon::mps::testing
