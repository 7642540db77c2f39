// DaemonFeed: `gpuslice top`'s view of gpusliced — it follows the daemon's
// event stream (GET /v1/events) on its own thread and keeps the last
// "sample" event (the daemon's per-second sample for the dashboard:
// {"t", "gpus", "groups", "tenants", ...}; docs/dashboard.md), whether the
// stream is up, and why not. When the stream ends (the daemon stopped, or sent
// nothing for `idle`) it says so and opens it again every `retry` until the
// daemon answers.
//
// Thread-safe: the stream has its thread; the state is read from any.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/daemon_client.h"
#include "common/thread_annotations.h"

namespace gpuslice::cli::top {

class DaemonFeed {
 public:
  struct Options {
    std::chrono::milliseconds tick{100};   // how often the thread checks for Stop
    std::chrono::milliseconds idle{5000};  // silence that ends a stream
    std::chrono::milliseconds retry{500};  // between attempts to open it
  };

  struct State {
    bool connected = false;  // samples are arriving on an open stream
    bool resolved = false;   // the first attempt has an outcome (a sample or an error)
    uint64_t samples = 0;    // "sample" events received, in total
    uint64_t version = 0;    // bumped on each sample, each change of `connected`, at resolution
    std::shared_ptr<const nlohmann::json> last;  // the last sample's data (null before one)
    std::string error;                           // why the stream is not up ("" while it is)
  };

  // Starts following the stream.
  DaemonFeed(DaemonClient client, Options options);
  // Stops and joins the thread (within `tick` of an open stream's silence, or
  // the transport's timeout of an attempt under way).
  ~DaemonFeed();
  DaemonFeed(const DaemonFeed&) = delete;
  DaemonFeed& operator=(const DaemonFeed&) = delete;

  State Get() const;
  // Waits until the state's version is above `seen`, at most `timeout`; the
  // state then.
  State WaitNewer(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  void Run();
  void Lost(const std::string& why);

  const DaemonClient client_;
  const Options options_;
  mutable Mutex mu_;
  mutable std::condition_variable_any changed_;
  State state_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpuslice::cli::top
