// `gpuslice top` end to end: the real gpusliced on a private simulated GPU,
// two limited workloads in two groups, and the real `gpuslice top` in a
// detached tmux session (its own server socket). The test reads the screen
// with `tmux capture-pane -p`, types with `tmux send-keys`, and waits for
// every change with a deadline. Skipped (with the reason) without tmux.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "shm/group_segment.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

// The tmux binary on $PATH, or "".
std::string FindTmux() {
  const char* path = getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir + "/tmux";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The index of the first line that starts with `prefix`, or -1.
int LineStarting(const std::string& screen, const std::string& prefix) {
  const auto lines = Lines(screen);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].starts_with(prefix)) return static_cast<int>(i);
  }
  return -1;
}

// Whether `pid` is a process that has not ended (a zombie has).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

class TopTest : public testing::SimProcessTest {
 protected:
  void SetUp() override {
    SimProcessTest::SetUp();
    socket_ = dir_ + "/d.sock";
    tmux_socket_ = dir_ + "/tmux.sock";
  }
  void TearDown() override {
    if (!tmux_.empty() && std::filesystem::exists(tmux_socket_)) Tmux({"kill-server"});
    EndServer();
    SimProcessTest::TearDown();
  }

  // Skips the test when tmux is not installed (scripts/setup installs it).
  bool NeedTmux() {
    tmux_ = FindTmux();
    return !tmux_.empty();
  }

  // Starts gpusliced; `open`: its socket is for every user (mode 0666 in a
  // directory others may traverse).
  void StartDaemon(bool open = false) {
    std::vector<std::string> args = {"--socket",  socket_,  "--state-dir",        dir_ + "/state",
                                     "--shm-dir", shm_dir_, "--poll-interval-ms", "100"};
    if (open) {
      chmod(dir_.c_str(), 0711);
      args.insert(args.end(), {"--socket-mode", "0666"});
    }
    daemon_ = StartProgram("gpusliced", next_++, args);
    ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");
  }

  // A workload of 2 ms kernels in `group` held to `compute` percent.
  void StartWorkload(const std::string& group, const std::string& compute) {
    Start(next_++, {"--kernel-us", "2000", "--duration-s", "120", "--quiet"},
          {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so", "GPUSLICE_SHM_DIR=" + shm_dir_,
           "GPUSLICE_GROUP=" + group, "GPUSLICE_COMPUTE_LIMIT=" + compute});
  }

  // Runs tmux on this test's server; its exit code.
  int Tmux(std::vector<std::string> args) {
    args.insert(args.begin(), {tmux_, "-f", "/dev/null", "-S", tmux_socket_});
    return Join(Spawn(next_++, args, {"PATH=/usr/bin:/bin", "HOME=" + dir_, "TERM=xterm"}));
  }

  // Ends this test's tmux server and moves on to a fresh socket: `kill-server`
  // returns before the old server has gone, and a session started on the
  // same socket at once can reach the dying server and fail.
  void NewTmuxServer() {
    ASSERT_EQ(Tmux({"kill-server"}), 0);
    EndServer();
    tmux_socket_ = dir_ + "/tmux" + std::to_string(next_++) + ".sock";
  }

  // Starts `command` (a shell line) in a detached 120x40 session "top"; the
  // pane stays after it ends (so its last screen can be read). Remembers the
  // server's pid (server_pid_).
  // The server daemonizes into a session of its own, out of reach of
  // whatever ends this test's process group (ctest's timeout, an
  // interrupted scripts/test), and TearDown does not run when this process
  // is killed: so a watcher in the session waits for `owner` (this process)
  // to end, however it ends, and then ends the server (within a second).
  void StartSession(const std::string& command, pid_t owner = getpid()) {
    const std::string watcher = "(tail --pid=" + std::to_string(owner) + " -f /dev/null; " + tmux_ +
                                " -S " + tmux_socket_ +
                                " kill-server) >/dev/null 2>&1 </dev/null & ";
    ASSERT_EQ(Tmux({"new-session", "-d", "-s", "top", "-x", "120", "-y", "40", watcher + command}),
              0);
    const int n = next_++;
    ASSERT_EQ(Join(Spawn(n, {tmux_, "-S", tmux_socket_, "display-message", "-p", "#{pid}"},
                         {"PATH=/usr/bin:/bin", "HOME=" + dir_})),
              0);
    server_pid_ = std::atoi(Read("out" + std::to_string(n)).c_str());
    ASSERT_GT(server_pid_, 0) << Read("out" + std::to_string(n));
  }

