#include "daemon/kube/kube_client.h"

#include <curl/curl.h>

#include <utility>

namespace gpuslice::daemon::kube {
namespace {

// curl_global_init once, before any handle (never cleaned up: other threads
// may still use handles at exit).
void EnsureCurlInit() {
  static const bool kInit = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)kInit;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// The server's Status message and reason, if the body is a Status object.
std::string ServerMessage(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    std::string m = j.value("message", "");
    std::string reason = j.value("reason", "");
    if (!reason.empty()) m += (m.empty() ? "" : " ") + std::string("(reason ") + reason + ")";
    return m;
  }
  std::string b = body.substr(0, 200);
  for (char& c : b) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return b;
}

}  // namespace

Status StatusFromResponse(std::string_view what, const HttpResponse& r) {
  if (r.code >= 200 && r.code < 300) return Status::Ok();
  std::string msg = std::string(what) + ": HTTP " + std::to_string(r.code);
  std::string server = ServerMessage(r.body);
  auto with = [&](std::string_view label) {
    return msg + " " + std::string(label) + (server.empty() ? "" : ": " + server);
  };
  switch (r.code) {
    case 401:
      return PermissionDenied(with("unauthorized (the token was refused)"));
    case 403:
      return PermissionDenied(with("forbidden (RBAC)"));
    case 404:
      return NotFound(with("not found"));
    case 409:
      return {StatusCode::kAlreadyExists, with("conflict")};
    case 410:
      return FailedPrecondition(with("gone (resourceVersion too old)"));
    case 400:
    case 422:
      return InvalidArgument(with("invalid"));
    default:
      return Unavailable(with(r.code == 429 ? "too many requests" : "server error"));
  }
}

struct KubeClient::Call {
  std::string method;
  std::string path;
  std::string body;
  std::string content_type;
  int64_t total_timeout_ms = 0;
  int64_t idle_timeout_ms = 0;  // streams: no complete line for this long ends it; 0: none
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::function<bool()>* cancelled = nullptr;

  // Filled while performing.
  CURL* curl = nullptr;
  HttpResponse response;
  std::string pending;  // a streamed line not yet complete
  bool stopped = false;
  bool idled = false;  // stopped by idle_timeout_ms
  std::chrono::steady_clock::time_point last_line;

  bool Streaming() const {
    if (on_line == nullptr) return false;
    long code = 0;  // NOLINT(google-runtime-int)
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code >= 200 && code < 300;
  }
};

namespace {

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* call = static_cast<KubeClient::Call*>(user);  // NOLINT
  const size_t bytes = size * n;
  if (!call->Streaming()) {
    call->response.body.append(data, bytes);
    return bytes;
  }
  call->pending.append(data, bytes);
  size_t start = 0;
  for (size_t nl; (nl = call->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(call->pending.data() + start, nl - start);
    if (line.empty()) continue;
    call->last_line = std::chrono::steady_clock::now();
    if (!(*call->on_line)(line)) {
      call->stopped = true;
      return 0;  // aborts the transfer
    }
  }
  call->pending.erase(0, start);
  return bytes;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* call = static_cast<KubeClient::Call*>(user);  // NOLINT
  if (call->cancelled != nullptr && (*call->cancelled)()) {
    call->stopped = true;
    return 1;
  }
  // libcurl calls this about once a second even when nothing arrives.
  if (call->idle_timeout_ms > 0 && std::chrono::steady_clock::now() - call->last_line >=
                                       std::chrono::milliseconds(call->idle_timeout_ms)) {
    call->idled = true;
    return 1;
  }
  return 0;
}

}  // namespace

KubeClient::KubeClient(KubeConfig config) : config_(std::move(config)) {
  EnsureCurlInit();
  if (!config_.token_file.empty()) token_ = std::make_unique<TokenFile>(config_.token_file);
}

KubeClient::~KubeClient() = default;

