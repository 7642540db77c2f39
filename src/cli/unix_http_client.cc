#include "cli/unix_http_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/unique_fd.h"

namespace gpuslice::cli {
namespace {

int64_t RemainingMs(std::chrono::steady_clock::time_point deadline) {
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  deadline - std::chrono::steady_clock::now())
                                  .count());
}

}  // namespace

std::string DaemonSocket(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = getenv("GPUSLICE_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return "/run/gpuslice/gpusliced.sock";
}

StatusOr<HttpResponse> UnixHttpClient::Request(const std::string& method, const std::string& target,
                                               const std::string& body) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const std::string where = "gpusliced at " + socket_path_;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof addr.sun_path) {
    return InvalidArgument("socket path too long: " + socket_path_);
  }
  memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unavailable(std::string("socket: ") + strerror(errno));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Unavailable("cannot reach " + where + ": " + strerror(errno) +
                       " (is the daemon running? --socket or GPUSLICE_SOCKET)");
  }
  std::string request = method + " " + target +
                        " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                        "User-Agent: gpuslice\r\nAccept: application/json\r\n";
  if (!body.empty() || method == "PUT" || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  size_t sent = 0;
  while (sent < request.size()) {
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(RemainingMs(deadline))) <= 0) {
      return Unavailable("timed out sending to " + where);
    }
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    // A daemon that refuses the connection (503, too many connections) answers
    // and closes without reading: read its answer.
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return Unavailable("cannot send to " + where + ": " + strerror(errno));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(RemainingMs(deadline)));
    if (ready == 0) return Unavailable("timed out waiting for " + where);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("poll: ") + strerror(errno));
    }
    const ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET && !raw.empty()) break;
      return Unavailable("cannot read from " + where + ": " + strerror(errno));
    }
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  return ParseHttpResponse(raw);
}

StatusOr<HttpResponse> ParseHttpResponse(const std::string& raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
    return Internal("malformed HTTP response from the daemon");
  }
  HttpResponse r;
  const size_t sp = raw.find(' ');
  if (sp == std::string::npos || sp + 4 > end) return Internal("malformed HTTP status line");
  r.status = atoi(raw.c_str() + sp + 1);
  size_t line = raw.find("\r\n") + 2;
  while (line < end) {
    const size_t eol = raw.find("\r\n", line);
    const std::string h = raw.substr(line, eol - line);
    const size_t colon = h.find(':');
    if (colon != std::string::npos) {
      std::string name = h.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      const size_t v = h.find_first_not_of(' ', colon + 1);
      r.headers[name] = v == std::string::npos ? "" : h.substr(v);
    }
    line = eol + 2;
  }
  r.body = raw.substr(end + 4);
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    const size_t length = strtoull(it->second.c_str(), nullptr, 10);
    if (r.body.size() < length) return Internal("truncated HTTP response from the daemon");
    r.body.resize(length);
  }
  return r;
}

}  // namespace gpuslice::cli
