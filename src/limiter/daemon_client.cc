#include "limiter/daemon_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "nlohmann/json.hpp"

namespace gpuslice::limiter {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxHeaderBytes = size_t{64} * 1024;
constexpr size_t kMaxBodyBytes = size_t{1024} * 1024;

std::string ErrnoText(const char* what) { return std::string(what) + ": " + strerror(errno); }

// Case-insensitive ASCII comparison.
bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
           return lower(x) == lower(y);
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Waits until `fd` is ready for `events` or `end_ns` (CLOCK_MONOTONIC)
// passes. OK when ready (or when poll reports an error condition, which the
// next call on the socket reports properly).
Status WaitReady(int fd, short events, int64_t end_ns, const char* doing) {
  for (;;) {
    const int64_t left_ns = end_ns - MonotonicNs();
    if (left_ns <= 0) return Unavailable("no answer in time while " + std::string(doing));
    pollfd p{fd, events, 0};
    const int timeout_ms = static_cast<int>((left_ns + 999'999) / 1'000'000);
    const int rc = poll(&p, 1, timeout_ms);
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return Unavailable(ErrnoText("poll"));
  }
}

std::string ErrorMessage(const HttpReply& reply) {
  const json body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object()) {
    auto error = body.find("error");
    if (error != body.end() && error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) return message->get<std::string>();
    }
  }
  std::string text = reply.body.substr(0, 200);
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c < ' ' && c != '\t'; }, ' ');
  return text.empty() ? "HTTP " + std::to_string(reply.status) : text;
}

}  // namespace

void RequestLimits(std::span<const DeviceLimits> devices, RegistrationRequest& request) {
  request.memory_bytes.reset();
  request.compute_percent.reset();
  if (devices.empty()) return;
  const DeviceLimits& first = devices.front();
  const bool same_memory = std::all_of(devices.begin(), devices.end(), [&](const DeviceLimits& d) {
    return d.memory_bytes == first.memory_bytes;
  });
  const bool same_compute = std::all_of(devices.begin(), devices.end(), [&](const DeviceLimits& d) {
    return d.compute_percent == first.compute_percent;
  });
  if (same_memory) request.memory_bytes = first.memory_bytes;
  if (same_compute) request.compute_percent = first.compute_percent;
}

StatusOr<std::string> RegistrationBody(const RegistrationRequest& request) {
  try {
    json body = json::object();
    body["group"] = request.group;
    body["devices"] = request.devices;
    json limits = json::object();
    if (request.memory_bytes) limits["memory"] = *request.memory_bytes;
    if (request.compute_percent) limits["compute_percent"] = *request.compute_percent;
    if (!limits.empty()) body["limits"] = std::move(limits);
    json hints = json::object();
    if (!request.pod_name.empty()) hints["pod_name"] = request.pod_name;
    if (!request.pod_namespace.empty()) hints["pod_namespace"] = request.pod_namespace;
    if (!request.container_name.empty()) hints["container_name"] = request.container_name;
    if (!hints.empty()) body["hints"] = std::move(hints);
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return Internal(std::string("cannot build the registration: ") + e.what());
  }
}

StatusOr<std::string> RegistrationHttpRequest(const RegistrationRequest& request) {
  GS_ASSIGN_OR_RETURN(std::string body, RegistrationBody(request));
  try {
    std::string out =
        "POST /v1/tenants HTTP/1.1\r\n"
        "Host: localhost\r\n"
        "User-Agent: libgpuslice\r\n"
        "Content-Type: application/json\r\n"
        "Connection: close\r\n"
        "Content-Length: ";
    out += std::to_string(body.size());
    out += "\r\n\r\n";
    out += body;
    return out;
  } catch (const std::bad_alloc&) {
    return Internal("out of memory building the registration");
  }
}

StatusOr<std::optional<HttpReply>> ParseHttpReply(std::string_view raw, bool at_eof) {
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string_view::npos) {
    if (raw.size() > kMaxHeaderBytes) return InvalidArgument("the reply's headers are too long");
    if (at_eof) return InvalidArgument("the daemon closed the connection before replying");
    return std::optional<HttpReply>();
  }
  std::string_view head = raw.substr(0, header_end);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  const std::string_view status_line = head.substr(0, line_end);
  // "HTTP/1.1 201 Created"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return InvalidArgument("not an HTTP/1.x reply");
  }
  int status = 0;
  const char* code = status_line.data() + 9;
  auto [end, ec] = std::from_chars(code, code + 3, status);
  if (ec != std::errc() || end != code + 3 || status < 100 || status > 599 ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return InvalidArgument("the reply's status line is malformed");
  }
  std::optional<size_t> content_length;
  std::string_view rest = head.substr(line_end);
  while (!rest.empty()) {
    rest.remove_prefix(std::min<size_t>(2, rest.size()));  // "\r\n"
    const size_t next = std::min(rest.find("\r\n"), rest.size());
    const std::string_view line = rest.substr(0, next);
    rest.remove_prefix(next);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = Trim(line.substr(0, colon));
    const std::string_view value = Trim(line.substr(colon + 1));
    if (EqualsNoCase(name, "content-length")) {
      size_t n = 0;
      auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (e != std::errc() || p != value.data() + value.size()) {
        return InvalidArgument("the reply's Content-Length is malformed");
      }
      content_length = n;
    } else if (EqualsNoCase(name, "transfer-encoding") && !EqualsNoCase(value, "identity")) {
      return InvalidArgument("the reply uses a transfer encoding this client does not read");
    }
  }
  const std::string_view body = raw.substr(header_end + 4);
  if (content_length) {
    if (*content_length > kMaxBodyBytes) return InvalidArgument("the reply's body is too large");
    if (body.size() < *content_length) {
      if (at_eof) return InvalidArgument("the daemon closed the connection mid-reply");
      return std::optional<HttpReply>();
    }
    return std::optional<HttpReply>(
        HttpReply{status, std::string(body.substr(0, *content_length))});
  }
  if (body.size() > kMaxBodyBytes) return InvalidArgument("the reply's body is too large");
  if (!at_eof) return std::optional<HttpReply>();
  return std::optional<HttpReply>(HttpReply{status, std::string(body)});
}

