// The limiter's registration client (DESIGN.md sections 4 and 5b): it tells
// gpusliced that this process is a tenant of a group, over the daemon's Unix
// socket, and reads back the limits the daemon grants (docs/daemon.md,
// "Tenants and groups": POST /v1/tenants).
//
// Split so that the formats are tested without a socket: RegistrationBody /
// RegistrationHttpRequest build the request, ParseHttpReply and
// InterpretReply read the answer, and Register does the exchange with a
// deadline that covers connect, send and receive together, so a daemon that
// hangs or is gone costs a bounded, short time.
//
// The daemon identifies the caller itself (SO_PEERCRED): the request names no
// pid. Hints (pod name, namespace, container) are claims it checks.
//
// No exception escapes a function declared here (allocation failure
// included: it becomes kUnavailable or an error Status). Thread-safe: no
// shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "limiter/core/limit_config.h"

namespace gpuslice::limiter {

// Where gpusliced listens unless GPUSLICE_SOCKET says otherwise.
inline constexpr std::string_view kDefaultDaemonSocket = "/run/gpuslice/gpusliced.sock";
// The whole exchange (connect + send + receive) of one registration.
inline constexpr std::chrono::milliseconds kRegistrationDeadline{250};

// What a limiter tells the daemon about its process.
struct RegistrationRequest {
  std::string group;
  std::vector<std::string> devices;  // the UUIDs of the GPUs the limiter attached
  // The process's own limits (from the environment): they can only lower
  // what the daemon grants. The API takes one value for all the tenant's
  // devices, so a limit is sent only when it is the same on every device
  // (see RequestLimits).
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> compute_percent;
  // Hints (POD_NAME, POD_NAMESPACE, CONTAINER_NAME); empty: not sent.
  std::string pod_name;
  std::string pod_namespace;
  std::string container_name;
};

// Fills `request`'s limits from per-device limits: a dimension is set only
// when every device has the same value for it (a limit on some devices only,
// or different per device, cannot be said in one value without lowering
// another device; the limiter's own segment limits still apply to them).
void RequestLimits(std::span<const DeviceLimits> devices, RegistrationRequest& request);

// The JSON body of POST /v1/tenants: {"group", "devices", "limits"?, "hints"?}.
// Strings that are not valid UTF-8 are sent with U+FFFD in place of bad bytes.
StatusOr<std::string> RegistrationBody(const RegistrationRequest& request);

// The whole HTTP/1.1 request (POST /v1/tenants, Content-Length,
// Connection: close).
StatusOr<std::string> RegistrationHttpRequest(const RegistrationRequest& request);

struct HttpReply {
  int status = 0;
  std::string body;
};

// Reads an HTTP/1.1 response from the bytes received so far (`at_eof`: the
// peer closed). Returns the reply once complete (body by Content-Length, or
// up to the end without one), nullopt if more bytes are needed, or
// InvalidArgument if the bytes are not a response this client understands
// (malformed status line or Content-Length, chunked encoding, a header block
// over 64 KiB, a body over 1 MiB, or the peer closing before the end).
StatusOr<std::optional<HttpReply>> ParseHttpReply(std::string_view raw, bool at_eof);

// The limit the daemon grants on one GPU (nullopt: none).
struct EffectiveLimit {
  std::string uuid;
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> compute_percent;
};

struct RegistrationResult {
  enum class Outcome {
    kRegistered,   // the daemon knows the process as a tenant of the group
    kRefused,      // the daemon said no (4xx): retrying the same daemon will not help
    kUnavailable,  // no daemon, no answer in time, or a 5xx: retry later
  };
  Outcome outcome = Outcome::kUnavailable;
  int http_status = 0;  // 0: no reply
  // The daemon's message when refused (its error.message, or the body), what
  // failed when unavailable; empty when registered.
  std::string message;
  std::vector<EffectiveLimit> effective_limits;  // from a 201
};

// What a reply means for a registration of `group`:
//   201 → kRegistered, with effective_limits from {"effective_limits": {UUID:
//         {"memory_bytes", "compute_percent"}}} (entries it cannot read are
//         skipped);
//   409 → kRegistered (the daemon already holds this process, e.g. re-adopted
//         after a restart), unless the message says the process is registered
//         in another group (then kRefused);
//   other 4xx → kRefused; anything else → kUnavailable.
RegistrationResult InterpretReply(const HttpReply& reply, std::string_view group);

// Sends `request` (a whole HTTP request) to the Unix socket at `path` and
// reads the reply, all within `deadline`. Unavailable when the socket cannot
// be reached, the deadline passes, or the reply is malformed.
StatusOr<HttpReply> ExchangeOverUnixSocket(const std::string& path, std::string_view request,
                                           std::chrono::milliseconds deadline);

// Registers with the daemon at `socket_path` within `deadline`.
RegistrationResult Register(const std::string& socket_path, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline = kRegistrationDeadline);

const char* OutcomeName(RegistrationResult::Outcome outcome);

}  // namespace gpuslice::limiter
