// Where a client reaches gpusliced (docs/api.md "Transport"): its Unix
// socket, or its TCP listener with a bearer token. The one address type of
// the daemon's clients: the limiter's registration reads it from the
// environment (limiter/daemon_client.h), the CLI from --socket
// (cli/unix_http_client.h).
#pragma once

#include <cstdint>
#include <string>

#include "gpuslice/paths.h"

namespace gpuslice {

struct DaemonAddress {
  std::string unix_path = std::string(kDefaultDaemonSocket);
  std::string host;   // a numeric IPv4 or IPv6 address; empty: the Unix socket
  uint16_t port = 0;  // with `host`
  std::string token;  // sent as "Authorization: Bearer <token>" over TCP when not empty

  bool tcp() const { return !host.empty(); }
  // "unix:<path>" or "tcp:<host>:<port>" (an IPv6 host in brackets), for logs.
  std::string Describe() const;
  // "gpusliced at <path>" or "gpusliced at tcp:<host>:<port>", for messages.
  std::string Where() const;
};

}  // namespace gpuslice
