// Where the Kubernetes API server is and how to authenticate to it
// (docs/kubernetes.md "API server access").
//
// Two sources: the in-cluster configuration a pod gets (the service host and
// port in the environment, the service account's token, CA bundle and
// namespace under /var/run/secrets/kubernetes.io/serviceaccount), or an
// explicit one (server URL, CA file, token file) for tests and for a daemon
// run off-cluster.
//
// The token is a file, never a string held for the process's life: projected
// service account tokens rotate (the kubelet rewrites the file), so TokenFile
// re-reads it whenever the file changes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace gpuslice::daemon::kube {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeConfig {
  std::string server;      // "https://host:port", no trailing slash
  std::string ca_file;     // PEM bundle the server's certificate must chain to; "" = system CAs
  std::string token_file;  // bearer token; "" = no Authorization header
  std::string namespace_;  // the pod's namespace ("" off-cluster)
  int64_t connect_timeout_ms = 5'000;
  int64_t request_timeout_ms = 30'000;  // a whole non-watch request
};

// The in-cluster configuration: KUBERNETES_SERVICE_HOST/_PORT from `getenv`,
// the token, ca.crt and namespace from `sa_dir`. kFailedPrecondition naming
// what is missing (not in a pod, or no service account mounted). An IPv6
// host is bracketed.
StatusOr<KubeConfig> InClusterConfig(const std::function<const char*(const char*)>& getenv,
                                     const std::string& sa_dir = kServiceAccountDir);

// An explicit configuration. kInvalidArgument unless `server` is an
// http(s):// URL; the files are checked when used.
StatusOr<KubeConfig> ExplicitConfig(std::string server, std::string ca_file,
                                    std::string token_file);

// A bearer token read from a file, re-read whenever the file's identity
// (inode, size, modification time) changes, so a rotated token is used from
// the next request on. Invalidate() forces a re-read (after a 401).
// Thread-safe.
class TokenFile {
 public:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}

  // The token, whitespace trimmed. kUnavailable naming the file when it
  // cannot be read or is empty (a previously read token is not reused: a
  // removed token file means the credential is gone).
  StatusOr<std::string> Get();
  void Invalidate();
  uint64_t reads() const;  // how many times the file was read

 private:
  struct Identity {
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Identity&) const = default;
  };
  const std::string path_;
  mutable Mutex mu_;
  std::optional<Identity> seen_ GUARDED_BY(mu_);
  std::string token_ GUARDED_BY(mu_);
  uint64_t reads_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpuslice::daemon::kube
