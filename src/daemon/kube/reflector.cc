#include "daemon/kube/reflector.h"

#include <algorithm>
#include <cctype>

#include "common/log.h"

namespace gpuslice::daemon::kube {

bool RealSleeper::SleepFor(std::chrono::nanoseconds d) {
  MutexLock lock(mu_);
  return !cv_.wait_for(lock, d, [this]() REQUIRES(mu_) { return woken_; });
}

void RealSleeper::Wake() {
  {
    MutexLock lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Reflector::Reflector(KubeClient& client, Options options, ReflectorHandler& handler,
                     Sleeper& sleeper)
    : client_(client), options_(std::move(options)), handler_(handler), sleeper_(sleeper) {}

Reflector::~Reflector() { Stop(); }

void Reflector::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Reflector::Stop() {
  stop_.store(true);
  sleeper_.Wake();
  if (thread_.joinable()) thread_.join();
}

std::string Reflector::resource_version() const {
  MutexLock lock(mu_);
  return rv_;
}

Status Reflector::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

std::string Reflector::Query(bool watch) const {
  std::string q;
  auto add = [&q](std::string_view key, std::string_view value) {
    q += q.empty() ? "?" : "&";
    q += std::string(key) + "=" + UrlEncode(value);
  };
  if (!options_.field_selector.empty()) add("fieldSelector", options_.field_selector);
  if (!options_.label_selector.empty()) add("labelSelector", options_.label_selector);
  if (watch) {
    add("watch", "1");
    add("allowWatchBookmarks", "true");
    add("resourceVersion", resource_version());
    add("timeoutSeconds", std::to_string(options_.watch_timeout_s));
  }
  return q;
}

void Reflector::Failed(const Status& s) {
  errors_.fetch_add(1);
  GS_LOG(kWarn, "kube", "event=watch_failed reflector=%s error=\"%s\"", options_.name.c_str(),
         s.message().c_str());
  MutexLock lock(mu_);
  last_error_ = s;
}

Status Reflector::List() {
  const std::string path = options_.collection + Query(false);
  auto r = client_.Request("GET", path);
  if (!r.ok()) return r.status();
  GS_RETURN_IF_ERROR(StatusFromResponse("GET " + path, *r));
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("items") || !j["items"].is_array()) {
    return Unavailable("GET " + path + ": the list is not a JSON list object");
  }
  std::string rv;
  if (auto m = j.find("metadata"); m != j.end() && m->is_object())
    rv = m->value("resourceVersion", "");
  if (rv.empty()) return Unavailable("GET " + path + ": the list has no resourceVersion");
  std::vector<nlohmann::json> items;
  for (auto& item : j["items"]) items.push_back(std::move(item));
  handler_.OnList(items);
  lists_.fetch_add(1);
  MutexLock lock(mu_);
  rv_ = rv;
  return Status::Ok();
}

Reflector::WatchEnd Reflector::Watch(bool* delivered) {
  const std::string path = options_.collection + Query(true);
  watches_.fetch_add(1);
  WatchEnd end = WatchEnd::kEnded;
  Status error;
  auto on_line = [&](std::string_view line) {
    auto ev = nlohmann::json::parse(line, nullptr, false);
    if (!ev.is_object() || !ev.contains("type") || !ev["type"].is_string() ||
        !ev.contains("object") || !ev["object"].is_object()) {
      error = Unavailable("watch " + options_.collection + ": an event that is not JSON");
      end = WatchEnd::kFailed;
      return false;
    }
    const std::string type = ev["type"].get<std::string>();
    const nlohmann::json& obj = ev["object"];
    if (type == "ERROR") {
      const int code = obj.value("code", 0);
      if (code == 410) {
        end = WatchEnd::kGone;
      } else {
        error = Unavailable("watch " + options_.collection + ": ERROR event " +
                            std::to_string(code) + ": " + obj.value("message", ""));
        end = WatchEnd::kFailed;
      }
      return false;
    }
    std::string rv;
    if (auto m = obj.find("metadata"); m != obj.end() && m->is_object()) {
      rv = m->value("resourceVersion", "");
    }
    if (type == "ADDED" || type == "MODIFIED" || type == "DELETED") {
      handler_.OnEvent(type, obj);
    } else if (type != "BOOKMARK") {
      return true;  // an unknown type: skipped
    }
    *delivered = true;
    if (!rv.empty()) {
      MutexLock lock(mu_);
      rv_ = rv;
    }
    return true;
  };
  auto r = client_.Stream(
      path, on_line, [this] { return stop_.load(); }, options_.idle_timeout_ms,
      (options_.watch_timeout_s + 60) * 1000);
  if (stop_.load()) return WatchEnd::kEnded;
  if (!r.ok()) {
    Failed(r.status());
    return WatchEnd::kFailed;
  }
  if (r->code == 410) return WatchEnd::kGone;
  if (Status s = StatusFromResponse("watch " + path, *r); !s.ok()) {
    Failed(s);
    return WatchEnd::kFailed;
  }
  if (end == WatchEnd::kFailed) Failed(error);
  return end;
}

void Reflector::Run() {
  int failures = 0;
  auto backoff = [&]() -> bool {
    auto d = options_.initial_backoff;
    for (int i = 0; i < failures && d < options_.max_backoff; ++i) d *= 2;
    d = std::min(d, options_.max_backoff);
    ++failures;
    return sleeper_.SleepFor(d);
  };
  while (!stop_.load()) {
    if (resource_version().empty()) {
      if (Status s = List(); !s.ok()) {
        Failed(s);
        if (!backoff()) return;
        continue;
      }
      failures = 0;
    }
    if (stop_.load()) return;
    bool delivered = false;
    const WatchEnd end = Watch(&delivered);
    if (stop_.load()) return;
    switch (end) {
      case WatchEnd::kEnded:
        // A server that ends watches at once, delivering nothing, is not
        // asked again in a tight loop.
        if (delivered) {
          failures = 0;
        } else if (!backoff()) {
          return;
        }
        break;
      case WatchEnd::kGone: {
        GS_LOG(kInfo, "kube", "event=watch_gone reflector=%s relisting", options_.name.c_str());
        MutexLock lock(mu_);
        rv_.clear();
        break;
      }
      case WatchEnd::kFailed:
        if (delivered) failures = 0;
        if (!backoff()) return;
        break;
    }
  }
}

}  // namespace gpuslice::daemon::kube
