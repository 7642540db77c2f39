// gpuslice: the command-line interface (DESIGN.md section 1).
//
// Exit codes: 0 success, 1 the operation failed, 2 a bad command line (every
// CLI11 parse or validation error), 127 `run` could not execute its command;
// `run` and `sim run` otherwise end with the command's own status.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/daemon_client.h"
#include "cli/exit_codes.h"
#include "cli/gpu_commands.h"
#include "cli/limit_command.h"
#include "cli/mps_command.h"
#include "cli/registry_commands.h"
#include "cli/run_command.h"
#include "cli/sim_command.h"
#include "cli/status_command.h"
#include "cli/top/top_command.h"
#include "common/log.h"

int main(int argc, char** argv) {
  gpuslice::SetLogLevel(gpuslice::LogLevel::kWarn);
  // Anything a command throws ends the process with a message, not std::terminate.
  try {
    CLI::App app{"gpuslice: share NVIDIA GPUs between processes, containers and pods", "gpuslice"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "gpuslice 0.1.0");
    gpuslice::cli::AddRunCommand(app);
    const gpuslice::cli::DaemonConnector connect = gpuslice::cli::SocketConnector();
    gpuslice::cli::AddStatusCommand(app, connect);
    gpuslice::cli::AddLimitCommands(app);
    gpuslice::cli::AddSimCommand(app);
    gpuslice::cli::AddGpuCommands(app, connect);
    gpuslice::cli::AddRegistryCommands(app, connect);
    gpuslice::cli::AddTopCommand(app, connect);
    gpuslice::cli::AddMpsCommands(app, connect);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);  // prints help, the version or the error
      return code == 0 ? 0 : gpuslice::cli::kExitUsage;
    }
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuslice: %s\n", e.what());
    return 1;
  }
}
