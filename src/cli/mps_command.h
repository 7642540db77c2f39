// `gpuslice mps ...`: the daemon's MPS manager from the command line
// (docs/mps.md). Every subcommand is one or two requests to gpusliced's API
// through the DaemonClient (cli/daemon_client.h) for its --socket, or an
// injected HttpCall, so argument handling and output are unit-tested with a
// fake.
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

// One HTTP exchange with gpusliced: the reply's status and body. An error
// Status only when no reply came (daemon not running, socket unreachable).
struct HttpReply {
  int status = 0;
  std::string body;
};
using HttpCall = std::function<StatusOr<HttpReply>(std::string_view method, std::string_view path,
                                                   std::string_view body)>;

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
// With one fixed exchange and no --socket flag (for tests).
void AddMpsCommands(CLI::App& app, HttpCall call, MpsCliIo io);

}  // namespace gpuslice::cli
