// `gpuslice limit set`: change a group's limits live by writing its segment
// (DESIGN.md section 3); its members apply them without a restart.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `limit set --group G [--device D] [--memory Q] [--compute P]
// [--shm-dir D]` under `app`. --device is a device index in the segment (as
// `gpuslice status` shows it) or a GPU UUID; without it every device of the
// group is set. `--memory unlimited` and `--compute 100` clear a limit. Prints
// one line per limit changed. Exit 1 if the group has no segment or no such
// device, 2 for bad flags.
void AddLimitCommands(CLI::App& app);

}  // namespace gpuslice::cli