StatusOr<HttpResponse> KubeClient::Perform(Call& call) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
    if (!curl) return Unavailable("curl_easy_init failed");
    call.curl = curl.get();
    call.response = HttpResponse{};
    call.pending.clear();
    call.stopped = false;
    call.idled = false;
    call.last_line = std::chrono::steady_clock::now();
    CURL* c = curl.get();
    const std::string url = config_.server + call.path;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, call.method.c_str());
    if (call.method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout_ms));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(call.total_timeout_ms));
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!config_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, config_.ca_file.c_str());
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnData);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &call);
    if (call.cancelled != nullptr || call.idle_timeout_ms > 0) {
      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
      curl_easy_setopt(c, CURLOPT_XFERINFODATA, &call);
    }
    std::unique_ptr<curl_slist, SlistDeleter> headers;
    auto add = [&headers](const std::string& h) {
      headers.reset(curl_slist_append(headers.release(), h.c_str()));
    };
    add("Accept: application/json");
    add("User-Agent: gpusliced");
    if (token_) {
      auto token = token_->Get();
      if (!token.ok()) return token.status().WithContext(call.method + " " + call.path);
      add("Authorization: Bearer " + *token);
    }
    if (!call.body.empty() || call.method == "POST" || call.method == "PUT" ||
        call.method == "PATCH") {
      add("Content-Type: " + call.content_type);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, call.body.c_str());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body.size()));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);

    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &call.response.code);
    call.curl = nullptr;
    if (call.idled) {
      return Unavailable(call.method + " " + config_.server + call.path + ": idle: no event for " +
                         std::to_string(call.idle_timeout_ms) + " ms");
    }
    if (rc != CURLE_OK && !call.stopped) {
      std::string what = call.method + " " + config_.server + call.path + ": ";
      if (rc == CURLE_OPERATION_TIMEDOUT) {
        return Unavailable(what + "timed out (" + (error[0] ? error : curl_easy_strerror(rc)) +
                           ")");
      }
      return Unavailable(what + (error[0] ? error : curl_easy_strerror(rc)));
    }
    if (call.response.code == 401 && token_ && attempt == 0 && !call.stopped) {
      token_->Invalidate();  // maybe rotated just now: one more try with the file's token
      continue;
    }
    return std::move(call.response);
  }
}

StatusOr<HttpResponse> KubeClient::Request(std::string_view method, const std::string& path,
                                           const std::string& body, std::string_view content_type) {
  Call call;
  call.method = std::string(method);
  call.path = path;
  call.body = body;
  call.content_type = std::string(content_type);
  call.total_timeout_ms = config_.request_timeout_ms;
  return Perform(call);
}

namespace {

StatusOr<nlohmann::json> JsonResult(std::string_view what, StatusOr<HttpResponse> r) {
  if (!r.ok()) return r.status();
  GS_RETURN_IF_ERROR(StatusFromResponse(what, *r));
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return Unavailable(std::string(what) + ": the response is not JSON");
  return j;
}

}  // namespace

StatusOr<nlohmann::json> KubeClient::Get(const std::string& path) {
  return JsonResult("GET " + path, Request("GET", path));
}

StatusOr<nlohmann::json> KubeClient::Post(const std::string& path, const nlohmann::json& body) {
  return JsonResult("POST " + path, Request("POST", path, body.dump()));
}

StatusOr<nlohmann::json> KubeClient::Put(const std::string& path, const nlohmann::json& body) {
  return JsonResult("PUT " + path, Request("PUT", path, body.dump()));
}

StatusOr<nlohmann::json> KubeClient::Patch(const std::string& path, const nlohmann::json& patch,
                                           std::string_view content_type) {
  return JsonResult("PATCH " + path, Request("PATCH", path, patch.dump(), content_type));
}

Status KubeClient::Delete(const std::string& path) {
  auto r = Request("DELETE", path);
  if (!r.ok()) return r.status();
  return StatusFromResponse("DELETE " + path, *r);
}

StatusOr<HttpResponse> KubeClient::Stream(const std::string& path,
                                          const std::function<bool(std::string_view)>& on_line,
                                          const std::function<bool()>& cancelled,
                                          int64_t idle_timeout_ms, int64_t total_timeout_ms) {
  Call call;
  call.method = "GET";
  call.path = path;
  call.total_timeout_ms = total_timeout_ms;
  call.idle_timeout_ms = idle_timeout_ms;
  call.on_line = &on_line;
  call.cancelled = &cancelled;
  return Perform(call);
}

}  // namespace gpuslice::daemon::kube
