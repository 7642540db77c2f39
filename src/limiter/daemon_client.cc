#include "limiter/daemon_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include "common/quantity.h"
#include "common/unique_fd.h"
#include "nlohmann/json.hpp"

namespace gpuslice::limiter {
namespace {

using json = nlohmann::json;

std::string ErrnoText(const char* what) { return std::string(what) + ": " + strerror(errno); }

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

StatusOr<DaemonAddress> DaemonAddressFromEnv(const EnvLookup& env) {
  try {
    DaemonAddress endpoint;
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      const char* v = env(name);
      if (v == nullptr || *v == '\0') return std::nullopt;
      return std::string(Trim(v));
    };
    if (auto socket = value(kEnvDaemonSocket)) endpoint.unix_path = *socket;
    const auto ip = value(kEnvHypervisorIp);
    const auto port = value(kEnvHypervisorPort);
    if (!ip && !port) return endpoint;
    if (!ip || !port) {
      return InvalidArgument(std::string(ip ? kEnvHypervisorPort : kEnvHypervisorIp) +
                             ": not set, but " +
                             std::string(ip ? kEnvHypervisorIp : kEnvHypervisorPort) +
                             " is (the daemon's TCP address needs both)");
    }
    in6_addr any6{};
    in_addr any4{};
    if (inet_pton(AF_INET, ip->c_str(), &any4) != 1 &&
        inet_pton(AF_INET6, ip->c_str(), &any6) != 1) {
      return InvalidArgument(std::string(kEnvHypervisorIp) + ": '" + ip->substr(0, 64) +
                             "' is not a numeric IPv4 or IPv6 address");
    }
    uint32_t n = 0;
    auto [end, ec] = std::from_chars(port->data(), port->data() + port->size(), n);
    if (ec != std::errc() || end != port->data() + port->size() || n < 1 || n > 65535) {
      return InvalidArgument(std::string(kEnvHypervisorPort) + ": '" + port->substr(0, 64) +
                             "' is not a port (expected 1-65535)");
    }
    endpoint.host = *ip;
    endpoint.port = static_cast<uint16_t>(n);
    if (auto token = value(kEnvDaemonToken)) endpoint.token = *token;
    return endpoint;
  } catch (const std::exception& e) {
    return Internal(std::string("reading the daemon's address: ") + e.what());
  }
}

StatusOr<std::string> RegistrationBody(const RegistrationRequest& request) {
  try {
    json body = json::object();
    body["group"] = request.group;
    body["devices"] = request.devices;
    auto limit_json = [](const DeviceLimits& l) {
      json out = json::object();
      if (l.memory_bytes) out["memory"] = *l.memory_bytes;
      if (l.compute_percent) out["compute_percent"] = *l.compute_percent;
      return out;
    };
    const std::vector<DeviceLimits>& limits = request.limits;
    const bool same = std::all_of(limits.begin(), limits.end(), [&](const DeviceLimits& l) {
      return l.memory_bytes == limits.front().memory_bytes &&
             l.compute_percent == limits.front().compute_percent;
    });
    if (!limits.empty() && same) {
      json one = limit_json(limits.front());
      if (!one.empty()) body["limits"] = std::move(one);
    } else if (!limits.empty()) {
      json by_gpu = json::object();
      for (size_t i = 0; i < limits.size() && i < request.devices.size(); ++i) {
        json one = limit_json(limits[i]);
        if (!one.empty()) by_gpu[request.devices[i]] = std::move(one);
      }
      if (!by_gpu.empty()) body["limits"] = std::move(by_gpu);
    }
    if (request.schedule) {
      json schedule = json::object();
      if (request.schedule->request_percent)
        schedule["request"] = *request.schedule->request_percent;
      if (request.schedule->priority) schedule["priority"] = *request.schedule->priority;
      if (request.schedule->weight) schedule["weight"] = *request.schedule->weight;
      body["schedule"] = std::move(schedule);
    }
    if (request.pid > 0) body["pid"] = request.pid;
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

StatusOr<std::string> RegistrationHttpRequest(const RegistrationRequest& request,
                                              std::string_view token) {
  GS_ASSIGN_OR_RETURN(std::string body, RegistrationBody(request));
  try {
    std::string out =
        "POST /v1/tenants HTTP/1.1\r\n"
        "Host: localhost\r\n"
        "User-Agent: libgpuslice\r\n"
        "Content-Type: application/json\r\n"
        "Connection: close\r\n";
    if (!token.empty()) {
      out += "Authorization: Bearer ";
      out += token;
      out += "\r\n";
    }
    out += "Content-Length: ";
    out += std::to_string(body.size());
    out += "\r\n\r\n";
    out += body;
    return out;
  } catch (const std::bad_alloc&) {
    return Internal("out of memory building the registration");
  }
}

RegistrationResult InterpretReply(const HttpReply& reply, std::string_view group) {
  RegistrationResult result;
  result.http_status = reply.status;
  try {
    if (reply.status == 201) {
      result.outcome = RegistrationResult::Outcome::kRegistered;
      const json body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
      if (!body.is_object()) return result;
      if (auto env = body.find("env"); env != body.end() && env->is_object()) {
        for (const auto& [name, value] : env->items()) {
          if (value.is_string() && !name.empty() && name.find('=') == std::string::npos) {
            result.env[name] = value.get<std::string>();
          }
        }
      }
      if (auto why = body.find("schedule_refused"); why != body.end() && why->is_string()) {
        result.schedule_refused = why->get<std::string>();
      }
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

namespace {

// Connects a non-blocking stream socket of `domain` to `addr`, sends
// `request` and reads the reply, all before `end_ns` (CLOCK_MONOTONIC).
StatusOr<HttpReply> Exchange(int domain, const sockaddr* addr, socklen_t addr_len,
                             std::string_view request, int64_t end_ns) {
  UniqueFd fd(socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unavailable(ErrnoText("socket"));
  if (connect(fd.get(), addr, addr_len) != 0) {
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

int64_t EndNs(std::chrono::milliseconds deadline) {
  return MonotonicNs() + std::chrono::nanoseconds(deadline).count();
}

}  // namespace

StatusOr<HttpReply> ExchangeOverUnixSocket(const std::string& path, std::string_view request,
                                           std::chrono::milliseconds deadline) {
  const int64_t end_ns = EndNs(deadline);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Unavailable("the socket path '" + path + "' is empty or too long");
  }
  memcpy(addr.sun_path, path.data(), path.size());
  return Exchange(AF_UNIX, reinterpret_cast<const sockaddr*>(&addr), sizeof addr, request, end_ns);
}

StatusOr<HttpReply> ExchangeOverTcp(const std::string& host, uint16_t port,
                                    std::string_view request, std::chrono::milliseconds deadline) {
  const int64_t end_ns = EndNs(deadline);
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    return Exchange(AF_INET, reinterpret_cast<const sockaddr*>(&v4), sizeof v4, request, end_ns);
  }
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(port);
  if (inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
    return Exchange(AF_INET6, reinterpret_cast<const sockaddr*>(&v6), sizeof v6, request, end_ns);
  }
  return Unavailable("'" + host + "' is not a numeric IPv4 or IPv6 address");
}

RegistrationResult Register(const DaemonAddress& endpoint, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline) {
  RegistrationResult result;
  try {
    auto http = RegistrationHttpRequest(request, endpoint.tcp() ? endpoint.token : "");
    if (!http.ok()) {
      result.message = http.status().message();
      return result;
    }
    auto reply = endpoint.tcp() ? ExchangeOverTcp(endpoint.host, endpoint.port, *http, deadline)
                                : ExchangeOverUnixSocket(endpoint.unix_path, *http, deadline);
    if (!reply.ok()) {
      result.message = reply.status().message();
      return result;
    }
    result = InterpretReply(*reply, request.group);
    if (request.schedule && reply->status == 400 &&
        result.message.find(R"(unknown field "schedule")") != std::string::npos) {
      // A daemon without the scheduler: registered without the schedule.
      RegistrationRequest plain = request;
      plain.schedule.reset();
      result = Register(endpoint, plain, deadline);
      if (result.outcome == RegistrationResult::Outcome::kRegistered) {
        result.schedule_refused = "this gpusliced does not take a schedule at registration";
      }
    }
    return result;
  } catch (const std::exception& e) {
    result.outcome = RegistrationResult::Outcome::kUnavailable;
    result.message = e.what();
    return result;
  }
}

RegistrationResult Register(const std::string& socket_path, const RegistrationRequest& request,
                            std::chrono::milliseconds deadline) {
  try {
    DaemonAddress endpoint;
    endpoint.unix_path = socket_path;
    return Register(endpoint, request, deadline);
  } catch (const std::exception& e) {
    RegistrationResult result;
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
