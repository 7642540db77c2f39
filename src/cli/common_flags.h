// The flags many commands share, each defined here once: where the daemon
// listens and where the group segments are. Either value is kept as typed
// ("" when the flag is not given); DaemonSocket (cli/unix_http_client.h) and
// ShmDir (cli/paths.h) apply the environment and the defaults.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "gpuslice/paths.h"

namespace gpuslice::cli {

// --socket: the daemon's Unix socket, or tcp:HOST:PORT.
inline CLI::Option* AddSocketOption(CLI::App& cmd, std::string& socket) {
  return cmd.add_option("--socket", socket,
                        std::string("Daemon socket, or tcp:HOST:PORT (default: $") +
                            kEnvDaemonSocket + " or " + kDefaultDaemonSocket + ")");
}

// --shm-dir: the directory of the group segments.
inline CLI::Option* AddShmDirOption(CLI::App& cmd, std::string& shm_dir) {
  return cmd.add_option("--shm-dir", shm_dir,
                        std::string("Directory of the group segments (default: $") + kEnvShmDir +
                            " or " + kDefaultGroupSegmentDir + ")");
}

}  // namespace gpuslice::cli
