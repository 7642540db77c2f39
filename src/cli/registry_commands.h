// `gpuslice tenants` and `gpuslice group show|set|forget`: gpusliced's tenant
// registry from the command line (docs/api.md "Tenants and groups").
//
//   tenants [--group G] [--json]
//   group show [G] [--json]
//   group set G [--gpu I|UUID] [--memory Q|DEV=Q,...] [--compute|--limit P|DEV=P,...]
//               [--tier shared|mps|mig] [--request P] [--priority latency|batch] [--weight W]
//               [--json]
//   group pause G | group resume G [--json]
//   group forget G
//
// Every command goes to the daemon (--socket, else $GPUSLICE_SOCKET, else
// kDefaultDaemonSocket) through CallDaemon, on the client `connect` gives. Exit codes: 0
// success; 1 the daemon refused (its message is printed: e.g. only root or the admin group may set
// limits) or could not be reached (the message names the socket); 2 a bad command line; for `group
// set|pause|resume`, 3 the daemon refused the change for the node's state (409: the requests on a
// GPU would sum above 100 %, the message names the GPU and the total) and 4 it found a value
// invalid (400: a request above the group's compute limit).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

void AddRegistryCommands(CLI::App& app, const DaemonConnector& connect);

}  // namespace gpuslice::cli
