// The daemon's API surface, independent of HTTP: every part of gpusliced
// (GPUs, MPS, ...) registers its routes on an ApiRouter; the HTTP server
// (src/daemon/http) parses requests, identifies the caller, authorises
// mutating routes, and hands the rest to the router.
//
// Thread safety: an ApiRouter is filled before the server starts and is
// read-only afterwards; handlers may be called from several threads at once.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpuslice::daemon {

// One end of a TCP connection: an IPv4 address (the first 4 bytes; an
// IPv4-mapped IPv6 address is stored so) or an IPv6 one, and a port.
struct TcpEndpoint {
  std::array<uint8_t, 16> address{};
  bool v4 = true;
  uint16_t port = 0;

  bool operator==(const TcpEndpoint&) const = default;
};
// The endpoint of a socket address (AF_INET or AF_INET6; an IPv4-mapped IPv6
// address becomes IPv4); nullopt for another family.
std::optional<TcpEndpoint> EndpointOf(const sockaddr* address, socklen_t length);
// "10.0.0.5:40000" or "[fd00::1]:40000", for messages.
std::string EndpointText(const TcpEndpoint& endpoint);

// Who is calling. Over the Unix socket uid/gid/pid come from SO_PEERCRED;
// over TCP they are unset, `token_ok` says whether a valid bearer token was
// presented, and the connection's ends are known (`tcp_client`, the caller's;
// `tcp_server`, ours).
struct Caller {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<pid_t> pid;
  bool via_tcp = false;
  bool token_ok = false;
  std::optional<TcpEndpoint> tcp_client = std::nullopt;
  std::optional<TcpEndpoint> tcp_server = std::nullopt;
};

struct ApiRequest {
  std::string method;                         // "GET", "PUT", "POST", "DELETE"
  std::string path;                           // "/v1/gpus/0/power-limit", no query
  std::map<std::string, std::string> query;   // decoded ?key=value pairs
  std::map<std::string, std::string> params;  // "{name}" segments of the route pattern
  std::string body;
  Caller caller;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Further response headers (name, value), e.g. the dashboard's caching and
  // Content-Security-Policy; the server adds Server, Content-Type and Content-Length.
  std::vector<std::pair<std::string, std::string>> headers;

  static ApiResponse Json(int status, const nlohmann::json& value);
  // {"error": {"code": "INVALID_ARGUMENT", "message": ...}} with the HTTP status
  // that matches the Status code (400, 404, 403, 409, 503, 500...).
  static ApiResponse FromStatus(const Status& status);
};

// Whether a route changes state. Mutating routes are refused with 403 unless
// the caller is root, in the configured group, or (TCP) holds a token.
enum class Access { kRead, kMutate };

// Where the server runs a handler. kInline: on the I/O thread, for handlers
// that only read memory (snapshots) and return at once. kBlocking (the
// default): on a worker pool, for handlers that wait (GPU commands, MPS).
enum class Dispatch { kInline, kBlocking };

class ApiRouter {
 public:
  using Handler = std::function<ApiResponse(const ApiRequest&)>;

  // `pattern` is a path with "{name}" segments, e.g. "/v1/gpus/{ids}/{setting}";
  // a "{name}" matches exactly one non-empty segment.
  void Add(std::string method, std::string pattern, Access access, Handler handler);
  void Add(std::string method, std::string_view pattern, Access access, Dispatch dispatch,
           Handler handler);

  struct Match {
    const Handler* handler;
    Access access;
    std::map<std::string, std::string> params;
    Dispatch dispatch = Dispatch::kBlocking;
  };
  // The route for `method` + `path`; NotFound (404) when no pattern matches the
  // path, FailedPrecondition with "method not allowed" when the path matches
  // but the method does not (the server answers 405). When several patterns
  // match, the one with the most literal segments wins.
  StatusOr<Match> Find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    Access access;
    Handler handler;
    Dispatch dispatch = Dispatch::kBlocking;
  };
  std::vector<Route> routes_;
};

}  // namespace gpuslice::daemon
