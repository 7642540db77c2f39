#include "cli/top/top_actions.h"

#include <nlohmann/json.hpp>

#include "cli/registry_view.h"

namespace gpuslice::cli::top {
namespace {

using json = nlohmann::json;

// "pause train: HTTP 404: no such route" from a refused answer.
std::string Refusal(const std::string& what, const HttpReply& r) {
  return what + ": HTTP " + std::to_string(r.status) + ": " + DaemonErrorMessage(r);
}

}  // namespace

std::string Perform(const KeyAction& a, const DaemonClient* client, bool daemon_answering) {
  const std::string id = a.group;
  std::string what;
  switch (a.kind) {
    case KeyAction::Kind::kPause:
      what = "pause " + id;
      break;
    case KeyAction::Kind::kResume:
      what = "resume " + id;
      break;
    case KeyAction::Kind::kSetLimit:
      what = "compute limit of " + id + " to " + std::to_string(a.percent) + "%";
      break;
    default:
      return "";
  }
  if (client == nullptr) return what + ": needs gpusliced (--no-daemon is set)";
  if (!daemon_answering) return what + ": needs gpusliced, which is not answering";
  if (a.kind == KeyAction::Kind::kSetLimit) {
    // PUT replaces the group's limits: keep the others (memory, per-GPU).
    auto current = client->Request("GET", "/v1/groups/" + id);
    if (!current.ok()) return what + ": " + current.status().message();
    json limits = json::object();
    if (current->status == 200) {
      const json g = json::parse(current->body, nullptr, /*allow_exceptions=*/false);
      if (g.is_object() && g.contains("limits")) limits = g["limits"];
    }
    GroupSetFlags flags;
    flags.compute = {{"", static_cast<uint32_t>(a.percent)}};
    auto body = GroupPutBody(limits, flags, {});
    if (!body.ok()) return what + ": " + body.status().message();
    auto r = client->Request("PUT", "/v1/groups/" + id, body->dump());
    if (!r.ok()) return what + ": " + r.status().message();
    if (r->status / 100 != 2) return Refusal(what, *r);
    return what + ": done";
  }
  const std::string verb = a.kind == KeyAction::Kind::kPause ? "pause" : "resume";
  auto r = client->Request("POST", "/v1/groups/" + id + "/" + verb);
  if (!r.ok()) return what + ": " + r.status().message();
  if (r->status / 100 != 2) return Refusal(what, *r);
  return what + ": done";
}

}  // namespace gpuslice::cli::top
