// PosixMpsHost against real processes (/bin/sh): output capture, stdin,
// timeouts that kill, no zombies, atomic files.
#include "daemon/mps/posix_mps_host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>

namespace gpuslice::daemon::mps {
namespace {

using ::testing::HasSubstr;

class PosixMpsHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/mps_host." + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static CommandSpec Shell(const std::string& script) {
    CommandSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.timeout_ns = 20'000'000'000;  // generous: a loaded machine
    return spec;
  }

  PosixMpsHost host_;
  std::string dir_;
};

TEST_F(PosixMpsHostTest, CapturesOutputStdinEnvironmentAndExitCode) {
  CommandSpec spec = Shell("read line; echo \"got $line $GS_TEST_VAR\"; echo oops >&2; exit 3");
  spec.stdin_text = "hello\n";
  spec.env["GS_TEST_VAR"] = "value";
  auto r = host_.Run(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "got hello value\n");
  EXPECT_EQ(r->err, "oops\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST_F(PosixMpsHostTest, CommandThatIgnoresStdinDoesNotKillUs) {
  CommandSpec spec = Shell("exit 0");
  spec.stdin_text = std::string(1 << 20, 'x');  // more than a socket buffer
  auto r = host_.Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(PosixMpsHostTest, HungCommandIsKilledAtTheTimeoutAndReaped) {
  CommandSpec spec = Shell("echo started; exec sleep 600");
  spec.timeout_ns = 300'000'000;
  auto r = host_.Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, 128 + SIGKILL);
  EXPECT_EQ(r->out, "started\n");
  // Reaped: no child of ours is left, zombie or not.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(PosixMpsHostTest, DaemonisingCommandReturnsWhileItsChildRuns) {
  // Like `nvidia-cuda-mps-control -d`: a background child keeps running.
  const std::string pidfile = dir_ + "/pid";
  ASSERT_TRUE(host_.MakeDirs(dir_).ok());
  CommandSpec spec = Shell("sleep 600 & echo $! > " + pidfile);
  spec.output_file = "/dev/null";
  auto r = host_.Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->timed_out);
  auto text = host_.ReadFile(pidfile);
  ASSERT_TRUE(text.ok());
  const pid_t child = std::stoi(*text);
  EXPECT_TRUE(host_.ProcessAlive(child));
  EXPECT_TRUE(host_.Kill(child, SIGKILL).ok());
}

TEST_F(PosixMpsHostTest, MissingProgramIsAnError) {
  CommandSpec spec;
  spec.argv = {dir_ + "/no-such-program"};
  auto r = host_.Run(spec);
  // posix_spawn may report the failure itself or as exit 127 of the child.
  EXPECT_TRUE(!r.ok() || r->exit_code == 127);
  EXPECT_EQ(host_.FindExecutable(dir_ + "/no-such-program").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(host_.FindExecutable("gpuslice-no-such-tool-anywhere").status().code(),
            StatusCode::kNotFound);
  auto sh = host_.FindExecutable("sh");
  ASSERT_TRUE(sh.ok());
  EXPECT_THAT(*sh, HasSubstr("/sh"));
}

TEST_F(PosixMpsHostTest, FilesAreWrittenAtomicallyAndListed) {
  ASSERT_TRUE(host_.MakeDirs(dir_ + "/a/b").ok());
  ASSERT_TRUE(host_.WriteFileAtomic(dir_ + "/state.json", "one").ok());
  ASSERT_TRUE(host_.WriteFileAtomic(dir_ + "/state.json", "two").ok());
  EXPECT_EQ(*host_.ReadFile(dir_ + "/state.json"), "two");
  auto names = host_.ListDir(dir_);
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "state.json"}));  // no temp file left
  EXPECT_EQ(host_.ReadFile(dir_ + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(host_.RemoveFile(dir_ + "/missing").ok());
  EXPECT_EQ(host_.ListDir(dir_ + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(host_.ProcessAlive(0));
}

}  // namespace
}  // namespace gpuslice::daemon::mps
