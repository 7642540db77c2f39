#include "sim/core/node_helper.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/process.h"
#include "sim/core/process_identity.h"

namespace gpuslice::sim {
namespace {

std::string SocketPath(const std::string& name) {
  return ::testing::TempDir() + "/nh." + std::to_string(getpid()) + "." + name;
}

TEST(NodeHelperTest, AnswersTheCallersPidStartTimeAndItsOwnNamespace) {
  const std::string path = SocketPath("answer");
  auto helper = NodeHelper::Start(path);
  ASSERT_TRUE(helper.ok()) << helper.status().message();
  auto reply = AskNodeHelper(path, 2000);
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_EQ(reply->pid, getpid());
  EXPECT_EQ(reply->start_time, ProcessStartTime(getpid()));
  EXPECT_EQ(reply->pid_ns, OwnPidNamespace());
  EXPECT_NE(reply->pid_ns, 0u);
  EXPECT_EQ((*helper)->answered(), 1u);

  // Learned identity: in the helper's namespace, this process is itself.
  const ProcessIdentity id = LearnProcessIdentity(path);
  EXPECT_TRUE(id.host_known);
  EXPECT_EQ(id.pid, getpid());
  EXPECT_EQ(id.local_pid, getpid());
  EXPECT_EQ(id.start_time, ProcessStartTime(getpid()));
  EXPECT_EQ(ProcViewNamespace(id), OwnPidNamespace());

  // A second helper on the same socket is refused; the first keeps serving.
  auto second = NodeHelper::Start(path);
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(AskNodeHelper(path, 2000).ok());

  (*helper)->Stop();
  EXPECT_EQ(access(path.c_str(), F_OK), -1);  // socket file removed
  EXPECT_EQ(AskNodeHelper(path, 2000).status().code(), StatusCode::kNotFound);
}

TEST(NodeHelperTest, WithoutAHelperTheIdentityFallsBackToGetpid) {
  const ProcessIdentity id = LearnProcessIdentity(SocketPath("none"));
  EXPECT_FALSE(id.host_known);
  EXPECT_EQ(id.pid, getpid());
  EXPECT_EQ(id.pid_ns, OwnPidNamespace());
  EXPECT_EQ(id.start_time, ProcessStartTime(getpid()));
  EXPECT_EQ(ProcViewNamespace(id), OwnPidNamespace());
}

TEST(NodeHelperTest, ReplacesAStaleSocketFile) {
  const std::string path = SocketPath("stale");
  {
    auto first = NodeHelper::Start(path);
    ASSERT_TRUE(first.ok());
  }
  // A socket bound and abandoned (a helper that was killed) is replaced.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  EXPECT_EQ(AskNodeHelper(path, 2000).status().code(), StatusCode::kNotFound);
  auto helper = NodeHelper::Start(path);
  ASSERT_TRUE(helper.ok()) << helper.status().message();
  EXPECT_TRUE(AskNodeHelper(path, 2000).ok());
}

TEST(NodeHelperTest, APeerThatNeverAnswersTimesOutAsUnavailable) {
  const std::string path = SocketPath("mute");
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 4), 0);  // connects succeed; nothing is ever written
  auto reply = AskNodeHelper(path, 50);
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  // The identity falls back rather than failing.
  const ProcessIdentity id = LearnProcessIdentity(path);
  EXPECT_FALSE(id.host_known);
  EXPECT_EQ(id.pid, getpid());
  close(fd);
  unlink(path.c_str());
}

TEST(NodeHelperTest, SocketPathFollowsTheStateFileUnlessOverridden) {
  unsetenv("GPUSLICE_SIM_NODE_SOCKET");
  EXPECT_EQ(NodeSocketPath("/dev/shm/x.state"), "/dev/shm/x.state.node");
  setenv("GPUSLICE_SIM_NODE_SOCKET", "/run/other.sock", 1);
  EXPECT_EQ(NodeSocketPath("/dev/shm/x.state"), "/run/other.sock");
  unsetenv("GPUSLICE_SIM_NODE_SOCKET");
}

}  // namespace
}  // namespace gpuslice::sim
