// `gpuslice gpu …`: GPU listing and settings through the daemon's API
// (docs/daemon.md). Talks to gpusliced over its Unix socket (--socket or
// GPUSLICE_SOCKET).
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `gpu list | set-power-limit | lock-clocks | reset-clocks |
// lock-memory-clocks | reset-memory-clocks | persistence | compute-mode |
// energy | release | leases` under `app`.
void AddGpuCommands(CLI::App& app);

}  // namespace gpuslice::cli
