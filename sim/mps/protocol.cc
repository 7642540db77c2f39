#include "sim/mps/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "common/unique_fd.h"

namespace gpuslice::sim::mps {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

std::string PipeDirectory() { return EnvOr("CUDA_MPS_PIPE_DIRECTORY", kDefaultPipeDirectory); }
std::string LogDirectory() { return EnvOr("CUDA_MPS_LOG_DIRECTORY", kDefaultLogDirectory); }
std::string SocketPath(const std::string& pipe_dir) { return pipe_dir + "/control"; }

StatusOr<std::string> Request(const std::string& pipe_dir, std::string_view line, int timeout_ms) {
  const std::string path = SocketPath(pipe_dir);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("MPS pipe directory path too long: " + pipe_dir);
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unavailable(std::string("socket: ") + strerror(errno));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return NotFound("no MPS control daemon at " + pipe_dir + ": " + strerror(errno));
  }
  std::string out(line);
  out += '\n';
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("MPS control daemon closed the connection");
    sent += static_cast<size_t>(n);
  }
  shutdown(fd.get(), SHUT_WR);
  std::string reply;
  const int64_t deadline = MonotonicNs() + int64_t{timeout_ms} * 1'000'000;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) return Unavailable("MPS control daemon did not answer in time");
    pollfd p{fd.get(), POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(std::string("reading the MPS reply: ") + strerror(errno));
    if (n == 0) return reply;
    reply.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace gpuslice::sim::mps
