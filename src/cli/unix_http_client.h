// HTTP/1.1 to gpusliced over its Unix socket or its TCP listener: a small
// blocking client for the CLI (through DaemonClient, cli/daemon_client.h) and
// the tests. One request per connection (Connection: close); every step has a
// deadline. Also the event stream (GET /v1/events): the body's bytes handed
// over as they come.
//
// Thread-compatible: one client per thread, or external locking.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/daemon_address.h"
#include "common/http_reply.h"
#include "common/status.h"

namespace gpuslice::cli {

// $GPUSLICE_SOCKET if set and non-empty, else kDefaultDaemonSocket (gpuslice/paths.h);
// `flag` wins when non-empty.
std::string DaemonSocket(const std::string& flag);

// `endpoint` ("tcp:HOST:PORT" or a socket path; DaemonSocket's rules when
// empty) as an address; the token of a TCP address is $GPUSLICE_DAEMON_TOKEN.
// InvalidArgument for a malformed tcp: address.
StatusOr<DaemonAddress> ParseDaemonAddress(const std::string& endpoint);

// The largest reply body the CLI reads (the node's whole tenant list fits
// many times over).
inline constexpr size_t kMaxDaemonReplyBytes = size_t{64} << 20;

// One exchange: `method` `target` with an optional JSON body; the whole
// response (a HEAD's without a body, whatever its Content-Length says), read
// by ParseHttpReply (common/http_reply.h) with a body of at most
// kMaxDaemonReplyBytes. kUnavailable naming the daemon when it cannot be
// reached or does not answer within `timeout`; kInternal for a response it
// cannot read.
StatusOr<HttpReply> HttpExchange(const DaemonAddress& address, const std::string& method,
                                 const std::string& target, const std::string& body,
                                 std::chrono::milliseconds timeout);

// GET `target` as an event stream: connects and reads the headers within
// `timeout`, then hands the body's bytes to `on_bytes` as they arrive, and ""
// every `tick` while none do, until `on_bytes` returns false (OK). kUnavailable
// when the daemon cannot be reached, answers other than 200, closes the
// stream, or sends nothing for `idle`.
Status HttpStream(const DaemonAddress& address, const std::string& target,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds tick,
                  std::chrono::milliseconds idle,
                  const std::function<bool(std::string_view)>& on_bytes);

// HttpExchange on a Unix socket (kept for the tests and simple callers).
class UnixHttpClient {
 public:
  explicit UnixHttpClient(std::string socket_path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : socket_path_(std::move(socket_path)), timeout_(timeout) {}

  StatusOr<HttpReply> Request(const std::string& method, const std::string& target,
                              const std::string& body = "") const;

 private:
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
};

}  // namespace gpuslice::cli
