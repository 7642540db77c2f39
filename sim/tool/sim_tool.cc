// gpuslice-sim: the simulated GPU's commands (run, env, stats, reset), which
// `gpuslice sim ...` runs (docs/sim.md). It lives with the simulator, in
// <sim dir>/bin, so that the product's binaries never link the simulator
// (DESIGN.md section 1); its own directory's parent is the simulation it
// selects.
//
// Exit codes: those of gpuslice (cli/exit_codes.h); `run` ends with the
// command's own status, or 127 if it cannot be executed.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/paths.h"
#include "sim/core/config.h"
#include "sim/core/nvml_faults.h"
#include "sim/core/process_identity.h"
#include "sim/core/sim_gpu.h"
#include "sim/core/stats.h"
#include "sim/core/xid_log.h"

namespace gpuslice::sim {
namespace {

using cli::Fail;
using cli::kExitCannotRun;

// The simulation this tool belongs to: the parent of its own directory.
StatusOr<std::string> SimDir() {
  char real[PATH_MAX];
  const std::string dir = cli::ExecutableDir() + "/..";
  if (realpath(dir.c_str(), real) == nullptr ||
      access((std::string(real) + "/lib/libcuda.so.1").c_str(), F_OK) != 0) {
    return NotFound("gpuslice-sim: no simulated driver (lib/libcuda.so.1) in " + dir);
  }
  return std::string(real);
}

struct SimTarget {
  std::string config;  // --config: a file or inline JSON
  std::string state;   // --state: the state file
};

void AddTargetOptions(CLI::App* cmd, SimTarget* t) {
  cmd->add_option("--config", t->config,
                  "Simulator config: a JSON file, or JSON text (default: one H100 80GB)");
  cmd->add_option("--state", t->state,
                  "Simulation state file shared by its processes (default: $GPUSLICE_SIM_STATE "
                  "or /dev/shm/gpuslice-sim-<uid>.state)");
}

// The environment that selects the simulated GPU, as (name, value) pairs.
std::vector<std::pair<std::string, std::string>> SimEnvironment(const SimTarget& t) {
  auto dir = SimDir();
  if (!dir.ok()) Fail(dir.status().message());
  if (!t.config.empty()) {
    auto text = sim::LoadSimConfigText(t.config);
    if (!text.ok()) Fail(text.status().message());
    if (auto parsed = sim::ParseSimConfig(*text); !parsed.ok()) Fail(parsed.status().message());
  }
  std::vector<std::pair<std::string, std::string>> env;
  const char* ld = getenv("LD_LIBRARY_PATH");
  env.emplace_back("LD_LIBRARY_PATH",
                   *dir + "/lib" + (ld != nullptr && *ld != '\0' ? ":" + std::string(ld) : ""));
  const char* path = getenv("PATH");
  env.emplace_back("PATH", *dir + "/bin" + (path != nullptr ? ":" + std::string(path) : ""));
  if (!t.config.empty()) {
    char real[PATH_MAX];
    bool is_file = t.config.front() != '{' && realpath(t.config.c_str(), real) != nullptr;
    env.emplace_back("GPUSLICE_SIM_CONFIG", is_file ? std::string(real) : t.config);
  }
  if (!t.state.empty()) env.emplace_back("GPUSLICE_SIM_STATE", t.state);
  return env;
}

// True if something accepts connections on the Unix socket `path`.
bool Answers(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// Starts the simulation's node helper (docs/sim.md, "Processes and PID
// namespaces") unless one answers, detached from this process so that it
// outlives the command; waits up to 2 s for it to answer. Without it,
// programs in PID namespaces fall back to their namespace's pid: a warning,
// not an error.
void EnsureNodeHelper(const std::string& sim_dir) {
  auto options = sim::OptionsFromEnv();
  if (!options.ok()) return;
  const std::string socket_path = sim::NodeSocketPath(options->state_path);
  if (Answers(socket_path)) return;
  const std::string helper = sim_dir + "/bin/gpuslice-sim-node";
  const pid_t child = fork();
  if (child < 0) return;
  if (child == 0) {
    setsid();
    if (fork() != 0) _exit(0);  // the helper is nobody's child: init reaps it
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    execl(helper.c_str(), helper.c_str(), "--socket", socket_path.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  waitpid(child, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!Answers(socket_path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr,
              "gpuslice: warning: the simulator's node helper (%s) did not start; programs in "
              "PID namespaces will be listed under their namespace's pid\n",
              helper.c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Opens the simulation named by the environment (and `t`) as an observer.
std::unique_ptr<sim::SimGpu> OpenObserver(const SimTarget& t) {
  auto options = sim::OptionsFromEnv();
  if (!options.ok()) Fail(options.status().message());
  if (!t.state.empty()) options->state_path = t.state;
  if (access(options->state_path.c_str(), F_OK) != 0) {
    Fail("no simulation at " + options->state_path +
         " (it starts with the first program run under `gpuslice sim run`)");
  }
  options->observer = true;
  auto gpu = sim::SimGpu::Open(*options);
  if (!gpu.ok()) Fail(gpu.status().message());
  return std::move(*gpu);
}

// Prints, every `interval`, each device's and process's share of GPU time in
// that interval.
void Watch(sim::SimGpu& gpu, double interval_s, int count) {
  struct Sample {
    int64_t now;
    std::map<uint32_t, int64_t> device_busy;
    std::map<std::pair<int32_t, uint32_t>, std::pair<std::string, int64_t>> process_busy;
  };
  auto take = [&] {
    return gpu.WithState([&](sim::SimState& s) {
      Sample x{gpu.NowNs(), {}, {}};
      for (uint32_t d = 0; d < s.device_count; ++d) x.device_busy[d] = s.devices[d].busy_ns;
      for (const auto& p : s.processes) {
        if (p.status == sim::kProcessFree) continue;
        for (uint32_t d = 0; d < s.device_count; ++d) {
          x.process_busy[{p.pid, d}] = {p.name, p.devices[d].busy_ns};
        }
      }
      return x;
    });
  };
  Sample prev = take();
  const int64_t start = prev.now;
  for (int i = 0; count <= 0 || i < count; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    Sample cur = take();
    const auto dt = static_cast<double>(cur.now - prev.now);
    for (const auto& [d, busy] : cur.device_busy) {
      std::string line;
      char buf[128];
      snprintf(buf, sizeof buf, "t=%6.1fs  GPU %u busy %5.1f%%",
               static_cast<double>(cur.now - start) / 1e9, d,
               100.0 * static_cast<double>(busy - prev.device_busy[d]) / dt);
      line += buf;
      for (const auto& [key, value] : cur.process_busy) {
        if (key.second != d) continue;
        auto it = prev.process_busy.find(key);
        int64_t delta = value.second - (it == prev.process_busy.end() ? 0 : it->second.second);
        if (delta <= 0) continue;
        snprintf(buf, sizeof buf, "  | pid %d %s %5.1f%%", key.first, value.first.c_str(),
                 100.0 * static_cast<double>(delta) / dt);
        line += buf;
      }
      printf("%s\n", line.c_str());
    }
    fflush(stdout);
    prev = std::move(cur);
  }
}

void AddSimCommands(CLI::App* sim) {
  sim->require_subcommand(1);

  {
    auto* t = new SimTarget;  // lives as long as the process: CLI11 keeps pointers
    auto* argv = new std::vector<std::string>;
    CLI::App* run = sim->add_subcommand("run", "Run a command with the simulated GPU selected");
    AddTargetOptions(run, t);
    run->add_option("command", *argv, "The command and its arguments (after --)")->required();
    run->callback([t, argv] {
      for (const auto& [name, value] : SimEnvironment(*t)) setenv(name.c_str(), value.c_str(), 1);
      if (auto dir = SimDir(); dir.ok()) EnsureNodeHelper(*dir);
      std::vector<char*> args;
      for (auto& a : *argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      Fail("cannot run " + (*argv)[0] + ": " + strerror(errno), kExitCannotRun);
    });
  }
  {
    auto* t = new SimTarget;
    CLI::App* env = sim->add_subcommand(
        "env", "Print shell exports that select the simulated GPU: eval \"$(gpuslice sim env)\"");
    AddTargetOptions(env, t);
    env->callback([t] {
      for (const auto& [name, value] : SimEnvironment(*t)) {
        printf("export %s=%s\n", name.c_str(), ShellQuote(value).c_str());
      }
    });
  }
  {
    auto* t = new SimTarget;
    auto* json = new bool(false);
    auto* watch = new double(0);
    auto* count = new int(0);
    CLI::App* stats = sim->add_subcommand(
        "stats",
        "Print the simulation's ground truth: per device and per process (exited ones "
        "kept until reset) busy time, kernels, memory, and the simulation clock");
    stats->add_option("--state", t->state, "Simulation state file");
    stats->add_flag("--json", *json, "Machine-readable output (fields documented in docs/sim.md)");
    stats
        ->add_option("--watch", *watch,
                     "Instead, print every SECONDS each process's share of GPU time")
        ->check(CLI::Range(0.05, 3600.0));
    stats->add_option("--count", *count, "With --watch: stop after N lines (default: never)")
        ->check(CLI::NonNegativeNumber);
    stats->callback([t, json, watch, count] {
      auto gpu = OpenObserver(*t);
      if (*watch > 0) {
        Watch(*gpu, *watch, *count);
        return;
      }
      std::string out = gpu->WithState([&](sim::SimState& s) {
        return *json ? sim::StatsJson(s, gpu->NowNs()).dump(2) + "\n"
                     : sim::StatsText(s, gpu->NowNs());
      });
      fputs(out.c_str(), stdout);
    });
  }
  {
    auto* t = new SimTarget;
    auto* remove = new bool(false);
    CLI::App* reset = sim->add_subcommand(
        "reset",
        "Clear the ground truth (exited processes, counters); running programs keep "
        "their contexts and memory");
    reset->add_option("--state", t->state, "Simulation state file");
    reset->add_flag("--remove", *remove,
                    "Delete the state file instead (refused while programs use it)");
    reset->callback([t, remove] {
      auto gpu = OpenObserver(*t);
      if (!*remove) {
        gpu->ResetStats();
        return;
      }
      int users = gpu->WithState([](sim::SimState& s) {
        int n = 0;
        for (const auto& p : s.processes) n += p.status == sim::kProcessAlive;
        return n;
      });
      if (users > 0) Fail("the simulation is in use by " + std::to_string(users) + " process(es)");
      unlink(gpu->path().c_str());
    });
  }
  {
    auto* t = new SimTarget;
    auto* device = new int(0);
    auto* xid = new uint32_t(0);
    CLI::App* raise = sim->add_subcommand(
        "xid",
        "Raise an XID error on a device: NVML event sets registered for "
        "nvmlEventTypeXidCriticalError on it receive it (docs/sim.md \"XID errors\")");
    raise->add_option("--state", t->state, "Simulation state file");
    raise->add_option("--gpu", *device, "Device index")->required()->check(CLI::NonNegativeNumber);
    raise->add_option("--xid", *xid, "The XID (e.g. 79: fallen off the bus; 13: an application's)")
        ->required();
    raise->callback([t, device, xid] {
      auto gpu = OpenObserver(*t);
      const auto count = gpu->WithState([](sim::SimState& s) { return s.device_count; });
      if (static_cast<uint32_t>(*device) >= count) {
        Fail("no device " + std::to_string(*device) + " (the simulation has " +
             std::to_string(count) + ")");
      }
      if (Status s = sim::AppendXid(gpu->path(), *device, *xid); !s.ok()) Fail(s.message());
    });
  }
  {
    struct FaultOptions {
      SimTarget target;
      sim::NvmlFaultRule rule;
      std::string gpu = "*";
      std::string error;
      bool clear = false;
      bool list = false;
    };
    auto* o = new FaultOptions;
    CLI::App* fault = sim->add_subcommand(
        "nvml-fault",
        "Make the simulated NVML fail calls (docs/sim.md \"NVML faults\"): adds a rule, or "
        "--clear removes them all, --list prints them");
    fault->add_option("--state", o->target.state, "Simulation state file");
    fault->add_option("--function", o->rule.function,
                      "The NVML entry point to fail, e.g. nvmlDeviceSetPowerManagementLimit "
                      "(default *: every call that takes a device)");
    fault->add_option("--gpu", o->gpu, "Device index (default *: every device)");
    fault->add_option("--error", o->error,
                      "The NVML error to return: GPU_IS_LOST, UNKNOWN, ... or its number");
    fault->add_option("--after", o->rule.after, "Let this many matching calls succeed first");
    fault->add_option("--times", o->rule.times,
                      "Fail this many calls, then succeed again (default 0: until cleared)");
    fault->add_flag("--clear", o->clear, "Remove every rule (the GPU recovers)");
    fault->add_flag("--list", o->list, "Print the rules");
    fault->callback([o] {
      auto gpu = OpenObserver(o->target);
      const std::string& state = gpu->path();
      auto rules = sim::ReadNvmlFaults(state);
      if (!rules.ok()) Fail(rules.status().message());
      if (o->list) {
        for (const sim::NvmlFaultRule& r : *rules) printf("%s\n", FormatNvmlFaultRule(r).c_str());
        return;
      }
      if (o->clear) {
        if (Status s = sim::WriteNvmlFaults(state, {}); !s.ok()) Fail(s.message());
        return;
      }
      if (o->error.empty()) Fail("--error is required (or --clear, --list)");
      std::string line = o->rule.function + " " + o->gpu + " " + o->error;
      if (o->rule.after != 0) line += " after=" + std::to_string(o->rule.after);
      if (o->rule.times != 0) line += " times=" + std::to_string(o->rule.times);
      auto rule = sim::ParseNvmlFaultRule(line);
      if (!rule.ok()) Fail(rule.status().message());
      const auto count = gpu->WithState([](sim::SimState& s) { return s.device_count; });
      if (rule->gpu >= 0 && static_cast<uint32_t>(rule->gpu) >= count) {
        Fail("no device " + std::to_string(rule->gpu) + " (the simulation has " +
             std::to_string(count) + ")");
      }
      rules->push_back(*rule);
      if (Status s = sim::WriteNvmlFaults(state, *rules); !s.ok()) Fail(s.message());
    });
  }
}

}  // namespace
}  // namespace gpuslice::sim

int main(int argc, char** argv) {
  try {
    CLI::App app{"The simulated GPU: run programs on it, read its ground truth", "gpuslice sim"};
    gpuslice::sim::AddSimCommands(&app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int rc = app.exit(e);
      return rc == 0 ? 0 : gpuslice::cli::kExitUsage;
    }
  } catch (const std::exception& e) {
    gpuslice::cli::Fail(e.what());
  }
  return 0;
}