  // Ends the tmux server started last, if any: `kill-server` returns before
  // the server has gone, so this waits for it to go (5 s), then kills it.
  void EndServer() {
    if (server_pid_ > 0 && !WaitFor([&] { return !Running(server_pid_); }, 5s)) {
      kill(server_pid_, SIGKILL);
    }
    server_pid_ = 0;
  }

  // What the pane shows now.
  std::string Screen() {
    const int n = next_++;
    Join(Spawn(n, {tmux_, "-S", tmux_socket_, "capture-pane", "-p", "-t", "top"},
               {"PATH=/usr/bin:/bin", "HOME=" + dir_}));
    return Read("out" + std::to_string(n));
  }

  // Waits until the screen satisfies `condition`; false (the test fails
  // with the last screen) if it does not within `timeout`.
  ::testing::AssertionResult WaitScreen(const std::function<bool(const std::string&)>& condition,
                                        std::chrono::milliseconds timeout = 15s) {
    std::string screen;
    if (WaitFor(
            [&] {
              screen = Screen();
              return condition(screen);
            },
            timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "screen:\n" << screen;
  }

  void Keys(const std::vector<std::string>& keys) {
    std::vector<std::string> args = {"send-keys", "-t", "top"};
    args.insert(args.end(), keys.begin(), keys.end());
    ASSERT_EQ(Tmux(args), 0);
  }

  // The shell line that runs gpuslice with this test's daemon, segments and
  // simulated GPU (its NVML, found by soname), then says how it ended and
  // keeps the pane open.
  // `out`: a file for top's output ("": the pane).
  std::string TopCommand(const std::string& env, const std::string& args,
                         const std::string& out = "") {
    return "env " + env + " GPUSLICE_SOCKET=" + socket_ + " GPUSLICE_SHM_DIR=" + shm_dir_ +
           " LD_LIBRARY_PATH=" + BuildDir() + "/sim/lib GPUSLICE_SIM_STATE=" + state_ + " " +
           BuildDir() + "/bin/gpuslice top " + args + (out.empty() ? "" : " > " + out) +
           "; echo TOP-EXITED $?; sleep 600";
  }

  // Runs `gpuslice ARGS` against this test's daemon; its exit code.
  int Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Join(Spawn(next_++, argv, {"GPUSLICE_SOCKET=" + socket_}));
  }

  json Group(const std::string& id) {
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/v1/groups/" + id);
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }

  std::string socket_, tmux_socket_, tmux_;
  pid_t daemon_ = 0;
  pid_t server_pid_ = 0;  // the tmux server's; 0: none started
  int next_ = 0;
};

// The tmux server goes when the process that started the session does, even
// when that process is killed and runs no TearDown (a stand-in here).
TEST_F(TopTest, TheTmuxServerEndsWhenItsOwnerIsKilled) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  const pid_t owner = Spawn(next_++, {"/bin/sleep", "600"}, {});
  ASSERT_NE(owner, kNoProcess);
  StartSession("sleep 600", owner);
  const pid_t server = server_pid_;
  ASSERT_TRUE(Running(server));
  kill(owner, SIGKILL);
  Join(owner);
  EXPECT_TRUE(WaitFor([&] { return !Running(server); }, 15s));
}

