#include "daemon/tenants/tcp_peer.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace gpuslice::daemon {
namespace {

// A real loopback connection in this process: the listener's accepted end
// and both endpoints as the daemon sees them.
struct Connection {
  int listener = -1, client = -1, accepted = -1;
  TcpEndpoint client_end, server_end;
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    for (int fd : {listener, client, accepted}) {
      if (fd >= 0) close(fd);
    }
  }
};

bool Connect(int family, Connection& c) {
  c.listener = socket(family, SOCK_STREAM, 0);
  if (c.listener < 0) return false;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&address);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    length = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    length = sizeof(sockaddr_in6);
  }
  if (bind(c.listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(c.listener, 1) != 0 ||
      getsockname(c.listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return false;
  }
  c.client = socket(family, SOCK_STREAM, 0);
  if (c.client < 0 || connect(c.client, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    return false;
  }
  c.accepted = accept(c.listener, nullptr, nullptr);
  if (c.accepted < 0) return false;
  sockaddr_storage end{};
  socklen_t end_length = sizeof(end);
  getpeername(c.accepted, reinterpret_cast<sockaddr*>(&end), &end_length);
  auto client = EndpointOf(reinterpret_cast<sockaddr*>(&end), end_length);
  end_length = sizeof(end);
  getsockname(c.accepted, reinterpret_cast<sockaddr*>(&end), &end_length);
  auto server = EndpointOf(reinterpret_cast<sockaddr*>(&end), end_length);
  if (!client || !server) return false;
  c.client_end = *client;
  c.server_end = *server;
  return true;
}

TEST(TcpPeerTest, TheProcessThatConnectedHoldsItsConnectionAndNoOtherDoes) {
  // A process started before the connection: it shares none of its fds.
  pid_t other = 0;
  char sleep[] = "sleep";
  char seconds[] = "30";
  char* argv[] = {sleep, seconds, nullptr};
  ASSERT_EQ(posix_spawnp(&other, "sleep", nullptr, nullptr, argv, environ), 0);
  Connection c;
  ASSERT_TRUE(Connect(AF_INET, c));
  EXPECT_EQ(EndpointText(c.server_end).rfind("127.0.0.1:", 0), 0u);
  EXPECT_TRUE(HoldsTcpConnection("/proc", getpid(), c.client_end, c.server_end));
  EXPECT_FALSE(HoldsTcpConnection("/proc", other, c.client_end, c.server_end));
  // The ends the other way round are the accepted socket's, not the client's.
  EXPECT_FALSE(HoldsTcpConnection("/proc", getpid(), c.server_end, c.server_end));
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  EXPECT_FALSE(HoldsTcpConnection("/proc", other, c.client_end, c.server_end));
}

TEST(TcpPeerTest, OverIpv6Too) {
  Connection c;
  if (!Connect(AF_INET6, c)) GTEST_SKIP() << "no IPv6 loopback here";
  EXPECT_FALSE(c.client_end.v4);
  EXPECT_EQ(EndpointText(c.client_end).rfind("[::1]:", 0), 0u);
  EXPECT_TRUE(HoldsTcpConnection("/proc", getpid(), c.client_end, c.server_end));
}

}  // namespace
}  // namespace gpuslice::daemon
