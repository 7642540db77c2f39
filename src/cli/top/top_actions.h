// What `gpuslice top` does for a key that changes a group (KeyAction):
// pause or resume it (POST /v1/groups/{id}/pause|resume) or set its compute
// limit (GET the group's limits, PUT them back with the new compute_percent
// for every GPU, as `gpuslice group set --compute` does), through the
// daemon. The result is one line for the status bar; a refusal (403 not an
// admin, 404 no such endpoint on an older daemon, 409, ...) is that line
// with the daemon's message, never an exit.
#pragma once

#include <string>

#include "cli/top/top_keys.h"
#include "cli/top/top_source.h"

namespace gpuslice::cli::top {

// Performs `a` through `client` (null: --no-daemon); `daemon_answering`: the
// last sample came from the daemon (if not, nothing is sent).
std::string Perform(const KeyAction& a, const DaemonClient* client, bool daemon_answering);

}  // namespace gpuslice::cli::top
