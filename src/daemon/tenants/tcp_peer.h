// Whether a process holds a TCP connection: how gpusliced proves the pid a
// registration over TCP claims (docs/api.md, "Tenants and groups"), where no
// SO_PEERCRED names the caller. The claimed process's own network namespace
// (/proc/<pid>/net/tcp and tcp6, as the kernel lists the sockets of that
// namespace) must hold a socket whose local end is the connection's client
// end and whose remote end is the daemon's, and one of the process's file
// descriptors (/proc/<pid>/fd) must be that socket (its inode). A token
// proves that the caller may register; this proves which process it is.
//
// Pure over `proc_root` (tests give a fake tree). Thread-safe.
#pragma once

#include <sys/types.h>

#include <string>

#include "daemon/api/api.h"

namespace gpuslice::daemon {

// Whether process `pid` holds the TCP connection from `client` to `server`
// (see above). False when anything cannot be read (the process is gone, its
// /proc is not ours to read).
bool HoldsTcpConnection(const std::string& proc_root, pid_t pid, const TcpEndpoint& client,
                        const TcpEndpoint& server);

}  // namespace gpuslice::daemon
