#include "cli/run_command.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/common_flags.h"
#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/limit_flags.h"
#include "cli/paths.h"
#include "cli/preload_env.h"
#include "cli/process_lifetime.h"
#include "common/quantity.h"
#include "limiter/core/limit_config.h"
#include "limiter/daemon_client.h"

namespace gpuslice::cli {
namespace {

struct RunOptions {
  std::string memory;   // --memory, as typed ("" if not given)
  std::string compute;  // --compute
  std::string group;    // --group
  std::string shm_dir;  // --shm-dir
  std::vector<std::string> command;
};

std::string Absolute(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

void Set(std::string_view name, const std::string& value) {
  setenv(std::string(name).c_str(), value.c_str(), 1);
}

// How long `run` waits for the daemon's answer before starting the command
// without it (no daemon answers: at once).
constexpr std::chrono::seconds kRegistrationDeadline{2};

const char* Env(std::string_view name) { return getenv(std::string(name).c_str()); }

// The process's own limits as `run` can say them without knowing the
// devices: a single quantity (percent) for every GPU; the per-device forms
// are left to the limiter's registration.
std::vector<limiter::DeviceLimits> SingleLimits() {
  limiter::DeviceLimits all;
  if (const char* v = Env(limiter::kEnvMemoryLimit); v != nullptr) {
    if (auto bytes = ParseBytes(v); bytes.ok() && *bytes > 0) all.memory_bytes = *bytes;
  }
  if (const char* v = Env(limiter::kEnvComputeLimit); v != nullptr) {
    if (auto p = ParsePercent(v); p.ok() && *p >= 1 && *p < 100) all.compute_percent = *p;
  }
  if (!all.memory_bytes && !all.compute_percent) return {};
  return {all};
}

// Registers this process, which is about to become the command (execvp keeps
// the pid), with the daemon when one answers, and applies the environment
// the daemon gives it (an MPS client's for a group of tier mps): the driver
// reads it when the command starts, which no later registration could
// change. The limiter's own registration of the same pid, once the command
// uses CUDA, is the same tenant again. Never stops the command: without an
// answer, or refused, it runs as it would without a daemon (said on stderr
// when refused).
void RegisterWithDaemon() {
  if (const char* v = Env("GPUSLICE_REGISTER"); v != nullptr) {
    const std::string_view s(v);
    if (s == "0" || s == "false" || s == "off" || s == "no") return;
  }
  auto endpoint = limiter::DaemonAddressFromEnv(Env);
  if (!endpoint.ok()) Fail("configuration error: " + endpoint.status().message(), kExitUsage);
  if (!endpoint->tcp() && access(endpoint->unix_path.c_str(), F_OK) != 0) return;  // no daemon
  auto schedule = limiter::ParseScheduleRequest(Env);
  if (!schedule.ok()) Fail("configuration error: " + schedule.status().message(), kExitUsage);

  limiter::RegistrationRequest request;
  if (const char* group = Env(limiter::kEnvGroup); group != nullptr) {
    request.group = Trim(group);
  } else {
    std::ifstream in("/proc/self/cgroup");
    std::stringstream cgroup;
    cgroup << in.rdbuf();
    request.group = limiter::DefaultGroup(cgroup.str(), static_cast<int>(getpid()));
  }
  request.limits = SingleLimits();
  request.schedule = *schedule;
  if (endpoint->tcp()) request.pid = static_cast<int32_t>(getpid());
  for (auto [name, field] : {std::pair{"POD_NAME", &request.pod_name},
                             std::pair{"POD_NAMESPACE", &request.pod_namespace},
                             std::pair{"CONTAINER_NAME", &request.container_name}}) {
    if (const char* v = Env(name); v != nullptr) *field = v;
  }
  const limiter::RegistrationResult result =
      limiter::Register(*endpoint, request, kRegistrationDeadline);
  switch (result.outcome) {
    case limiter::RegistrationResult::Outcome::kRegistered:
      for (const auto& [name, value] : result.env) setenv(name.c_str(), value.c_str(), 1);
      if (!result.schedule_refused.empty()) {
        fprintf(stderr, "gpuslice run: gpusliced did not apply the schedule: %s\n",
                result.schedule_refused.c_str());
      }
      return;
    case limiter::RegistrationResult::Outcome::kRefused:
      fprintf(stderr,
              "gpuslice run: gpusliced (%s) refused the registration in group %s (HTTP %d: %s); "
              "running without it\n",
              endpoint->Describe().c_str(), request.group.c_str(), result.http_status,
              result.message.c_str());
      return;
    case limiter::RegistrationResult::Outcome::kUnavailable:
      return;  // no daemon answers: as without one
  }
}

[[noreturn]] void Run(RunOptions& o) {
  auto library = LimiterPath();
  if (!library.ok()) Fail(library.status().message());
  // The flags were checked while parsing; these cannot fail.
  if (!o.memory.empty()) Set(limiter::kEnvMemoryLimit, *MemoryLimitEnv(o.memory));
  if (!o.compute.empty()) Set(limiter::kEnvComputeLimit, *ComputeLimitEnv(o.compute));
  if (!o.group.empty()) Set(limiter::kEnvGroup, o.group);
  if (!o.shm_dir.empty()) Set("GPUSLICE_SHM_DIR", Absolute(o.shm_dir));
  const char* preload = getenv("LD_PRELOAD");
  Set("LD_PRELOAD", PrependPreload(preload != nullptr ? preload : "", *library));
  RegisterWithDaemon();
  std::vector<char*> args;
  for (auto& a : o.command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  Fail("cannot run " + o.command[0] + ": " + strerror(errno), kExitCannotRun);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto* o = ProcessLifetime<RunOptions>();  // CLI11 keeps pointers (process_lifetime.h)
  CLI::App* run = app.add_subcommand(
      "run", "Run a command under the limiter (libgpuslice.so preloaded) with these limits");
  run->add_option("--memory", o->memory,
                  "GPU memory limit of the group: one quantity for every device (4GiB), or "
                  "DEVICE=Q,… by device index or GPU UUID (0=4GiB,1=2GiB)")
      ->check(CheckedBy(MemoryLimitEnv, "QUANTITY"));
  run->add_option("--compute", o->compute,
                  "Compute limit, percent of the GPU's time (1-100): one for every device, or "
                  "DEVICE=P,…")
      ->check(CheckedBy(ComputeLimitEnv, "PERCENT"));
  run->add_option("--group", o->group,
                  "Group sharing one quota (default: $GPUSLICE_GROUP, else the limiter's: the "
                  "pod, or the process)")
      ->check(GroupIdCheck());
  AddShmDirOption(*run, o->shm_dir);
  run->add_option("command", o->command, "The command and its arguments (after --)")->required();
  run->callback([o] { Run(*o); });
}

}  // namespace gpuslice::cli
