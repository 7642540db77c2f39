#include "daemon/kube/kube_config.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "common/quantity.h"

namespace gpuslice::daemon::kube {
namespace {

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Unavailable("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(Trim(ss.str()));
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

StatusOr<KubeConfig> InClusterConfig(const std::function<const char*(const char*)>& getenv,
                                     const std::string& sa_dir) {
  const char* host = getenv("KUBERNETES_SERVICE_HOST");
  const char* port = getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "not in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset");
  }
  KubeConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_file = sa_dir + "/ca.crt";
  for (const std::string& f : {c.token_file, c.ca_file}) {
    if (!Exists(f)) {
      return FailedPrecondition("no service account mounted: " + f + " does not exist");
    }
  }
  if (auto ns = ReadSmallFile(sa_dir + "/namespace"); ns.ok()) c.namespace_ = *ns;
  return c;
}

StatusOr<KubeConfig> ExplicitConfig(std::string server, std::string ca_file,
                                    std::string token_file) {
  if (!server.starts_with("https://") && !server.starts_with("http://")) {
    return InvalidArgument("Kubernetes API server \"" + server +
                           "\" is not an http:// or https:// URL");
  }
  while (server.ends_with('/')) server.pop_back();
  KubeConfig c;
  c.server = std::move(server);
  c.ca_file = std::move(ca_file);
  c.token_file = std::move(token_file);
  return c;
}

StatusOr<std::string> TokenFile::Get() {
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    return Unavailable("token file " + path_ + " cannot be read");
  }
  Identity id{st.st_ino, st.st_size,
              int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
  MutexLock lock(mu_);
  if (!seen_ || *seen_ != id || token_.empty()) {
    auto text = ReadSmallFile(path_);
    ++reads_;
    if (!text.ok()) return text.status();
    token_ = std::move(*text);
    seen_ = id;
  }
  if (token_.empty()) return Unavailable("token file " + path_ + " is empty");
  return token_;
}

void TokenFile::Invalidate() {
  MutexLock lock(mu_);
  seen_.reset();
}

uint64_t TokenFile::reads() const {
  MutexLock lock(mu_);
  return reads_;
}

}  // namespace gpuslice::daemon::kube