TEST_F(TopTest, ShowsTheGroupsAndReactsToKeysResizeAndTheDaemonGoing) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  StartDaemon();
  StartWorkload("train", "40");
  StartWorkload("notebook", "20");
  // train asks the scheduler for 30 % (in the registry; its limit stays 40 %): a
  // marker on the GPU's share bar.
  ASSERT_EQ(Cli({"group", "set", "train", "--compute", "40", "--request", "30"}), 0);
  StartSession(TopCommand("TERM=xterm-256color LANG=C.UTF-8", "--interval 0.2"));

  // Both groups, from the daemon's event stream, with their limits and a
  // measured share; train's request marked on the GPU's share bar.
  ASSERT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("source: gpusliced at") != std::string::npos &&
           LineStarting(s, "notebook ") >= 0 && LineStarting(s, "train ") >= 0 &&
           Lines(s)[LineStarting(s, "train ")].find("40%") != std::string::npos &&
           s.find("|=request") != std::string::npos;
  }));
  // Sorted by group: notebook first. `s` twice: by GPU, then by share (train's 40% first).
  EXPECT_LT(LineStarting(Screen(), "notebook "), LineStarting(Screen(), "train "));
  Keys({"s"});
  EXPECT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("sort: gpu ") != std::string::npos; }));
  Keys({"s"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("sort: share ") != std::string::npos &&
           LineStarting(s, "train ") < LineStarting(s, "notebook ");
  }));

  // `/` filters by group.
  Keys({"/", "n", "o", "t", "e", "Enter"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("filter: note") != std::string::npos && LineStarting(s, "notebook ") >= 0 &&
           LineStarting(s, "train ") < 0;
  }));

  // `l` changes the selected group's compute limit through the daemon.
  Keys({"l", "3", "0", "Enter"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("compute limit of notebook to 30%:") != std::string::npos;
  }));
  EXPECT_TRUE(WaitFor(
      [&] {
        const json g = Group("notebook");
        return g.is_object() && g["limits"]["all"]["compute_percent"] == 30;
      },
      5s))
      << Group("notebook").dump();
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    const int row = LineStarting(s, "notebook ");
    return row >= 0 && Lines(s)[row].find("30%") != std::string::npos;
  }));

  // `p` pauses the selected group through the daemon: the row says so, and
  // `p` again resumes it.
  Keys({"p"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    const int row = LineStarting(s, "notebook ");
    return s.find("pause notebook: done") != std::string::npos && row >= 0 &&
           Lines(s)[row].find("paused") != std::string::npos;
  }));
  EXPECT_EQ(Group("notebook")["paused"], true);
  Keys({"p"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    const int row = LineStarting(s, "notebook ");
    return s.find("resume notebook: done") != std::string::npos && row >= 0 &&
           Lines(s)[row].find("paused") == std::string::npos;
  }));
  EXPECT_EQ(Group("notebook")["paused"], false);

  // Enter shows the selected group's tenants.
  Keys({"Enter"});
  EXPECT_TRUE(WaitScreen(
      [](const std::string& s) { return s.find("tenants of notebook:") != std::string::npos; }));

  // Smaller terminal: redrawn to its size, the key line at its last row.
  ASSERT_EQ(Tmux({"resize-window", "-t", "top", "-x", "80", "-y", "20"}), 0);
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    const auto lines = Lines(s);
    if (lines.size() != 20) return false;
    for (const std::string& line : lines) {
      if (line.size() > size_t{80} * 3) return false;  // bytes: sparklines are multibyte
    }
    return lines[0].starts_with("gpuslice top") && lines[19].starts_with("sort: share");
  }));

  // The daemon goes: said in the header, the segments and NVML keep the
  // groups and the GPU shown (its NVML name).
  ASSERT_GT(daemon_, 0);
  kill(daemon_, SIGKILL);
  Join(daemon_);
  // (Wide again, so that the header fits.)
  ASSERT_EQ(Tmux({"resize-window", "-t", "top", "-x", "120", "-y", "40"}), 0);
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("gpusliced stopped answering") != std::string::npos &&
           s.find("showing group segments + NVML") != std::string::npos &&
           LineStarting(s, "notebook ") >= 0 && s.find("NVIDIA H100") != std::string::npos;
  }));
  // The daemon comes back: top follows its stream again (the filter still on).
  StartDaemon();
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("source: gpusliced at") != std::string::npos && LineStarting(s, "notebook ") >= 0;
  }));

  Keys({"q"});
  EXPECT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("TOP-EXITED 0") != std::string::npos; }));
}

