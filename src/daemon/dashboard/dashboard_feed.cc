#include "daemon/dashboard/dashboard_feed.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

// obj[key] when obj is an object holding it, else null.
const json& At(const json& obj, const char* key) {
  static const json& kNull = *new json(nullptr);
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

json NumberOr(const json& v) { return v.is_number() ? v : json(nullptr); }

// The lowest memory limit that `group`'s members have on `uuid`; null if none.
json MembersMemoryLimit(const json& tenants, const std::string& group, const std::string& uuid) {
  json lowest = nullptr;
  for (const json& t : tenants) {
    if (At(t, "group") != group) continue;
    for (const json& g : At(t, "gpus")) {
      if (At(g, "uuid") != uuid) continue;
      const json& m = At(At(g, "limit"), "memory_bytes");
      if (m.is_number_integer() && m.get<int64_t>() >= 0 &&
          (lowest.is_null() || m.get<uint64_t>() < lowest.get<uint64_t>())) {
        lowest = m;
      }
    }
  }
  return lowest;
}

}  // namespace

DashboardFeed::DashboardFeed(Options options, SampleSource source, EventHub& hub,
                             const Clock& clock, const Clock& wall)
    : options_(options), source_(std::move(source)), hub_(hub), clock_(clock), wall_(wall) {
  subscription_ =
      hub_.Subscribe([this](const std::shared_ptr<const std::string>& event) { OnEvent(*event); });
}

DashboardFeed::~DashboardFeed() { hub_.Unsubscribe(subscription_); }

// `event` as EventHub formats it: "id: N\nevent: TYPE\ndata: JSON\n\n".
void DashboardFeed::OnEvent(const std::string& event) {
  const size_t type_at = event.find("event: ");
  const size_t data_at = event.find("\ndata: ");
  if (type_at == std::string::npos || data_at == std::string::npos) return;
  const size_t type_end = event.find('\n', type_at);
  const std::string type = event.substr(type_at + 7, type_end - type_at - 7);
  if (type == "sample" || type == "gpu") return;
  const size_t data_end = event.find('\n', data_at + 7);
  json data = json::parse(event.substr(data_at + 7, data_end - data_at - 7), nullptr,
                          /*allow_exceptions=*/false);
  if (data.is_discarded()) data = nullptr;
  json entry = {{"t", wall_.NowNs() / 1'000'000}, {"type", type}, {"data", std::move(data)}};
  MutexLock lock(mu_);
  events_.push_back(std::move(entry));
  while (events_.size() > options_.history_events) events_.pop_front();
}

int64_t DashboardFeed::Tick() {
  const int64_t now = clock_.NowNs();
  if (last_ns_ && now - *last_ns_ < options_.period_ns) {
    return options_.period_ns - (now - *last_ns_);
  }
  last_ns_ = now;
  json sample = source_();
  const int64_t t_ms = wall_.NowNs() / 1'000'000;
  json point = PointOf(sample, t_ms);
  {
    MutexLock lock(mu_);
    points_.push_back(point);
    while (points_.size() > options_.history_points) points_.pop_front();
  }
  sample["t"] = t_ms;
  sample["point"] = std::move(point);
  // Names from outside (a group, a pod) may not be UTF-8: replaced, not thrown.
  hub_.Publish("sample", sample.dump(-1, ' ', false, json::error_handler_t::replace));
  return options_.period_ns;
}

json DashboardFeed::History() const {
  json points = json::array();
  json events = json::array();
  {
    MutexLock lock(mu_);
    for (const json& p : points_) points.push_back(p);
    for (const json& e : events_) events.push_back(e);
  }
  return {{"period_ms", options_.period_ns / 1'000'000},
          {"points", std::move(points)},
          {"events", std::move(events)}};
}

json PointOf(const json& sample, int64_t t_ms) {
  json gpus = json::object();
  for (const json& g : At(sample, "gpus")) {
    const json& uuid = At(g, "uuid");
    if (!uuid.is_string()) continue;
    gpus[uuid.get<std::string>()] = {
        {"utilization", NumberOr(At(At(g, "utilization"), "gpu_percent"))},
        {"memory_used", NumberOr(At(At(g, "memory"), "used_bytes"))},
        {"memory_total", NumberOr(At(At(g, "memory"), "total_bytes"))},
        {"power_watts", NumberOr(At(At(g, "power"), "draw_watts"))},
        {"power_limit_watts", NumberOr(At(At(g, "power"), "limit_watts"))},
        {"sm_mhz", NumberOr(At(At(g, "clocks"), "sm_mhz"))},
        {"memory_mhz", NumberOr(At(At(g, "clocks"), "memory_mhz"))}};
  }
  const json& tenants = At(sample, "tenants");
  json groups = json::object();
  for (const json& group : At(sample, "groups")) {
    const json& id = At(group, "id");
    if (!id.is_string()) continue;
    json on = json::object();
    for (const json& g : At(group, "gpus")) {
      const json& uuid = At(g, "uuid");
      if (!uuid.is_string()) continue;
      const json& share = At(g, "share");  // a fraction of the GPU
      const json& schedule = At(g, "schedule");
      json memory_limit = NumberOr(At(At(g, "limit"), "memory_bytes"));
      if (memory_limit.is_null()) {
        memory_limit = MembersMemoryLimit(tenants, id.get<std::string>(), uuid.get<std::string>());
      }
      on[uuid.get<std::string>()] = {
          {"share", share.is_number() ? json(share.get<double>() * 100.0) : json(nullptr)},
          {"limit", NumberOr(At(schedule, "limit"))},
          {"request", NumberOr(At(schedule, "request"))},
          {"grant", NumberOr(At(g, "grant_percent"))},
          {"memory_used", NumberOr(At(g, "memory_used_bytes"))},
          {"memory_limit", std::move(memory_limit)},
          {"paused", At(group, "paused").is_boolean() ? At(group, "paused") : json(false)}};
    }
    groups[id.get<std::string>()] = std::move(on);
  }
  return {{"t", t_ms}, {"gpus", std::move(gpus)}, {"groups", std::move(groups)}};
}

DashboardFeed::SampleSource SampleFromRouter(const ApiRouter& router) {
  return [&router] {
    json sample = json::object();
    // The sample's key, the route, and its list's key in the route's body.
    struct View {
      const char* key;
      const char* path;
      const char* list;
    };
    for (const View view :
         {View{"gpus", "/v1/gpus", "gpus"}, View{"groups", "/v1/groups", "groups"},
          View{"tenants", "/v1/tenants", "tenants"}, View{"mig", "/v1/mig", "gpus"}}) {
      json list = json::array();
      ApiRequest req;
      req.method = "GET";
      req.path = view.path;
      auto match = router.Find(req.method, req.path);
      if (match.ok()) {
        const ApiResponse r = (*match->handler)(req);
        json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
        if (r.status == 200 && body.is_object() && At(body, view.list).is_array()) {
          list = std::move(body[view.list]);
        }
      }
      sample[view.key] = std::move(list);
    }
    return sample;
  };
}

}  // namespace gpuslice::daemon
