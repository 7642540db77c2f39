// The CLI's one way to ask gpusliced: a request through UnixHttpClient on
// the socket `--socket` names (else $GPUSLICE_SOCKET, else the default path),
// the answer's JSON, and the daemon's error message. Used by every command
// that talks to the daemon (gpu, tenants, group, status).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/unix_http_client.h"

namespace gpuslice::cli {

// Sends the request; on no answer (no daemon, socket unreachable, timeout)
// prints the client's message, which names the socket, and exits
// kExitFailure.
HttpResponse CallDaemon(const std::string& socket_flag, const std::string& method,
                        const std::string& target, const std::string& body = "",
                        std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The answer's body as JSON; exits kExitFailure naming the HTTP status when
// it is not JSON.
nlohmann::json DaemonJson(const HttpResponse& r);

// The daemon's message for an error answer ({"error":{"message":…}}), else
// the body.
std::string DaemonError(const HttpResponse& r, const nlohmann::json& j);

}  // namespace gpuslice::cli
