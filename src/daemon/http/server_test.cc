// HttpServer's socket watch (docs/errors.md, "Faults injected"): the socket
// directory removed under a running server, and its path taken by another
// live socket. A raw Unix-socket client speaks HTTP/1.1 to it.
#include "daemon/http/server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace gpuslice::daemon {
namespace {

using std::chrono::milliseconds;

// A connected socket, or -1.
int Connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One GET on `fd` (keep-alive); the status line, or "" when it fails.
std::string Get(int fd, const std::string& target) {
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) return "";
  std::string got;
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos || got.find("ok\"}") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    got.append(buf, static_cast<size_t>(n));
  }
  return got.substr(0, got.find("\r\n"));
}

std::string GetOnce(const std::string& path) {
  UniqueFd fd(Connect(path));
  return fd.get() < 0 ? "" : Get(fd.get(), "/healthz");
}

// Polls `done` until it holds or 10 s pass (a deadline, not a sleep).
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

class ServerSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-server-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/run";
    path_ = dir_ + "/d.sock";
    router_.Add("GET", "/healthz", Access::kRead, [](const ApiRequest&) {
      return ApiResponse::Json(200, {{"status", "ok"}});
    });
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<HttpServer> StartServer() {
    ServerOptions o;
    o.socket_path = path_;
    o.socket_mode = 0600;
    o.socket_check_interval = milliseconds(20);
    auto server = std::make_unique<HttpServer>(o, router_, hub_);
    Status s = server->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return server;
  }

  std::string root_, dir_, path_;
  ApiRouter router_;
  EventHub hub_;
};

// Fault: the socket directory is removed under a running server (an operator,
// a tmpfiles cleaner). The server notices, creates the directory and binds a
// new socket with the configured mode; a connection opened before keeps
// working; new clients reach it again.
TEST_F(ServerSocketTest, ARemovedSocketDirectoryIsCreatedAgainAndServed) {
  auto server = StartServer();
  ASSERT_EQ(GetOnce(path_), "HTTP/1.1 200 OK");
  UniqueFd before(Connect(path_));
  ASSERT_GE(before.get(), 0);
  ASSERT_EQ(Get(before.get(), "/healthz"), "HTTP/1.1 200 OK");

  std::filesystem::remove_all(dir_);
  ASSERT_TRUE(WaitFor([&] { return server->socket_watch().recreated >= 1; }));
  EXPECT_EQ(GetOnce(path_), "HTTP/1.1 200 OK");
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Get(before.get(), "/healthz"), "HTTP/1.1 200 OK");  // kept

  // And again: the watch keeps running after a rebind.
  std::filesystem::remove(path_);
  ASSERT_TRUE(WaitFor([&] { return server->socket_watch().recreated >= 2; }));
  EXPECT_EQ(GetOnce(path_), "HTTP/1.1 200 OK");
  EXPECT_EQ(server->socket_watch().failures, 0u);
  server->Stop();
  EXPECT_FALSE(std::filesystem::exists(path_));  // its own socket is removed at stop
}

// When another live socket takes the path (another daemon started while this
// one's file was gone), the server does not steal it: it counts the failure,
// keeps checking, and at stop leaves the other socket in place.
TEST_F(ServerSocketTest, APathTakenByAnotherLiveSocketIsLeftAloneAndReported) {
  auto server = StartServer();
  ASSERT_EQ(GetOnce(path_), "HTTP/1.1 200 OK");
  // The other listener is bound beside it, then renamed over it (atomic: the
  // watch never sees the path empty).
  const std::string other_path = dir_ + "/other.sock";
  UniqueFd other(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, other_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(other.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(other.get(), 4), 0);
  ASSERT_EQ(rename(other_path.c_str(), path_.c_str()), 0);

  ASSERT_TRUE(WaitFor([&] { return server->socket_watch().failures >= 2; }));
  EXPECT_EQ(server->socket_watch().recreated, 0u);
  server->Stop();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);  // not unlinked: not ours
  UniqueFd client(Connect(path_));
  EXPECT_GE(client.get(), 0);  // the other listener still owns the path
}

}  // namespace
}  // namespace gpuslice::daemon
