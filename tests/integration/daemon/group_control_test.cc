// gpusliced controls the groups on the node (DESIGN.md section 3): the real
// daemon and real limited processes on a private simulated GPU. The daemon
// takes the controller role of a group from its member, the member takes it
// back when the daemon is killed (once its claim is stale) or stops, the
// daemon re-adopts the group after a restart, and idle groups' segments are
// collected.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "shm/group_segment.h"
#include "shm/raw_layout_testing.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

class GroupControlTest : public testing::SimProcessTest {
 protected:
  // Starts gpusliced on this test's simulation and segment directory; its
  // log goes to "err<n>".
  pid_t StartDaemon(const std::vector<std::string>& extra = {}) {
    const std::string socket = dir_ + "/d.sock";
    std::vector<std::string> args = {"--socket",           socket,   "--state-dir", dir_ + "/state",
                                     "--shm-dir",          shm_dir_, "--log-level", "debug",
                                     "--poll-interval-ms", "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = StartProgram("gpusliced", next_++, args);
    EXPECT_TRUE(WaitFor(
        [&] {
          auto r = cli::UnixHttpClient(socket, 5s).Request("GET", "/readyz");
          return r.ok() && r->status == 200;
        },
        20s));
    return pid;
  }

  // A process of `group` on the simulated GPU holding 64 MiB for a minute.
  pid_t StartMember(const std::string& group) {
    return StartProgram(
        "gpuslice-alloc-probe", next_++,
        {"alloc", "--chunk", std::to_string(64 << 20), "--max", "1", "--hold-s", "60"},
        {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
         "GPUSLICE_GROUP=" + group});
  }

  // The pid holding `group`'s controller role (0: none, or no segment).
  int32_t ControllerOf(const std::string& group) {
    auto seg = GroupSegment::Open(shm_dir_, group, /*create=*/false);
    if (!seg.ok()) return 0;
    return std::atomic_ref<int32_t>(testing::RawLayout(**seg).controller_pid).load();
  }

  int next_ = 0;
};

TEST_F(GroupControlTest, TheDaemonControlsAGroupAndItsMemberTakesOverWhenTheDaemonGoes) {
  pid_t daemon = StartDaemon();           // err0
  const pid_t member = StartMember("g");  // err1
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("g") == daemon; }, 10s))
      << "controller " << ControllerOf("g") << "; daemon log:\n"
      << Read("err0") << "\nmember log:\n"
      << Read("err1");

  // Killed: its claim goes stale and the member keeps the group itself.
  kill(daemon, SIGKILL);
  Join(daemon);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("g") == member; }, 10s)) << Read("err1");
  RecordProperty("takeover_after_kill_ms",
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - killed)
                                    .count()));

  // Restarted: the daemon adopts the group again.
  daemon = StartDaemon();
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("g") == daemon; }, 10s)) << Read("err1");

  // Stopped cleanly: it hands the group back.
  kill(daemon, SIGTERM);
  EXPECT_EQ(Join(daemon), 0);
  EXPECT_TRUE(WaitFor([&] { return ControllerOf("g") == member; }, 10s)) << Read("err1");
}

TEST_F(GroupControlTest, TheDaemonsLimitsWinOverTheSegments) {
  const pid_t daemon = StartDaemon();  // err0
  StartMember("ruled");                // err1, no limit of its own
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("ruled") == daemon; }, 10s)) << Read("err1");
  auto put = cli::UnixHttpClient(dir_ + "/d.sock", 5s)
                 .Request("PUT", "/v1/groups/ruled", R"({"limits": {"all": {"memory": "1GiB"}}})");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_EQ(put->status, 200) << put->body;
  auto limit = [&] {
    auto seg = GroupSegment::Open(shm_dir_, "ruled", /*create=*/false);
    return seg.ok() ? (*seg)->MemoryLimit(0) : 0;
  };
  EXPECT_TRUE(WaitFor([&] { return limit() == (1ull << 30); }, 5s)) << limit();

  // Raised behind the daemon's back (any writer of the segment): set back.
  {
    auto seg = GroupSegment::Open(shm_dir_, "ruled", /*create=*/false);
    ASSERT_TRUE(seg.ok());
    (*seg)->SetMemoryLimit(0, kUnlimitedBytes);
  }
  EXPECT_TRUE(WaitFor([&] { return limit() == (1ull << 30); }, 5s)) << limit();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Read("err0").find("event=group_limits_applied group=ruled") != std::string::npos;
      },
      5s))
      << Read("err0");
}

TEST_F(GroupControlTest, TheDaemonCollectsAGroupOnceItsLastProcessIsGone) {
  const pid_t daemon = StartDaemon({"--group-gc-grace-s", "0"});  // err0
  const pid_t member = StartMember("short");
  const std::string path = GroupSegment::PathFor(shm_dir_, "short");
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("short") == daemon; }, 10s)) << Read("err1");
  EXPECT_TRUE(std::filesystem::exists(path));  // attached: never collected
  kill(member, SIGKILL);
  Join(member);
  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(path); }, 10s)) << Read("err0");
  // Logged just after the removal.
  EXPECT_TRUE(WaitFor(
      [&] { return Read("err0").find("event=group_removed group=short") != std::string::npos; },
      5s))
      << Read("err0");
}

// "The limiter never takes the host program down": members of a
// compute-limited group launching graphs, controlled by the daemon, go on
// and finish when the daemon stops cleanly (the soak saw them hang in futex
// waits at every SIGTERM, docs/errors.md).
TEST_F(GroupControlTest, LimitedGraphLaunchersFinishWhenTheDaemonStops) {
  const pid_t daemon = StartDaemon();  // err0
  const std::vector<std::string> env = {
      "LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
      "GPUSLICE_GROUP=graphs", "GPUSLICE_COMPUTE_LIMIT=30", "GPUSLICE_SOCKET=" + dir_ + "/d.sock"};
  std::vector<pid_t> members;
  members.push_back(StartProgram("gpuslice-workload", next_++,  // err1
                                 {"--kernel-us", "200", "--duration-s", "6", "--quiet", "--sync",
                                  "--launch", "graph", "--graph-kernels", "4"},
                                 env));
  members.push_back(StartProgram("gpuslice-workload", next_++,  // err2
                                 {"--kernel-us", "5000", "--duration-s", "6", "--quiet", "--launch",
                                  "graph", "--graph-kernels", "2"},
                                 env));
  ASSERT_TRUE(WaitFor([&] { return ControllerOf("graphs") == daemon; }, 10s)) << Read("err0");
  // Let the daemon's controller publish charges before it goes.
  auto launches = [&] {
    auto seg = GroupSegment::Open(shm_dir_, "graphs", /*create=*/false);
    return seg.ok() ? (*seg)->usage().Launches(0) : 0;
  };
  ASSERT_TRUE(WaitFor([&] { return launches() > 20; }, 10s)) << launches();
  kill(daemon, SIGTERM);
  EXPECT_EQ(Join(daemon), 0);
  // Each lives 6 s from its first launch; far less than this if nothing hangs.
  for (size_t i = 0; i < members.size(); ++i) {
    const pid_t pid = members[i];
    const bool exited = WaitFor(
        [&] {
          int status = 0;
          return waitpid(pid, &status, WNOHANG) == pid;
        },
        30s);
    if (exited) std::erase(children_, pid);
    EXPECT_TRUE(exited) << "member " << i << " (pid " << pid << ") still running\n"
                        << Read("err" + std::to_string(i + 1));
  }
}

}  // namespace
}  // namespace gpuslice
