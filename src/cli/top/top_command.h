// `gpuslice top`: a live view of the node's GPUs and groups (README "gpuslice
// top"). Full screen (ncurses) on a terminal; one plain table per interval on
// a dumb terminal, when stdout is not a terminal, or with --plain / --once.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `top` under `app`.
void AddTopCommand(CLI::App& app);

}  // namespace gpuslice::cli
