// `gpuslice top`: a live view of the node's GPUs and groups (docs/cli.md
// "gpuslice top"), from gpusliced's event stream when it answers, else from the group
// segments and NVML (and back to the daemon when it returns). Full screen (ncurses) on a terminal;
// one plain table per interval on a dumb terminal, when stdout is not a terminal, or with --plain /
// --once.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

// Registers `top` under `app`.
void AddTopCommand(CLI::App& app, const DaemonConnector& connect);

}  // namespace gpuslice::cli
