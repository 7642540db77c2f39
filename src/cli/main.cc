// gpuslice: the command-line interface (DESIGN.md section 1).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/sim_commands.h"

int main(int argc, char** argv) {
  // Anything a command throws ends the process with a message, not std::terminate.
  try {
    CLI::App app{"gpuslice: share NVIDIA GPUs between processes, containers and pods", "gpuslice"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "gpuslice 0.1.0");
    gpuslice::cli::AddSimCommands(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuslice: %s\n", e.what());
    return 1;
  }
}
