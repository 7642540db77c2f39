// The command language of nvidia-cuda-mps-control (DESIGN.md section 5): one
// command per line on the control's stdin. Parsing is pure; the daemon
// (control.h) executes what this returns.
//
// Besides NVIDIA's commands, the simulated driver speaks one internal command
// on the same socket: `__client_connect <pid> <uid> <device> <percent|-> <pinned
// bytes|-> <priority> [<route|-> [<sm partition|->]]` (an MPS client
// connecting; see client.h). The route is "<server>" or "<server>/<namespace>"
// (MPS v3: which socket under the pipe directory the client used).
//
// MPS v3's module-verb commands (docs/sim-mps.md "MPS v3"): `server list`,
// `namespace list --server=<name>`, `client list --all`,
// `sm_partition list --server=<name>`, and at run time
// `namespace create|set --server=<name> --name=<ns>
// [--active-thread-percentage=<p>] [--pinned-memory-limit=<10G>]
// [--client-priority=<0|1>]` and `namespace delete --server=<name> --name=<ns>`
// (option names ours: NVIDIA documents these verbs without their options). A v2 daemon refuses them
// (that is how a caller probes the protocol); a v3 daemon speaks both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice::sim::mps {

enum class CommandKind {
  kGetServerList,
  kGetServerStatus,           // pid
  kStartServer,               // uid
  kGetClientList,             // pid
  kGetDeviceClientList,       // pid (0: every server)
  kSetDefaultThreadPercent,   // percent
  kGetDefaultThreadPercent,   //
  kSetThreadPercent,          // pid, percent
  kGetThreadPercent,          // pid
  kSetDefaultPinnedLimit,     // device, bytes
  kGetDefaultPinnedLimit,     // device
  kSetPinnedLimit,            // pid, device, bytes
  kGetPinnedLimit,            // pid, device
  kTerminateClient,           // pid (server), client_pid
  kPs,                        // pid (0: every client)
  kSetDefaultClientPriority,  // priority
  kGetDefaultClientPriority,  //
  kQuit,
  kClientConnect,    // internal: pid, uid, device, percent (0: unset), bytes (0: unset), priority,
                     // route, partition
  kV3ServerList,     // MPS v3 `server list`
  kV3NamespaceList,  // MPS v3 `namespace list --server=NAME`: server
  kV3ClientList,     // MPS v3 `client list --all`
  kV3SmPartitionList,  // MPS v3 `sm_partition list --server=NAME`: server
  kV3NamespaceCreate,  // server, ns, ns_limits
  kV3NamespaceSet,     // server, ns, ns_limits (fields given replace)
  kV3NamespaceDelete,  // server, ns
  // MPS v3 static SM partitions at run time (NVIDIA documents that they can
  // be made after start, not the verbs' options; these are ours):
  kV3SmPartitionCreate,  // `sm_partition create --server=S --device=UUID --name=N --chunks=K`
  kV3SmPartitionDelete,  // `sm_partition delete --server=S --device=UUID --name=N`
  kV3SmPartitionInfo,    // `sm_partition info --server=S`: per device, SMs, SMs per chunk, free
};

// Whether `kind` is one of MPS v3's module-verb commands.
inline bool IsV3(CommandKind kind) {
  return kind == CommandKind::kV3ServerList || kind == CommandKind::kV3NamespaceList ||
         kind == CommandKind::kV3ClientList || kind == CommandKind::kV3SmPartitionList ||
         kind == CommandKind::kV3NamespaceCreate || kind == CommandKind::kV3NamespaceSet ||
         kind == CommandKind::kV3NamespaceDelete || kind == CommandKind::kV3SmPartitionCreate ||
         kind == CommandKind::kV3SmPartitionDelete || kind == CommandKind::kV3SmPartitionInfo;
}

struct Command {
  CommandKind kind = CommandKind::kGetServerList;
  int32_t pid = 0;
  int32_t client_pid = 0;
  uint32_t uid = 0;
  int device = 0;
  double percent = 0;  // thread percentages: (0, 100]
  uint64_t bytes = 0;  // pinned memory limits
  uint32_t priority = 0;
  std::string route;        // kClientConnect: "" (none), "server" or "server/namespace"
  std::string partition;    // kClientConnect, sm_partition create/delete: a partition's name
  std::string device_uuid;  // sm_partition create/delete
  uint32_t chunks = 0;      // sm_partition create: > 0
  std::string server;       // v3 commands
  std::string ns;           // v3 namespace create/set/delete
  std::optional<double> ns_percent;
  std::optional<uint64_t> ns_bytes;
  std::optional<uint32_t> ns_priority;
};

// Parses one line (surrounding whitespace ignored). InvalidArgument with a
// message fit to print for an unknown command, a missing or extra argument,
// or an argument out of range.
StatusOr<Command> ParseCommand(std::string_view line);

// A pinned memory limit as MPS writes it: an integer followed by G or M
// ("10G", "900M"; case-insensitive). "0" (no unit) means no limit.
StatusOr<uint64_t> ParsePinnedLimit(std::string_view text);
// The inverse: "10G" when a whole number of GiB, else "<n>M" (rounded down to
// MiB); "0" for no limit.
std::string FormatPinnedLimit(uint64_t bytes);
// A thread percentage as MPS prints it: one decimal ("100.0", "33.5").
std::string FormatPercent(double percent);

}  // namespace gpuslice::sim::mps
