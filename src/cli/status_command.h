// `gpuslice status`: the groups on this node as their segments show them
// (DESIGN.md sections 1, 3), read directly from shared memory.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `status [--shm-dir D] [--group G] [--json]` under `app`. Reclaims
// dead members' memory first (ReapDead), so what it shows is live. A segment
// that cannot be opened is a warning on stderr naming its file; the others are
// still shown. Exit 1 only if --group names a group without a segment.
void AddStatusCommand(CLI::App& app);

}  // namespace gpuslice::cli
