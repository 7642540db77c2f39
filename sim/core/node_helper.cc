#include "sim/core/node_helper.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/process.h"
#include "sim/core/process_identity.h"

namespace gpuslice::sim {
namespace {

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

// Fills `addr` for `path`; false when the path does not fit sun_path.
bool UnixAddress(const std::string& path, sockaddr_un* addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) return false;
  memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<NodeHelper>> NodeHelper::Start(const std::string& socket_path) {
  sockaddr_un addr{};
  if (!UnixAddress(socket_path, &addr)) {
    return InvalidArgument("node helper socket path is empty or too long: " + socket_path);
  }
  if (AskNodeHelper(socket_path, 1000).ok()) {
    return Status(StatusCode::kAlreadyExists, "a node helper already answers on " + socket_path);
  }
  unlink(socket_path.c_str());  // a stale socket of a helper that is gone
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(Errno("socket"));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0) {
    Status s = Unavailable(Errno("cannot listen on " + socket_path));
    close(fd);
    return s;
  }
  chmod(socket_path.c_str(), 0666);  // every user of the node's simulation asks it
  std::unique_ptr<NodeHelper> helper(new NodeHelper(socket_path, fd));
  helper->thread_ = std::thread([h = helper.get()] { h->Serve(); });
  return helper;
}

NodeHelper::NodeHelper(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

NodeHelper::~NodeHelper() { Stop(); }

void NodeHelper::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(fd_, SHUT_RDWR);  // wakes accept()
  if (thread_.joinable()) thread_.join();
  close(fd_);
  unlink(path_.c_str());
}

void NodeHelper::Serve() {
  const uint64_t own_ns = OwnPidNamespace();
  while (!stopping_.load()) {
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!stopping_.load()) GS_LOG(kWarn, "sim", "node helper: accept: %s", strerror(errno));
      return;
    }
    NodeHelperReply reply{};
    reply.magic = kNodeHelperMagic;
    reply.version = kNodeHelperVersion;
    reply.pid_ns = own_ns;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0) {
      reply.pid = cred.pid;
      reply.start_time = ProcessStartTime(cred.pid);
    }
    answered_.fetch_add(1);  // before the reply: a client that has it sees the count
    // One small write to a fresh socket; a client that went away gets nothing.
    (void)send(client, &reply, sizeof reply, MSG_NOSIGNAL);
    close(client);
  }
}

StatusOr<NodeHelperReply> AskNodeHelper(const std::string& socket_path, int timeout_ms) {
  sockaddr_un addr{};
  if (!UnixAddress(socket_path, &addr)) return NotFound("no node helper socket " + socket_path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(Errno("socket"));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const bool absent = errno == ENOENT || errno == ECONNREFUSED;
    Status s = absent ? NotFound("no node helper listens on " + socket_path)
                      : Unavailable(Errno("cannot reach the node helper at " + socket_path));
    close(fd);
    return s;
  }
  NodeHelperReply reply{};
  size_t got = 0;
  while (got < sizeof reply) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = read(fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != sizeof reply) {
    return Unavailable("the node helper at " + socket_path + " did not answer");
  }
  if (reply.magic != kNodeHelperMagic || reply.version != kNodeHelperVersion) {
    return Unavailable("the node helper at " + socket_path + " speaks another protocol");
  }
  if (reply.pid <= 0) {
    return Unavailable("the node helper at " + socket_path + " cannot see this process");
  }
  return reply;
}

}  // namespace gpuslice::sim
