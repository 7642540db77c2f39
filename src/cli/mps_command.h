// `gpuslice mps ...`: the daemon's MPS manager from the command line
// (docs/mps.md). Every subcommand is one or two requests to gpusliced's API
// through the DaemonClient (cli/daemon_client.h) for its --socket, or one
// given, so argument handling and output are unit-tested on a
// FakeDaemonTransport.
//
//   mps status    [--json]
//   mps acquire   --tenant T --gpus G [--threads P] [--pinned-memory Q] [--priority 0|1]
//                 [--json | --env]
//   mps release   --tenant T [--json]
//   mps set       --tenant T [--threads P] [--pinned-memory Q] [--priority 0|1] [--json | --env]
//   mps terminate --gpu G --pid PID [--json]
//
// Exit codes: 0 success; 1 the daemon refused (its error message is printed)
// or could not be reached; 2 a bad command line.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

#include "cli/daemon_client.h"
#include "common/status.h"

namespace gpuslice::cli {

// Where the mps commands write, and how they end with a non-zero code.
struct MpsCliIo {
  std::ostream* out;
  std::ostream* err;
  // Called with the exit code when a command fails; the default exits the
  // process. Tests record it instead (the command then returns).
  std::function<void(int)> exit;
};

// Registers `mps` and its subcommands under `app`, with a --socket flag
// (a socket path or tcp:HOST:PORT) that picks the client `connect` gives;
// writes to stdout/stderr.
void AddMpsCommands(CLI::App& app, const DaemonConnector& connect);
// The same with explicit output streams and exit (for tests).
void AddMpsCommands(CLI::App& app, const DaemonConnector& connect, MpsCliIo io);
// With one fixed client and no --socket flag (for tests).
void AddMpsCommands(CLI::App& app, DaemonClient client, MpsCliIo io);

}  // namespace gpuslice::cli
