// The limiter's registration client (DESIGN.md sections 4 and 5b): it tells
// gpusliced that this process is a tenant of a group, over the daemon's Unix
// socket (or its TCP listener, with a token), and reads back the limits the
// daemon grants and the environment it gives (docs/api.md, "Tenants and
// groups": POST /v1/tenants). `gpuslice run` uses it too.
//
// Split so that the formats are tested without a socket: RegistrationBody /
// RegistrationHttpRequest build the request, ParseHttpReply
// (common/http_reply.h) and InterpretReply read the answer, and Register does the exchange with a
// deadline that covers connect, send and receive together, so a daemon that
// hangs or is gone costs a bounded, short time.
//
// On the Unix socket the daemon identifies the caller itself (SO_PEERCRED):
// the request names no pid. Over TCP it names its host pid, which the daemon
// proves by the connection (the pid must hold its socket). Hints (pod name, namespace, container)
// are claims it checks.
//
// No exception escapes a function declared here (allocation failure
// included: it becomes kUnavailable or an error Status). Thread-safe: no
// shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/daemon_address.h"
#include "common/http_reply.h"
#include "common/status.h"
#include "gpuslice/paths.h"
#include "limiter/core/limit_config.h"

namespace gpuslice::limiter {

// The whole exchange (connect + send + receive) of one registration.
inline constexpr std::chrono::milliseconds kRegistrationDeadline{250};

// Variables read by DaemonAddressFromEnv (and kEnvDaemonSocket, gpuslice/paths.h).
inline constexpr std::string_view kEnvHypervisorIp = "HYPERVISOR_IP";
inline constexpr std::string_view kEnvHypervisorPort = "HYPERVISOR_PORT";
inline constexpr std::string_view kEnvDaemonToken = "GPUSLICE_DAEMON_TOKEN";

// The daemon address the environment names: HYPERVISOR_IP and HYPERVISOR_PORT
// (the original system's names; a numeric address, a port 1-65535) with the
// token in GPUSLICE_DAEMON_TOKEN, else the Unix socket GPUSLICE_SOCKET (else
// the default). InvalidArgument naming the variable for a malformed address
// or port, or one of the two set without the other.
StatusOr<DaemonAddress> DaemonAddressFromEnv(const EnvLookup& env);

// What a limiter tells the daemon about its process.
struct RegistrationRequest {
  std::string group;
  std::vector<std::string> devices;  // the UUIDs of the GPUs the limiter attached
  // The process's own limits (from the environment), parallel to `devices`,
  // or one entry for every GPU when `devices` is empty: they can only lower
  // what the daemon grants. Sent as one limit for every GPU when all entries
  // are the same, else keyed by each device's UUID (devices without a limit
  // left out). Empty or all unlimited: not sent.
  std::vector<DeviceLimits> limits;
  // What the process asks of the scheduler (GPUSLICE_COMPUTE_REQUEST, ...);
  // sent only when set, so a daemon that does not know the field is not sent it.
  std::optional<ScheduleRequest> schedule;
  // The host pid to register, sent when > 0: over TCP the daemon cannot see
  // the caller's (on the Unix socket it takes SO_PEERCRED's and this is 0).
  int32_t pid = 0;
  // Hints (POD_NAME, POD_NAMESPACE, CONTAINER_NAME); empty: not sent.
  std::string pod_name;
  std::string pod_namespace;
  std::string container_name;
};

// The JSON body of POST /v1/tenants: {"group", "devices", "limits"?,
// "schedule"?, "pid"?, "hints"?}. Strings that are not valid UTF-8 are sent
// with U+FFFD in place of bad bytes.
StatusOr<std::string> RegistrationBody(const RegistrationRequest& request);

// The whole HTTP/1.1 request (POST /v1/tenants, Content-Length,
// Connection: close, and the bearer `token` when not empty).
StatusOr<std::string> RegistrationHttpRequest(const RegistrationRequest& request,
                                              std::string_view token = "");

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
  // From a 201: the environment the process's CUDA work should start with
  // (an MPS client's, for a group of tier mps; empty otherwise), and why the
  // daemon did not apply the requested schedule (empty: applied, or none).
  std::map<std::string, std::string> env;
  std::string schedule_refused;
};

// What a reply means for a registration of `group`:
//   201 → kRegistered, with effective_limits from {"effective_limits": {UUID:
//         {"memory_bytes", "compute_percent"}}} (entries it cannot read are
//         skipped), env from {"env": {NAME: VALUE}} (string values only) and
//         schedule_refused from {"schedule_refused": "..."};
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

// The same over TCP to `host` (a numeric IPv4 or IPv6 address) and `port`.
StatusOr<HttpReply> ExchangeOverTcp(const std::string& host, uint16_t port,
                                    std::string_view request, std::chrono::milliseconds deadline);

// Registers with the daemon at `endpoint` within `deadline`. A daemon that
// refuses the request's schedule as an unknown field (one without the
// scheduler) is asked again without it (a second exchange, same deadline);
// the result then says so in schedule_refused.
RegistrationResult Register(const DaemonAddress& endpoint, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline = kRegistrationDeadline);
// Registers over the Unix socket at `socket_path`.
RegistrationResult Register(const std::string& socket_path, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline = kRegistrationDeadline);

const char* OutcomeName(RegistrationResult::Outcome outcome);

}  // namespace gpuslice::limiter
