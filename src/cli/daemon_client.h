// DaemonClient: the CLI's one way to talk to gpusliced (docs/api.md) —
// requests and their JSON answers, the daemon's error messages, and the event
// stream (GET /v1/events, server-sent events). It goes through an injected
// DaemonTransport: SocketTransport (HTTP over the Unix socket or TCP) in the
// binary, a fake in the tests, so every command is tested without a daemon.
//
// Commands get their client from a DaemonConnector (the --socket flag and a
// timeout in, a client out), given to them when they are registered.
//
// DaemonClient is thread-compatible; SocketTransport is thread-safe (no
// state but its address).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/unix_http_client.h"
#include "common/status.h"

namespace gpuslice::cli {

// One server-sent event ("id:", "event:" and "data:" lines; data lines joined
// by "\n").
struct SseEvent {
  std::string id;
  std::string type = "message";
  std::string data;
};

// Turns the bytes of a text/event-stream into events. Comments (": …") and
// unknown fields are skipped; an event ends at a blank line.
class SseParser {
 public:
  // The events completed by `bytes` (appended to what came before).
  std::vector<SseEvent> Feed(std::string_view bytes);

 private:
  std::string line_;  // an incomplete line
  SseEvent event_;
  bool has_data_ = false;
};

// How a DaemonClient reaches the daemon.
class DaemonTransport {
 public:
  virtual ~DaemonTransport() = default;
  // One request and its whole answer; kUnavailable when none came.
  virtual StatusOr<HttpReply> RoundTrip(const std::string& method, const std::string& target,
                                        const std::string& body) = 0;
  // GET `target` as a stream: its body's bytes to `on_bytes` as they come, ""
  // every `tick` while none do, until `on_bytes` returns false (OK).
  // kUnavailable when it cannot be opened, ends, or is silent for `idle`.
  virtual Status Stream(const std::string& target, std::chrono::milliseconds tick,
                        std::chrono::milliseconds idle,
                        const std::function<bool(std::string_view)>& on_bytes) = 0;
  // Names the daemon in messages ("gpusliced at /run/gpuslice/gpusliced.sock").
  virtual std::string Where() const = 0;
};

// HTTP over the daemon's socket: `endpoint` is a Unix socket path or
// "tcp:HOST:PORT" (ParseDaemonAddress); each request may take `timeout`.
class SocketTransport final : public DaemonTransport {
 public:
  SocketTransport(DaemonAddress address, std::chrono::milliseconds timeout)
      : address_(std::move(address)), timeout_(timeout) {}
  StatusOr<HttpReply> RoundTrip(const std::string& method, const std::string& target,
                                const std::string& body) override;
  Status Stream(const std::string& target, std::chrono::milliseconds tick,
                std::chrono::milliseconds idle,
                const std::function<bool(std::string_view)>& on_bytes) override;
  std::string Where() const override { return address_.Where(); }

 private:
  const DaemonAddress address_;
  const std::chrono::milliseconds timeout_;
};

class DaemonClient {
 public:
  // REQUIRES: `transport` is not null.
  explicit DaemonClient(std::shared_ptr<DaemonTransport> transport)
      : transport_(std::move(transport)) {}

  // The daemon's answer, whatever its status; kUnavailable when none came.
  StatusOr<HttpReply> Request(const std::string& method, const std::string& target,
                              const std::string& body = "") const;

  // GET `target`: the answer when it is 200 with a JSON object; else
  // kUnavailable saying why (no answer, "answered HTTP N: message", not JSON).
  StatusOr<nlohmann::json> GetJson(const std::string& target) const;

  // Follows the event stream (GET /v1/events): `on_event` gets each event,
  // and null every `tick` while none come; returning false stops (OK).
  // kUnavailable when the stream cannot be opened, ends, or is silent for
  // `idle` (the daemon sends keep-alives).
  Status Events(std::chrono::milliseconds tick, std::chrono::milliseconds idle,
                const std::function<bool(const SseEvent*)>& on_event) const;

  std::string Where() const { return transport_->Where(); }

 private:
  std::shared_ptr<DaemonTransport> transport_;
};

// The message of an error answer ({"error": {"message": …}}), else its body.
std::string DaemonErrorMessage(const HttpReply& r);

// A command's client: from its --socket flag ("" for the default) and how
// long one request may take.
using DaemonConnector =
    std::function<DaemonClient(const std::string& socket_flag, std::chrono::milliseconds timeout)>;

// The real connector: SocketTransport to ParseDaemonAddress(socket_flag). A
// malformed address gives a client whose every request fails with why.
DaemonConnector SocketConnector();

}  // namespace gpuslice::cli
