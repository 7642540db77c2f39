#include "cli/daemon_client.h"

#include <utility>

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

// A transport for an address that could not be parsed: every call says why.
class BrokenTransport final : public DaemonTransport {
 public:
  BrokenTransport(std::string endpoint, Status why)
      : endpoint_(std::move(endpoint)), why_(std::move(why)) {}
  StatusOr<HttpReply> RoundTrip(const std::string&, const std::string&,
                                const std::string&) override {
    return why_;
  }
  Status Stream(const std::string&, std::chrono::milliseconds, std::chrono::milliseconds,
                const std::function<bool(std::string_view)>&) override {
    return why_;
  }
  std::string Where() const override { return "gpusliced at " + endpoint_; }

 private:
  const std::string endpoint_;
  const Status why_;
};

}  // namespace

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (const char c : bytes) {
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // the end of an event
      if (has_data_) out.push_back(std::move(event_));
      event_ = SseEvent();
      has_data_ = false;
    } else if (line_[0] != ':') {
      const size_t colon = line_.find(':');
      const std::string field = line_.substr(0, colon);
      std::string value = colon == std::string::npos ? "" : line_.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (field == "data") {
        if (has_data_) event_.data += '\n';
        event_.data += value;
        has_data_ = true;
      } else if (field == "event") {
        event_.type = value;
      } else if (field == "id") {
        event_.id = value;
      }
    }
    line_.clear();
  }
  return out;
}

StatusOr<HttpReply> SocketTransport::RoundTrip(const std::string& method, const std::string& target,
                                               const std::string& body) {
  return HttpExchange(address_, method, target, body, timeout_);
}

Status SocketTransport::Stream(const std::string& target, std::chrono::milliseconds tick,
                               std::chrono::milliseconds idle,
                               const std::function<bool(std::string_view)>& on_bytes) {
  return HttpStream(address_, target, timeout_, tick, idle, on_bytes);
}

StatusOr<HttpReply> DaemonClient::Request(const std::string& method, const std::string& target,
                                          const std::string& body) const {
  return transport_->RoundTrip(method, target, body);
}

StatusOr<json> DaemonClient::GetJson(const std::string& target) const {
  auto r = Request("GET", target);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return Unavailable(Where() + " answered HTTP " + std::to_string(r->status) + " to GET " +
                       target + ": " + DaemonErrorMessage(*r));
  }
  json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return Unavailable(Where() + " did not answer GET " + target + " with a JSON object");
  }
  return j;
}

Status DaemonClient::Events(std::chrono::milliseconds tick, std::chrono::milliseconds idle,
                            const std::function<bool(const SseEvent*)>& on_event) const {
  SseParser parser;
  return transport_->Stream("/v1/events", tick, idle, [&](std::string_view bytes) {
    if (bytes.empty()) return on_event(nullptr);
    for (const SseEvent& e : parser.Feed(bytes)) {
      if (!on_event(&e)) return false;
    }
    return true;
  });
}

std::string DaemonErrorMessage(const HttpReply& r) {
  const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& m = j["error"].value("message", json());
    if (m.is_string()) return m.get<std::string>();
  }
  std::string body = r.body;
  while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
  return body;
}

DaemonConnector SocketConnector() {
  return [](const std::string& socket_flag, std::chrono::milliseconds timeout) {
    auto address = ParseDaemonAddress(socket_flag);
    if (!address.ok()) {
      return DaemonClient(std::make_shared<BrokenTransport>(socket_flag, address.status()));
    }
    return DaemonClient(std::make_shared<SocketTransport>(std::move(*address), timeout));
  };
}

}  // namespace gpuslice::cli