TEST_F(TopTest, ARefusalIsShownInTheStatusLineAndTopGoesOn) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run gpuslice top as uid 65534";
  StartDaemon(/*open=*/true);
  auto put =
      cli::UnixHttpClient(socket_, 5s)
          .Request("PUT", "/v1/groups/nb", R"({"limits": {"all": {"compute_percent": 20}}})");
  ASSERT_TRUE(put.ok() && put->status == 200) << (put.ok() ? put->body : put.status().ToString());
  // Not an admin: may look, may not change.
  StartSession("/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups " +
               TopCommand("TERM=xterm", "--interval 0.2"));
  ASSERT_TRUE(WaitScreen([](const std::string& s) {
    const int row = LineStarting(s, "nb ");
    return row >= 0 && Lines(s)[row].find("20%") != std::string::npos;
  }));
  Keys({"l", "5", "0", "Enter"});
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    return s.find("compute limit of nb to 50%: HTTP 403:") != std::string::npos;
  }));
  Keys({"p"});
  EXPECT_TRUE(WaitScreen(
      [](const std::string& s) { return s.find("pause nb: HTTP 403:") != std::string::npos; }));
  EXPECT_EQ(Group("nb")["paused"], false);
  EXPECT_EQ(Group("nb")["limits"]["all"]["compute_percent"], 20);
  Keys({"q"});
  EXPECT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("TOP-EXITED 0") != std::string::npos; }));
}

TEST_F(TopTest, ADumbTerminalGetsOnePlainTablePerInterval) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  StartDaemon();
  StartWorkload("train", "40");
  ASSERT_TRUE(WaitFor(
      [&] { return std::filesystem::exists(GroupSegment::PathFor(shm_dir_, "train")); }, 10s));
  // A terminal (the pane), but TERM=dumb: plain tables, no full screen.
  StartSession(TopCommand("TERM=dumb", "--count 2 --interval 0.2"));
  ASSERT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("TOP-EXITED 0") != std::string::npos; }));
  const std::string screen = Screen();
  int headers = 0;
  int rows = 0;
  for (const std::string& line : Lines(screen)) {
    headers += line.starts_with("gpuslice top ");
    rows += line.starts_with("train ");
  }
  EXPECT_EQ(headers, 2) << screen;
  EXPECT_GE(rows, 1) << screen;
  EXPECT_GE(LineStarting(screen, "GROUP "), 0) << screen;
}

