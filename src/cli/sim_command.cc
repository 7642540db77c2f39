#include "cli/sim_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/paths.h"

namespace gpuslice::cli {

void AddSimCommand(CLI::App& app) {
  CLI::App* sim = app.add_subcommand(
      "sim", "The simulated GPU: run programs on it, read its ground truth (gpuslice sim --help)");
  // Every argument, --help included, is the simulator tool's.
  sim->prefix_command();
  sim->allow_extras();
  sim->set_help_flag();
  sim->callback([sim] {
    auto dir = SimDir();
    if (!dir.ok()) Fail(dir.status().message());
    const std::string tool = *dir + "/bin/gpuslice-sim";
    std::vector<std::string> args = {tool};
    const std::vector<std::string> rest = sim->remaining();
    args.insert(args.end(), rest.begin(), rest.end());
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(tool.c_str(), argv.data());
    Fail("cannot run " + tool + ": " + strerror(errno), kExitCannotRun);
  });
}

}  // namespace gpuslice::cli
