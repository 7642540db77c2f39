// KubeClient: requests to the Kubernetes API server over HTTPS (libcurl),
// with the bearer token of a TokenFile and the server checked against the
// configured CA bundle (docs/kubernetes.md "API server access").
//
// Errors are Status values that say what the API server said (its Status
// object's message and reason) and map the HTTP code:
//   401 -> kPermissionDenied ("unauthorized": the token was refused; the
//          token file is re-read and the request retried once first)
//   403 -> kPermissionDenied ("forbidden": RBAC)
//   404 -> kNotFound
//   409 -> kAlreadyExists ("conflict": exists, or a stale resourceVersion)
//   410 -> kFailedPrecondition ("gone": the resourceVersion is too old)
//   400/422 -> kInvalidArgument
//   429, 5xx, transport errors and timeouts -> kUnavailable (retry may help)
//
// Thread-safe: each request uses its own curl handle.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/kube/kube_config.h"

namespace gpuslice::daemon::kube {

struct HttpResponse {
  long code = 0;  // NOLINT(google-runtime-int): curl's type
  std::string body;
};

// OK for 2xx; otherwise the mapping above, the message naming `what` (e.g.
// "GET /api/v1/pods"), the code and the server's Status message.
Status StatusFromResponse(std::string_view what, const HttpResponse& response);

// The Kubernetes JSON merge patch and strategic merge patch content types.
inline constexpr const char* kMergePatch = "application/merge-patch+json";

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }

  // One request; `path` starts with '/' and may carry a query. The result is
  // the response whatever its code (kUnavailable only when there is none:
  // connection, TLS or timeout). A 401 re-reads the token file and retries
  // once.
  StatusOr<HttpResponse> Request(std::string_view method, const std::string& path,
                                 const std::string& body = "",
                                 std::string_view content_type = "application/json");

  // JSON helpers: the decoded body of a 2xx response, or the mapped error.
  StatusOr<nlohmann::json> Get(const std::string& path);
  StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  StatusOr<nlohmann::json> Put(const std::string& path, const nlohmann::json& body);
  StatusOr<nlohmann::json> Patch(const std::string& path, const nlohmann::json& patch,
                                 std::string_view content_type = kMergePatch);
  Status Delete(const std::string& path);

  // One request in flight (the curl callbacks' view of it); opaque to callers.
  struct Call;

  // A streamed GET (a watch): `on_line` gets each newline-terminated line of
  // a 2xx body as it arrives and returns false to stop reading. Returns the
  // response (body: only a non-2xx response's) when the server ends it,
  // `on_line` stops, or `cancelled()` (polled at least every 100 ms) turns
  // true; kUnavailable for a transport error, for no complete line for
  // `idle_timeout_ms` (0: no limit; a watch that gets not even a bookmark is
  // dead or stuck, whether or not bytes trickle in; checked about once a
  // second) or the whole stream lasting past `total_timeout_ms`.
  StatusOr<HttpResponse> Stream(const std::string& path,
                                const std::function<bool(std::string_view line)>& on_line,
                                const std::function<bool()>& cancelled, int64_t idle_timeout_ms,
                                int64_t total_timeout_ms);

 private:
  StatusOr<HttpResponse> Perform(Call& call);

  const KubeConfig config_;
  std::unique_ptr<TokenFile> token_;  // null without a token file
};

}  // namespace gpuslice::daemon::kube
