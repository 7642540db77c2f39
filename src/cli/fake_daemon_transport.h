// FakeDaemonTransport: a DaemonTransport for tests — exchanges answered by a
// function, streams replayed from scripts — that records every request. No
// socket, no daemon.
//
// Thread-safe (the requests and scripts under a mutex); header-only, for tests.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cli/daemon_client.h"

namespace gpuslice::cli {

class FakeDaemonTransport final : public DaemonTransport {
 public:
  using Answer = std::function<StatusOr<HttpReply>(
      const std::string& method, const std::string& target, const std::string& body)>;

  // One stream: its chunks, handed over one per call, then its end.
  struct StreamScript {
    std::vector<std::string> chunks;
    Status end = Unavailable("the fake daemon closed the event stream");
  };

  explicit FakeDaemonTransport(Answer answer = nullptr) : answer_(std::move(answer)) {}

  StatusOr<HttpReply> RoundTrip(const std::string& method, const std::string& target,
                                const std::string& body) override {
    Answer answer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(method + " " + target);
      bodies_.push_back(body);
      answer = answer_;
    }
    if (!answer) return Unavailable("cannot reach gpusliced at /fake.sock");
    return answer(method, target, body);
  }

  // Plays the next script (kUnavailable when none is left), with an empty
  // chunk (a tick) between chunks, stopping when `on_bytes` says so.
  Status Stream(const std::string& target, std::chrono::milliseconds, std::chrono::milliseconds,
                const std::function<bool(std::string_view)>& on_bytes) override {
    StreamScript script;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back("STREAM " + target);
      if (streams_.empty()) return Unavailable("cannot reach gpusliced at /fake.sock");
      script = std::move(streams_.front());
      streams_.pop_front();
    }
    for (const std::string& chunk : script.chunks) {
      if (!on_bytes(chunk) || !on_bytes("")) return {};
    }
    return script.end;
  }

  std::string Where() const override { return "gpusliced at /fake.sock"; }

  void AddStream(StreamScript script) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(std::move(script));
  }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::vector<std::string> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  mutable std::mutex mu_;
  Answer answer_;
  std::deque<StreamScript> streams_;
  std::vector<std::string> requests_;
  std::vector<std::string> bodies_;
};

// A client on a fake transport answered by `answer`.
inline DaemonClient FakeClient(FakeDaemonTransport::Answer answer) {
  return DaemonClient(std::make_shared<FakeDaemonTransport>(std::move(answer)));
}

}  // namespace gpuslice::cli
