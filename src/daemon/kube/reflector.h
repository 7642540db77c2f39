// Reflector: keeps a handler in step with one kind of Kubernetes object, by
// LIST then WATCH from the list's resourceVersion (docs/kubernetes.md
// "Watching"), as client-go's reflector does:
//  1. LIST (with the field and label selectors) hands the handler the whole
//     set (OnList: replace what you knew), then WATCH from its
//     resourceVersion with allowWatchBookmarks; each ADDED/MODIFIED/DELETED
//     event goes to OnEvent, and every event and BOOKMARK moves the
//     resourceVersion the next watch starts from.
//  2. A watch the server ends (timeoutSeconds) is resumed from the last
//     resourceVersion, without a LIST: at once if it delivered something,
//     else after a backoff (a server that ends every watch at once is not
//     hammered).
//  3. 410 Gone (the HTTP answer, or an ERROR event with code 410): the
//     resourceVersion is too old, so the reflector LISTs again at once.
//  4. Any other failure (a transport error, a dropped connection, an HTTP
//     error, an ERROR event) waits a backoff before the next attempt: the
//     first `initial_backoff`, doubling up to `max_backoff`, back to the
//     first after a LIST or a watch that delivered something succeeds.
//     After a failed LIST the next attempt LISTs; after a failed watch it
//     watches from the last resourceVersion.
//
// Threads: Run() on one thread (Start() makes one) calls the handler there;
// Stop() from any other thread ends it promptly (a watch in flight is
// cancelled, a backoff wait is woken).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/kube/kube_client.h"

namespace gpuslice::daemon::kube {

class ReflectorHandler {
 public:
  virtual ~ReflectorHandler() = default;
  // The complete current set, after each LIST.
  virtual void OnList(const std::vector<nlohmann::json>& items) = 0;
  // One change: type is "ADDED", "MODIFIED" or "DELETED".
  virtual void OnEvent(std::string_view type, const nlohmann::json& object) = 0;
};

// Waits between attempts; the seam that keeps tests from sleeping.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Waits `d` or until Wake(); false if woken (the caller should stop).
  virtual bool SleepFor(std::chrono::nanoseconds d) = 0;
  // Ends the current and every later SleepFor at once.
  virtual void Wake() = 0;
};

// Real time, woken by a condition variable.
class RealSleeper final : public Sleeper {
 public:
  bool SleepFor(std::chrono::nanoseconds d) override;
  void Wake() override;

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  bool woken_ GUARDED_BY(mu_) = false;
};

// "a=b,c=d" URL-encoded for a query string.
std::string UrlEncode(std::string_view s);

class Reflector {
 public:
  struct Options {
    std::string collection;      // e.g. "/api/v1/pods"
    std::string field_selector;  // e.g. "spec.nodeName=node-1"
    std::string label_selector;
    std::string name = "reflector";  // for logs
    int64_t watch_timeout_s = 300;   // asked of the server; the client allows a minute more
    // No event, not even a bookmark, for this long: the watch is dead and is
    // started again from the last resourceVersion, after a backoff (0: no
    // limit). API servers send a bookmark about every minute.
    int64_t idle_timeout_ms = 150'000;
    std::chrono::milliseconds initial_backoff{500};
    std::chrono::milliseconds max_backoff{30'000};
  };

  // REQUIRES: `client`, `handler` and `sleeper` outlive the reflector.
  Reflector(KubeClient& client, Options options, ReflectorHandler& handler, Sleeper& sleeper);
  ~Reflector();  // Stop()s
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  void Start();  // Run() on a thread of its own
  void Run();    // until Stop()
  void Stop();

  // Counters for tests and metrics.
  uint64_t lists() const { return lists_.load(); }
  uint64_t watches() const { return watches_.load(); }
  uint64_t errors() const { return errors_.load(); }
  std::string resource_version() const;
  Status last_error() const;

 private:
  enum class WatchEnd { kEnded, kGone, kFailed };
  Status List();
  WatchEnd Watch(bool* delivered);
  std::string Query(bool watch) const;
  void Failed(const Status& s);

  KubeClient& client_;
  const Options options_;
  ReflectorHandler& handler_;
  Sleeper& sleeper_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::atomic<uint64_t> lists_{0};
  std::atomic<uint64_t> watches_{0};
  std::atomic<uint64_t> errors_{0};
  mutable Mutex mu_;
  std::string rv_ GUARDED_BY(mu_);  // "" = LIST next
  Status last_error_ GUARDED_BY(mu_);
};

}  // namespace gpuslice::daemon::kube
