// DashboardFeed: what the web dashboard (docs/dashboard.md) shows, sampled
// once a period. A sample is the node as the API shows it — GPUs, groups and
// tenants, the bodies of GET /v1/gpus, /v1/groups and /v1/tenants — with its
// time. Each goes out on the event stream as event "sample"; its plotted
// numbers (a "point", see PointOf) are also kept for the last minutes, so
// that a page opened now starts with a history (GET /v1/dashboard/history),
// as are the last events of other types (a tenant registered, a limit
// changed...), but "gpu" (every GPU reading, in each sample already).
//
// Thread safety: Tick from one thread at a time (the daemon's ControlLoop);
// History from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "daemon/api/api.h"
#include "daemon/event_hub.h"

namespace gpuslice::daemon {

class DashboardFeed {
 public:
  struct Options {
    int64_t period_ns = 1'000'000'000;
    size_t history_points = 300;  // five minutes at the default period
    size_t history_events = 50;
  };
  // One sample of the node: {"gpus": [...], "groups": [...], "tenants": [...]}
  // as the API's views have them.
  using SampleSource = std::function<nlohmann::json()>;

  // `clock` paces the samples; `wall` stamps them ("t", ms since the epoch,
  // for people and for the page's time axis).
  // REQUIRES: `hub`, `clock` and `wall` outlive the feed.
  DashboardFeed(Options options, SampleSource source, EventHub& hub, const Clock& clock,
                const Clock& wall);
  ~DashboardFeed();
  DashboardFeed(const DashboardFeed&) = delete;
  DashboardFeed& operator=(const DashboardFeed&) = delete;

  // Takes a sample when one is due (the first call always does): keeps its
  // point and publishes {"t", "gpus", "groups", "tenants", "point"} as event
  // "sample". Returns the nanoseconds until the next one is due.
  int64_t Tick();

  // {"period_ms": P, "points": [...], "events": [{"t", "type", "data"}...]}:
  // the kept points and events, oldest first ("t": ms since the epoch when the
  // feed saw the event; "data": its JSON).
  nlohmann::json History() const;

 private:
  const Options options_;
  const SampleSource source_;
  EventHub& hub_;
  const Clock& clock_;
  const Clock& wall_;
  void OnEvent(const std::string& event);

  std::optional<int64_t> last_ns_;  // of the last sample; Tick's thread only
  uint64_t subscription_ = 0;
  mutable Mutex mu_;
  std::deque<nlohmann::json> points_ GUARDED_BY(mu_);
  std::deque<nlohmann::json> events_ GUARDED_BY(mu_);
};

// The plotted numbers of `sample` at `t_ms`:
//   {"t": t_ms,
//    "gpus": {UUID: {"utilization", "memory_used", "memory_total", "power_watts",
//                    "power_limit_watts", "sm_mhz", "memory_mhz"}},
//    "groups": {ID: {UUID: {"share", "limit", "request", "grant", "memory_used",
//                           "memory_limit", "paused"}}}}
// "share", "limit", "request" and "grant" are percentages of the GPU: the
// measured share, and the scheduler's limit, request and grant (null where
// unknown). "memory_limit" is the group's on that GPU, else the lowest of its
// members' (null: none).
nlohmann::json PointOf(const nlohmann::json& sample, int64_t t_ms);

// The daemon's SampleSource: GET /v1/gpus, /v1/groups, /v1/tenants and /v1/mig
// (its "gpus" as the sample's "mig") through
// `router`, the API's own views. A view that fails is an empty list.
// REQUIRES: `router` outlives the source and is filled before its first call.
DashboardFeed::SampleSource SampleFromRouter(const ApiRouter& router);

}  // namespace gpuslice::daemon
