// `gpuslice run`: start a command under the limiter (DESIGN.md sections 1, 2).
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `run [--memory Q] [--compute P] [--group G] [--shm-dir D] -- CMD…`
// under `app`. The command replaces gpuslice (execvp: same pid, its exit status
// is the command's) with libgpuslice.so first in LD_PRELOAD and the limiter's
// variables set from the flags; every other variable, LD_LIBRARY_PATH included,
// is passed on unchanged. When a daemon answers (GPUSLICE_SOCKET, or
// HYPERVISOR_IP/HYPERVISOR_PORT), the process registers itself before the
// exec, as the command's tenant record, and the environment the daemon
// returns (an `mps` group's client environment) is set for the command.
// Exit 2 for a bad flag (or a malformed daemon address or schedule variable),
// 1 if the limiter is missing, 127 if CMD cannot be executed.
void AddRunCommand(CLI::App& app);

}  // namespace gpuslice::cli
