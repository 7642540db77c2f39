// `gpuslice tenants` and `gpuslice group show|set|forget`: gpusliced's tenant
// registry from the command line (docs/daemon.md "Tenants and groups").
//
//   tenants [--group G] [--json]
//   group show [G] [--json]
//   group set G [--memory Q|DEV=Q,...] [--compute P|DEV=P,...] [--tier shared|mps] [--json]
//   group forget G
//
// Every command goes to the daemon (--socket, else $GPUSLICE_SOCKET, else
// /run/gpuslice/gpusliced.sock) through CallDaemon. Exit codes: 0 success;
// 1 the daemon refused (its message is printed: e.g. only root or the admin
// group may set limits) or could not be reached (the message names the
// socket); 2 a bad command line.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

void AddRegistryCommands(CLI::App& app);

}  // namespace gpuslice::cli
