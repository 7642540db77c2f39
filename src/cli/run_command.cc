#include "cli/run_command.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/flag_checks.h"
#include "cli/limit_flags.h"
#include "cli/paths.h"
#include "cli/preload_env.h"
#include "limiter/core/limit_config.h"

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
  std::vector<char*> args;
  for (auto& a : o.command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  Fail("cannot run " + o.command[0] + ": " + strerror(errno), kExitCannotRun);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto* o = new RunOptions;  // lives as long as the process: CLI11 keeps pointers
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
  run->add_option("--shm-dir", o->shm_dir,
                  "Directory of the group segments (default: $GPUSLICE_SHM_DIR or "
                  "/dev/shm/gpuslice)");
  run->add_option("command", o->command, "The command and its arguments (after --)")->required();
  run->callback([o] { Run(*o); });
}

}  // namespace gpuslice::cli
