// HttpServer: the daemon's HTTP/1.1 server (Boost.Beast, asynchronous) on a
// Unix socket and, optionally, TCP. It parses requests, identifies the caller
// (SO_PEERCRED on the Unix socket, a bearer token on TCP), authorises
// mutating routes, and hands requests to the ApiRouter; GET /v1/events is a
// server-sent event stream fed by the EventHub.
//
// Defences against slow or stalled clients: a deadline for the request header
// and one for the body, an idle timeout between keep-alive requests, a body
// size limit, a cap on open connections (excess ones get 503 and are closed),
// and a bound on the events queued for a slow SSE reader.
//
// Thread safety: Start and Stop from one thread; the server runs on its own
// I/O threads and hands blocking handlers to a worker pool.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/status.h"
#include "daemon/api/api.h"
#include "daemon/event_hub.h"
#include "daemon/http/http_util.h"
#include "gpuslice/paths.h"

namespace gpuslice::daemon {

struct ServerOptions {
  std::string socket_path = kDefaultDaemonSocket;
  mode_t socket_mode = 0660;
  std::optional<gid_t> socket_gid;  // group owner of the socket file
  AuthPolicy auth;
  std::string tcp_host;  // empty: no TCP listener
  uint16_t tcp_port = 0;
  std::set<std::string> tokens;  // bearer tokens accepted on TCP
  size_t max_connections = 1024;
  size_t max_body_bytes = size_t{64} * 1024;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive: between requests
  std::chrono::milliseconds sse_keepalive{15'000};  // comment lines on event streams
  size_t sse_max_queued = 256;                      // events; a slower reader is dropped
  int io_threads = 1;
  int worker_threads = 4;
  // How often the socket file is checked (zero: never). When it is gone (its
  // directory removed, the file unlinked) the server binds a new one at the
  // same path, creating the directory again (event=socket_recreated, and an
  // SSE event "socket_recreated"); when another live socket holds the path it
  // is left alone and the failure logged (event=socket_recreate_failed) and
  // counted, checked again each interval. Connections already open are kept.
  std::chrono::milliseconds socket_check_interval{1000};
};

struct SocketWatch {
  uint64_t recreated = 0;  // sockets bound again at the path
  uint64_t failures = 0;   // checks that found the path lost and could not bind it
};

class HttpServer {
 public:
  // REQUIRES: `router` and `hub` outlive the server.
  HttpServer(ServerOptions options, const ApiRouter& router, EventHub& hub);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listeners (a stale socket file is replaced; a live one is an
  // error) and starts serving. kUnavailable/kInvalidArgument naming the cause.
  Status Start();
  // Stops accepting, drops every connection, joins the threads. Idempotent.
  void Stop();

  size_t ConnectionCount() const;
  SocketWatch socket_watch() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::daemon
