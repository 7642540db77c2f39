// How the CLI's one-shot commands (gpu, tenants, group) ask gpusliced: a
// request through a DaemonClient (cli/daemon_client.h), the answer's JSON,
// and the daemon's error message; no answer ends the command.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

// How long one request of a command may take.
inline constexpr std::chrono::milliseconds kCommandTimeout{30'000};

// Sends the request; on no answer (no daemon, socket unreachable, timeout)
// prints the client's message, which names the daemon, and exits
// kExitFailure.
HttpReply CallDaemon(const DaemonClient& client, const std::string& method,
                     const std::string& target, const std::string& body = "");

// The answer's body as JSON; exits kExitFailure naming the HTTP status when
// it is not JSON.
nlohmann::json DaemonJson(const HttpReply& r);

// The daemon's message for an error answer ({"error":{"message":…}}), else
// the body.
std::string DaemonError(const HttpReply& r, const nlohmann::json& j);

}  // namespace gpuslice::cli
