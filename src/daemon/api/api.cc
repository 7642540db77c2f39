#include "daemon/api/api.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace gpuslice::daemon {
namespace {

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.emplace_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

bool IsParam(const std::string& segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

}  // namespace

ApiResponse ApiResponse::Json(int status, const nlohmann::json& value) {
  ApiResponse r;
  r.status = status;
  // Strings from outside (a path, a name) may not be UTF-8: replaced, not thrown.
  r.body = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

ApiResponse ApiResponse::FromStatus(const Status& status) {
  return Json(
      HttpStatusOf(status.code()),
      {{"error",
        {{"code", std::string(StatusCodeName(status.code()))}, {"message", status.message()}}}});
}

// NOLINTNEXTLINE(performance-unnecessary-value-param): api.h's contract, kept as written.
void ApiRouter::Add(std::string method, std::string pattern, Access access, Handler handler) {
  Add(std::move(method), std::string_view(pattern), access, Dispatch::kBlocking,
      std::move(handler));
}

void ApiRouter::Add(std::string method, std::string_view pattern, Access access, Dispatch dispatch,
                    Handler handler) {
  routes_.push_back(
      Route{std::move(method), SplitPath(pattern), access, std::move(handler), dispatch});
}

StatusOr<ApiRouter::Match> ApiRouter::Find(std::string_view method, std::string_view path) const {
  const std::vector<std::string> segments = SplitPath(path);
  const Route* best = nullptr;
  int best_literals = -1;
  bool path_matched = false;
  for (const Route& r : routes_) {
    if (r.segments.size() != segments.size()) continue;
    int literals = 0;
    bool ok = true;
    for (size_t i = 0; i < segments.size() && ok; ++i) {
      if (IsParam(r.segments[i])) continue;
      ok = r.segments[i] == segments[i];
      ++literals;
    }
    if (!ok) continue;
    path_matched = true;
    if (r.method == method && literals > best_literals) {
      best = &r;
      best_literals = literals;
    }
  }
  if (best == nullptr) {
    if (path_matched) {
      return FailedPrecondition("method not allowed: " + std::string(method) + " " +
                                std::string(path));
    }
    return NotFound("no such endpoint: " + std::string(path));
  }
  Match m{&best->handler, best->access, {}, best->dispatch};
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string& s = best->segments[i];
    if (IsParam(s)) m.params[s.substr(1, s.size() - 2)] = segments[i];
  }
  return m;
}

namespace {
constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
}  // namespace

std::optional<TcpEndpoint> EndpointOf(const sockaddr* address, socklen_t length) {
  TcpEndpoint e;
  if (address->sa_family == AF_INET && length >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    std::memcpy(e.address.data(), &in->sin_addr, 4);
    e.port = ntohs(in->sin_port);
    return e;
  }
  if (address->sa_family == AF_INET6 && length >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    std::memcpy(e.address.data(), &in6->sin6_addr, 16);
    e.port = ntohs(in6->sin6_port);
    e.v4 = std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), e.address.begin());
    if (e.v4) {
      std::memmove(e.address.data(), e.address.data() + 12, 4);
      std::fill(e.address.begin() + 4, e.address.end(), 0);
    }
    return e;
  }
  return std::nullopt;
}

std::string EndpointText(const TcpEndpoint& endpoint) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(endpoint.v4 ? AF_INET : AF_INET6, endpoint.address.data(), text, sizeof(text));
  const std::string port = std::to_string(endpoint.port);
  return endpoint.v4 ? std::string(text) + ":" + port : "[" + std::string(text) + "]:" + port;
}

}  // namespace gpuslice::daemon
