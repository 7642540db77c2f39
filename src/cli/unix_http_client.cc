#include "cli/unix_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/unique_fd.h"
#include "gpuslice/paths.h"

namespace gpuslice::cli {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, int64_t{24} * 3600 * 1000));
}

// A connected socket to `a` (the caller closes it), or why there is none.
StatusOr<int> Connect(const DaemonAddress& a) {
  const std::string hint = " (is the daemon running? --socket or GPUSLICE_SOCKET)";
  if (a.host.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (a.unix_path.size() >= sizeof addr.sun_path) {
      return InvalidArgument("socket path too long: " + a.unix_path);
    }
    memcpy(addr.sun_path, a.unix_path.c_str(), a.unix_path.size() + 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Unavailable(std::string("socket: ") + strerror(errno));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      const int e = errno;
      close(fd);
      return Unavailable("cannot reach " + a.Where() + ": " + strerror(e) + hint);
    }
    return fd;
  }
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, a.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(a.port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, a.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(a.port);
    len = sizeof *v6;
  } else {
    return InvalidArgument("not a numeric address: " + a.host);
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int e = errno;
    close(fd);
    return Unavailable("cannot reach " + a.Where() + ": " + strerror(e) + hint);
  }
  return fd;
}

std::string RequestText(const DaemonAddress& a, const std::string& method,
                        const std::string& target, const std::string& body, const char* accept) {
  std::string request = method + " " + target +
                        " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                        "User-Agent: gpuslice\r\nAccept: " +
                        accept + "\r\n";
  if (!a.host.empty() && !a.token.empty()) request += "Authorization: Bearer " + a.token + "\r\n";
  if (!body.empty() || method == "PUT" || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  return request;
}

// Sends all of `request` before `deadline`. A daemon that refuses the
// connection (503, too many connections) answers and closes without reading:
// then the rest is dropped and its answer read.
Status SendAll(int fd, const std::string& request, Clock::time_point deadline,
               const std::string& where) {
  size_t sent = 0;
  while (sent < request.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) <= 0)
      return Unavailable("timed out sending to " + where);
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return Unavailable("cannot send to " + where + ": " + strerror(errno));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  return {};
}

// Reads what is there within `timeout_ms`: 1 bytes appended, 0 the peer
// closed, -1 nothing yet, or an error.
StatusOr<int> ReadSome(int fd, int timeout_ms, std::string& into, const std::string& where) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms);
    if (ready == 0) return -1;
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("poll: ") + strerror(errno));
    }
    char buf[16384];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) return 0;
      return Unavailable("cannot read from " + where + ": " + strerror(errno));
    }
    if (n == 0) return 0;
    into.append(buf, static_cast<size_t>(n));
    return 1;
  }
}

}  // namespace

std::string DaemonSocket(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = getenv(kEnvDaemonSocket);
  if (env != nullptr && *env != '\0') return env;
  return kDefaultDaemonSocket;
}

StatusOr<DaemonAddress> ParseDaemonAddress(const std::string& endpoint) {
  DaemonAddress a;
  const std::string e = DaemonSocket(endpoint);
  if (!e.starts_with("tcp:")) {
    a.unix_path = e;
    return a;
  }
  std::string rest = e.substr(4);
  if (rest.starts_with("//")) rest = rest.substr(2);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("daemon address '" + e + "': expected tcp:HOST:PORT");
  }
  a.host = rest.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  const std::string port = rest.substr(colon + 1);
  char* end = nullptr;
  const unsigned long p = strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p == 0 || p > 65535) {
    return InvalidArgument("daemon address '" + e + "': port must be 1-65535");
  }
  a.port = static_cast<uint16_t>(p);
  if (const char* token = getenv("GPUSLICE_DAEMON_TOKEN"); token != nullptr) a.token = token;
  return a;
}

StatusOr<HttpReply> HttpExchange(const DaemonAddress& address, const std::string& method,
                                 const std::string& target, const std::string& body,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = address.Where();
  auto connected = Connect(address);
  if (!connected.ok()) return connected.status();
  const UniqueFd fd(*connected);
  if (Status s = SendAll(fd.get(), RequestText(address, method, target, body, "application/json"),
                         deadline, where);
      !s.ok()) {
    return s;
  }
  const HttpReplyLimits limits{.max_header_bytes = HttpReplyLimits().max_header_bytes,
                               .max_body_bytes = kMaxDaemonReplyBytes,
                               .head = method == "HEAD"};
  std::string raw;
  for (;;) {
    auto got = ReadSome(fd.get(), RemainingMs(deadline), raw, where);
    if (!got.ok()) return got.status();
    if (*got == -1) return Unavailable("timed out waiting for " + where);
    if (*got == 0 && raw.empty()) {
      return Unavailable(where + " closed the connection without answering");
    }
    auto reply = ParseHttpReply(raw, /*at_eof=*/*got == 0, limits);
    if (!reply.ok())
      return Internal(where + " sent a reply the CLI cannot read: " + reply.status().message());
    if (reply->has_value()) return std::move(**reply);
  }
}

Status HttpStream(const DaemonAddress& address, const std::string& target,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds tick,
                  std::chrono::milliseconds idle,
                  const std::function<bool(std::string_view)>& on_bytes) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = address.Where();
  auto connected = Connect(address);
  if (!connected.ok()) return connected.status();
  const UniqueFd fd(*connected);
  if (Status s = SendAll(fd.get(), RequestText(address, "GET", target, "", "text/event-stream"),
                         deadline, where);
      !s.ok()) {
    return s;
  }
  std::string raw;
  size_t header_end = std::string::npos;
  while (header_end == std::string::npos) {
    auto got = ReadSome(fd.get(), RemainingMs(deadline), raw, where);
    if (!got.ok()) return got.status();
    if (*got == -1) return Unavailable("timed out waiting for " + where);
    header_end = raw.find("\r\n\r\n");
    if (*got == 0 && header_end == std::string::npos) {
      return Unavailable(where + " closed the event stream");
    }
  }
  HttpReplyLimits head_only;
  head_only.head = true;
  auto parsed =
      ParseHttpReply(std::string_view(raw).substr(0, header_end + 4), /*at_eof=*/false, head_only);
  if (!parsed.ok()) {
    return Internal(where + " sent a reply the CLI cannot read: " + parsed.status().message());
  }
  const std::optional<HttpReply>& head = *parsed;
  if (!head) return Internal(where + " sent an incomplete reply head");
  if (head->status != 200) {
    return Unavailable(where + " answered HTTP " + std::to_string(head->status) + " to GET " +
                       target);
  }
  std::string data = raw.substr(header_end + 4);
  auto last_data = Clock::now();
  for (;;) {
    if (!data.empty()) last_data = Clock::now();
    if (!on_bytes(data)) return {};
    data.clear();
    if (Clock::now() - last_data > idle) {
      return Unavailable(where + " sent nothing on the event stream for " +
                         std::to_string(idle.count()) + " ms");
    }
    auto got = ReadSome(fd.get(), static_cast<int>(tick.count()), data, where);
    if (!got.ok()) return got.status();
    if (*got == 0) return Unavailable(where + " closed the event stream");
  }
}

StatusOr<HttpReply> UnixHttpClient::Request(const std::string& method, const std::string& target,
                                            const std::string& body) const {
  DaemonAddress a;
  a.unix_path = socket_path_;
  return HttpExchange(a, method, target, body, timeout_);
}

}  // namespace gpuslice::cli