// No daemon at all: the groups from their segments, the GPU from NVML (the
// simulator's, by soname), and the header says so — live and with --no-daemon.
TEST_F(TopTest, WithoutADaemonTheSegmentsAndNvmlAreShown) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  StartWorkload("train", "40");
  ASSERT_TRUE(WaitFor(
      [&] { return std::filesystem::exists(GroupSegment::PathFor(shm_dir_, "train")); }, 10s));
  StartSession(TopCommand("TERM=xterm-256color LANG=C.UTF-8", "--interval 0.2"));
  EXPECT_TRUE(WaitScreen([](const std::string& s) {
    const int gpu = LineStarting(s, "GPU 0 ");
    const int train = LineStarting(s, "train ");
    return s.find("no daemon") != std::string::npos &&
           s.find("showing group segments + NVML") != std::string::npos && gpu >= 0 &&
           Lines(s)[gpu].find("NVIDIA H100") != std::string::npos && train >= 0 &&
           Lines(s)[train].find("40%") != std::string::npos;
  }));
  Keys({"q"});
  ASSERT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("TOP-EXITED 0") != std::string::npos; }));
  NewTmuxServer();

  // --no-daemon on a dumb terminal: plain tables, the same sources.
  StartSession(TopCommand("TERM=dumb", "--no-daemon --count 2 --interval 0.2"));
  ASSERT_TRUE(
      WaitScreen([](const std::string& s) { return s.find("TOP-EXITED 0") != std::string::npos; }));
  const std::string screen = Screen();
  int headers = 0;
  for (const std::string& line : Lines(screen)) {
    headers += line.starts_with("gpuslice top ") &&
               line.find("source: group segments + NVML (--no-daemon)") != std::string::npos;
  }
  EXPECT_EQ(headers, 2) << screen;
  const int gpu = LineStarting(screen, "0 ");
  ASSERT_GE(gpu, 0) << screen;
  EXPECT_NE(Lines(screen)[gpu].find("NVIDIA H100"), std::string::npos) << screen;
  EXPECT_GE(LineStarting(screen, "train "), 0) << screen;
}

// The daemon goes away while plain tables are printed: the tables go on
// from the segments, saying so; when it is back they come from it again.
TEST_F(TopTest, PlainTablesGoOnWhenTheDaemonGoesAndComesBack) {
  if (!NeedTmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup installs it)";
  StartDaemon();
  StartWorkload("train", "40");
  ASSERT_TRUE(WaitFor(
      [&] { return std::filesystem::exists(GroupSegment::PathFor(shm_dir_, "train")); }, 10s));
  StartSession(TopCommand("TERM=dumb", "--interval 0.2", dir_ + "/plain.txt"));
  auto plain = [&] {
    std::ifstream in(dir_ + "/plain.txt");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto has = [&](const std::string& what) {
    return WaitFor([&] { return plain().find(what) != std::string::npos; }, 15s);
  };
  ASSERT_TRUE(has("source: gpusliced at")) << plain();
  ASSERT_GT(daemon_, 0);
  kill(daemon_, SIGKILL);
  Join(daemon_);
  ASSERT_TRUE(has("gpusliced stopped answering")) << plain();
  const size_t lost_at = plain().find("gpusliced stopped answering");
  StartDaemon();
  EXPECT_TRUE(WaitFor(
      [&] { return plain().find("source: gpusliced at", lost_at) != std::string::npos; }, 15s))
      << plain();
  // Every table while the daemon was away still had train's row.
  const std::string text = plain();
  const std::string away =
      text.substr(lost_at, text.find("source: gpusliced at", lost_at) - lost_at);
  EXPECT_NE(away.find("\ntrain "), std::string::npos) << away;
}

TEST_F(TopTest, NotATerminalGetsPlainTablesWithoutTmux) {
  StartDaemon();
  StartWorkload("train", "40");
  // Wait until train's segment has a measured share, so the row is complete.
  const int n = next_++;
  std::string out;
  ASSERT_TRUE(WaitFor(
      [&] {
        const int code = Join(
            Spawn(n, {BuildDir() + "/bin/gpuslice", "top", "--count", "2", "--interval", "0.1"},
                  {"TERM=xterm", "GPUSLICE_SOCKET=" + socket_, "GPUSLICE_SHM_DIR=" + shm_dir_}));
        out = Read("out" + std::to_string(n));
        return code == 0 && out.find("\ntrain ") != std::string::npos;
      },
      15s))
      << out << Read("err" + std::to_string(n));
  int headers = 0;
  for (const std::string& line : Lines(out)) headers += line.starts_with("gpuslice top ");
  EXPECT_EQ(headers, 2) << out;
  const std::string row = Lines(out)[LineStarting(out, "train ")];
  EXPECT_NE(row.find("40%"), std::string::npos) << row;
  EXPECT_EQ(out.find("\x1b["), std::string::npos) << "escape sequences in plain output";
}

}  // namespace
}  // namespace gpuslice
