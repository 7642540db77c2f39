// Reading an HTTP/1.1 response, the one parser of gpusliced's clients: the
// limiter's registration (limiter/daemon_client.h) and the CLI
// (cli/unix_http_client.h). Bounded: a client given bytes by a peer it does
// not trust (the limiter runs inside the host program) reads at most
// `max_header_bytes` of headers and `max_body_bytes` of body, and every
// refusal is one line naming what was wrong. Fuzzed
// (tests/fuzz/registration_reply_fuzz.cc).
//
// What it reads: a status line "HTTP/1.x NNN[ reason]", header lines (names
// case-insensitive, values trimmed; lines without a colon skipped), and a
// body framed by Content-Length or, without one, by the end of the
// connection. Chunked transfer encoding is refused (gpusliced never sends
// it; a client that cannot frame a body must not guess).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice {

struct HttpReply {
  int status = 0;                              // 100..599
  std::map<std::string, std::string> headers;  // names lower-cased; a repeated one: the last
  std::string body;
};

struct HttpReplyLimits {
  size_t max_header_bytes = size_t{64} * 1024;  // status line and headers
  size_t max_body_bytes = size_t{1024} * 1024;
  bool head = false;  // the answer to a HEAD: no body, whatever Content-Length says
};

// Reads a response from the bytes received so far (`at_eof`: the peer
// closed). Returns the reply once it is complete, nullopt while more bytes
// are needed, or InvalidArgument when the bytes are not a response this
// parser reads (a malformed status line or Content-Length, a transfer
// encoding, headers or a body over the limits, or the peer closing before
// the end). Bytes after a Content-Length body are not the reply's.
StatusOr<std::optional<HttpReply>> ParseHttpReply(std::string_view raw, bool at_eof,
                                                  const HttpReplyLimits& limits = {});

}  // namespace gpuslice
