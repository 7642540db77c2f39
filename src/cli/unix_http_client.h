// UnixHttpClient: a small blocking HTTP/1.1 client over a Unix socket, for
// the CLI's daemon commands (gpu, mps, ...) and the tests. One request per
// connection (Connection: close); every step has a deadline.
//
// Thread-compatible: one client per thread, or external locking.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "common/status.h"

namespace gpuslice::cli {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// $GPUSLICE_SOCKET if set and non-empty, else /run/gpuslice/gpusliced.sock;
// `flag` wins when non-empty.
std::string DaemonSocket(const std::string& flag);

class UnixHttpClient {
 public:
  explicit UnixHttpClient(std::string socket_path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : socket_path_(std::move(socket_path)), timeout_(timeout) {}

  // Sends `method` `target` with an optional JSON body; the whole response.
  // kUnavailable naming the socket when the daemon cannot be reached or does
  // not answer in time; kInternal for a malformed response.
  StatusOr<HttpResponse> Request(const std::string& method, const std::string& target,
                                 const std::string& body = "") const;

 private:
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
};

// Parses a complete HTTP/1.1 response (status line, headers, body framed by
// Content-Length or by the end of the data). Exposed for tests.
StatusOr<HttpResponse> ParseHttpResponse(const std::string& raw);

}  // namespace gpuslice::cli
