// ProcessIdentity: how a process of the simulation is named in the shared
// records, the way the real driver names it: by its HOST pid.
//
// NVIDIA's kernel module sees every process by its pid in the initial pid
// namespace, so NVML reports host pids even for processes in containers
// (DESIGN.md section 2). A simulated process has no kernel module; it learns
// its host pid from the simulator's node helper (sim/core/node_helper.h), a
// small server outside any container: the kernel translates the SO_PEERCRED
// pid of a Unix-socket peer into the helper's pid namespace, so the helper
// answers with the caller's pid as the node sees it. Without a helper the
// process falls back to getpid() (documented in docs/sim.md).
//
// A record's pid is meaningful only in the pid namespace it was learned in;
// `pid_ns` names that namespace (the inode of /proc/<pid>/ns/pid). Liveness of
// a record can be judged only by a process whose /proc shows that namespace
// (ProcViewNamespace): anyone else leaves the record alone.
//
// Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpuslice::sim {

struct ProcessIdentity {
  int32_t pid = 0;          // host pid, or getpid() when host_known is false
  uint64_t pid_ns = 0;      // pid namespace `pid` is valid in; 0 = unknown
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (the same in every pid namespace)
  int32_t local_pid = 0;    // getpid(): the pid in the process's own namespace
  bool host_known = false;  // learned from the node helper
};

// The inode of the pid namespace /proc/self/ns/pid names; 0 if unreadable.
uint64_t OwnPidNamespace();

// The NSpid line of /proc/self/status: this process's pid in every namespace
// from the one /proc was mounted for down to its own. Empty if unreadable.
std::vector<int32_t> OwnNsPids();

// The process's start time from /proc/self/stat (valid whatever namespace
// /proc belongs to); 0 if unreadable.
uint64_t OwnStartTime();

// The process's short command name (/proc/self/comm) into `out`
// (NUL-terminated, truncated to `size`); empty if unreadable.
void OwnProcessName(char* out, size_t size);

// The node helper's socket for the simulation whose state file is
// `state_path`: GPUSLICE_SIM_NODE_SOCKET if set, else `<state_path>.node`.
std::string NodeSocketPath(const std::string& state_path);

// Asks the node helper at `socket_path` (see node_helper.h); falls back to
// getpid() and the own namespace when there is none or it cannot name us.
ProcessIdentity LearnProcessIdentity(const std::string& socket_path);

// The pid namespace whose pids this process's /proc shows, given its
// identity: its own namespace when /proc was mounted for it (NSpid has one
// entry), the helper's when /proc shows this process under its host pid;
// 0 when neither can be told.
uint64_t ProcViewNamespace(const ProcessIdentity& self);

}  // namespace gpuslice::sim
