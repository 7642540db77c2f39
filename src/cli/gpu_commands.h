// `gpuslice gpu …`: GPU listing and settings through the daemon's API
// (docs/api.md, docs/cli.md). Talks to gpusliced through the client `connect` gives
// for the command's --socket (default: GPUSLICE_SOCKET).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

// Registers `gpu list | set-power-limit | lock-clocks | reset-clocks |
// lock-memory-clocks | reset-memory-clocks | persistence | compute-mode |
// energy | release | leases` under `app`.
void AddGpuCommands(CLI::App& app, const DaemonConnector& connect);

}  // namespace gpuslice::cli
