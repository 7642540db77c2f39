// `gpuslice status`: the groups on this node as their segments show them
// (DESIGN.md sections 1, 3), read directly from shared memory, merged with
// gpusliced's registry when the daemon answers within 300 ms (MergeRegistry:
// who each member is, the tier, tenants registered but not attached).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

// Registers `status [--shm-dir D] [--group G] [--json] [--all] [--gc
// [--gc-grace-s S]] [--no-daemon] [--socket S]` under `app`. Reclaims dead members' memory first
// (ReapDead), so what it shows is live. Shows groups a process is attached to;
// `--all` (or `--group`) idle ones too; `--gc` first removes the segments of
// groups idle for the grace period. Other users' groups (segments this user
// may not open) are counted, not shown; any other segment that cannot be
// opened is a warning on stderr naming its file; the others are still shown.
// A group with registered tenants is shown even when no process is attached.
// A daemon that does not answer is a line of the output, never an error
// (--no-daemon: not asked). Exit 1 only if --group names a group with neither
// a segment (this user may open) nor a registry record.
void AddStatusCommand(CLI::App& app, const DaemonConnector& connect);

}  // namespace gpuslice::cli
