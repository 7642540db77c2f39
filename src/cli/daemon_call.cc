#include "cli/daemon_call.h"

#include "cli/exit_codes.h"

namespace gpuslice::cli {

HttpReply CallDaemon(const DaemonClient& client, const std::string& method,
                     const std::string& target, const std::string& body) {
  auto r = client.Request(method, target, body);
  if (!r.ok()) Fail(r.status().message());
  return std::move(*r);
}

nlohmann::json DaemonJson(const HttpReply& r) {
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    Fail("the daemon answered HTTP " + std::to_string(r.status) + ": " + r.body);
  }
  return j;
}

std::string DaemonError(const HttpReply& r, const nlohmann::json& j) {
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    return j["error"].value("message", r.body);
  }
  return r.body;
}

}  // namespace gpuslice::cli
