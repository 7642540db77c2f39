// FakeKubeApi: a Kubernetes API server for tests (docs/kubernetes.md
// "Tests"), HTTPS on 127.0.0.1 with a CA and a server certificate that the
// `openssl` command makes in a temporary directory when it starts.
//
// It keeps objects in memory under one resourceVersion counter and serves,
// for any resource under /api/v1 and /apis/<group>/<version> (namespaced or
// not): LIST (fieldSelector on spec.nodeName, spec.driver, metadata.name,
// metadata.namespace; labelSelector k=v / k!=v), WATCH from a
// resourceVersion (with allowWatchBookmarks and timeoutSeconds, chunked as a
// real server does), GET, POST, PUT (409 on a stale resourceVersion), PATCH
// (merge patch) and DELETE.
//
// Scriptable faults: a token the server accepts (401 for others), HTTP 410
// on the next watch, an ERROR 410 event on the open watches, compaction
// (watches from an older resourceVersion get 410), dropped connections,
// failing the next N requests with a code, and a delay before each response.
//
// Thread-safe: a thread per connection; tests call it from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace gpuslice::testing {

class FakeKubeApi {
 public:
  // Makes the certificates in `dir` (which must exist) and starts serving.
  static StatusOr<std::unique_ptr<FakeKubeApi>> Start(const std::string& dir);
  ~FakeKubeApi();
  FakeKubeApi(const FakeKubeApi&) = delete;
  FakeKubeApi& operator=(const FakeKubeApi&) = delete;

  std::string url() const;  // "https://127.0.0.1:<port>"
  const std::string& ca_file() const { return ca_file_; }

  // Objects. `collection` is a collection path ("/api/v1/namespaces/default/pods",
  // "/apis/resource.k8s.io/v1/resourceslices"); `path` an object's path.
  // Create fills metadata (uid unless given, resourceVersion, creationTimestamp).
  nlohmann::json Create(const std::string& collection, nlohmann::json object);
  // Applies `change` to the stored object (a MODIFIED event). False if absent.
  bool Modify(const std::string& path, const std::function<void(nlohmann::json&)>& change);
  bool Remove(const std::string& path);  // a DELETED event
  std::optional<nlohmann::json> Get(const std::string& path) const;
  // Every object of a resource: `collection` without a namespace
  // ("/api/v1/pods") lists all namespaces.
  std::vector<nlohmann::json> List(const std::string& collection) const;
  uint64_t resource_version() const;

  // Authentication: only `token` is accepted ("" accepts any, the default).
  void AcceptToken(std::string token);

  // Faults.
  void FailNextWatchWithGone();  // the next WATCH request answers HTTP 410
  void SendGoneToWatches();      // open watches get an ERROR event (410) and end
  void Compact();                // history so far is gone: older resourceVersions get 410
  void DropConnections();        // open watches are cut without a TLS close
  void FailNextRequests(int count, int code);
  void SetDelay(std::chrono::milliseconds delay);  // before every response
  void SendBookmark();                             // to open watches that allowed bookmarks

  struct LoggedRequest {
    std::string method;
    std::string path;  // without the query
    std::map<std::string, std::string> query;
    std::string token;
    int code = 0;
  };
  std::vector<LoggedRequest> Requests() const;
  int open_watches() const;
  // Waits (up to `timeout`) until `pred` holds over the requests served so far.
  bool WaitForRequests(const std::function<bool(const std::vector<LoggedRequest>&)>& pred,
                       std::chrono::milliseconds timeout) const;
  bool WaitForOpenWatches(int n, std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  explicit FakeKubeApi(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string ca_file_;
};

}  // namespace gpuslice::testing