RegistrationResult InterpretReply(const HttpReply& reply, std::string_view group) {
  RegistrationResult result;
  result.http_status = reply.status;
  try {
    if (reply.status == 201) {
      result.outcome = RegistrationResult::Outcome::kRegistered;
      const json body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
      if (!body.is_object()) return result;
      auto limits = body.find("effective_limits");
      if (limits == body.end() || !limits->is_object()) return result;
      for (const auto& [uuid, value] : limits->items()) {
        if (!value.is_object()) continue;
        EffectiveLimit e;
        e.uuid = uuid;
        if (auto m = value.find("memory_bytes"); m != value.end() && m->is_number_unsigned()) {
          e.memory_bytes = m->get<uint64_t>();
        }
        if (auto c = value.find("compute_percent"); c != value.end() && c->is_number_unsigned() &&
                                                    c->get<uint64_t>() >= 1 &&
                                                    c->get<uint64_t>() <= 100) {
          e.compute_percent = static_cast<uint32_t>(c->get<uint64_t>());
        }
        result.effective_limits.push_back(std::move(e));
      }
      return result;
    }
    result.message = ErrorMessage(reply);
    if (reply.status == 409) {
      // The registry refuses a process registered in another group with
      // 'process N is registered in group "G"'; any other conflict on a
      // registration of this process means it is known already.
      const bool other_group =
          result.message.find("registered in group \"") != std::string::npos &&
          result.message.find("\"" + std::string(group) + "\"") == std::string::npos;
      result.outcome = other_group ? RegistrationResult::Outcome::kRefused
                                   : RegistrationResult::Outcome::kRegistered;
      return result;
    }
    result.outcome = reply.status >= 400 && reply.status < 500
                         ? RegistrationResult::Outcome::kRefused
                         : RegistrationResult::Outcome::kUnavailable;
  } catch (const std::exception& e) {
    result.outcome = RegistrationResult::Outcome::kUnavailable;
    result.effective_limits.clear();
    result.message = e.what();
  }
  return result;
}

StatusOr<HttpReply> ExchangeOverUnixSocket(const std::string& path, std::string_view request,
                                           std::chrono::milliseconds deadline) {
  const int64_t end_ns = MonotonicNs() + std::chrono::nanoseconds(deadline).count();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Unavailable("the socket path '" + path + "' is empty or too long");
  }
  memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unavailable(ErrnoText("socket"));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) return Unavailable(ErrnoText("connect"));
    GS_RETURN_IF_ERROR(WaitReady(fd.get(), POLLOUT, end_ns, "connecting"));
    int error = 0;
    socklen_t len = sizeof error;
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      errno = error;
      return Unavailable(ErrnoText("connect"));
    }
  }
  while (!request.empty()) {
    const ssize_t n = send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL);
    if (n > 0) {
      request.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GS_RETURN_IF_ERROR(WaitReady(fd.get(), POLLOUT, end_ns, "sending"));
    } else if (n < 0 && errno != EINTR) {
      return Unavailable(ErrnoText("send"));
    }
  }
  std::string received;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        GS_RETURN_IF_ERROR(WaitReady(fd.get(), POLLIN, end_ns, "waiting for the reply"));
        continue;
      }
      if (errno == EINTR) continue;
      return Unavailable(ErrnoText("recv"));
    }
    received.append(buf, static_cast<size_t>(n));
    auto reply = ParseHttpReply(received, /*at_eof=*/n == 0);
    if (!reply.ok()) return Unavailable(reply.status().message());
    if (reply->has_value()) return std::move(**reply);
  }
}

RegistrationResult Register(const std::string& socket_path, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline) {
  RegistrationResult result;
  try {
    auto http = RegistrationHttpRequest(request);
    if (!http.ok()) {
      result.message = http.status().message();
      return result;
    }
    auto reply = ExchangeOverUnixSocket(socket_path, *http, deadline);
    if (!reply.ok()) {
      result.message = reply.status().message();
      return result;
    }
    return InterpretReply(*reply, request.group);
  } catch (const std::exception& e) {
    result.outcome = RegistrationResult::Outcome::kUnavailable;
    result.message = e.what();
    return result;
  }
}

const char* OutcomeName(RegistrationResult::Outcome outcome) {
  switch (outcome) {
    case RegistrationResult::Outcome::kRegistered:
      return "registered";
    case RegistrationResult::Outcome::kRefused:
      return "refused";
    case RegistrationResult::Outcome::kUnavailable:
      return "unavailable";
  }
  return "?";
}

}  // namespace gpuslice::limiter
