// gpuslice run, status and limit set as an operator uses them: the gpuslice
// binary started as a real process, limiting gpuslice-driver-probe on a
// private simulated GPU, with a private segment directory per test.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gpuslice/group_segment.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;

using testing::BuildDir;
using testing::WaitFor;

struct Result {
  int code;
  std::string out, err;
};

class CliTest : public testing::SimProcessTest {
 protected:
  // Starts build/bin/gpuslice with `args`, this test's simulation and segment
  // directory, and PATH (no simulator library path: `sim run` sets that);
  // stdout and stderr go to files numbered `n`.
  pid_t Start(int n, const std::vector<std::string>& args,
              const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {Gpuslice()};
    argv.insert(argv.end(), args.begin(), args.end());
    const char* path = getenv("PATH");
    std::vector<std::string> env = {"PATH=" + std::string(path != nullptr ? path : "/usr/bin:/bin"),
                                    "GPUSLICE_SIM_STATE=" + state_, "GPUSLICE_SHM_DIR=" + shm_dir_};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return Spawn(n, argv, env);
  }

  // Runs gpuslice to completion.
  Result Run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    const int n = next_++;
    const int code = Join(Start(n, args, extra_env));
    return {code, Read(File("out", n)), Read(File("err", n))};
  }

  // `gpuslice status --json [extra...]`, parsed; null if it failed.
  json Status(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"status", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = Run(args);
    if (r.code != 0) return nullptr;
    return json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }

  static json Group(const json& status, const std::string& name) {
    if (status.is_object()) {
      for (const auto& g : status["groups"]) {
        if (g["group"] == name) return g;
      }
    }
    return nullptr;
  }

  // Starts gpuslice-driver-probe on the simulated GPU under `gpuslice run`,
  // filling memory up to `memory` in 64 MiB chunks and holding it.
  pid_t StartLimitedProbe(const std::string& memory, const std::string& group) {
    return Start(next_++, {"sim", "run", "--", Gpuslice(), "run", "--memory", memory, "--group",
                           group, "--", BuildDir() + "/bin/gpuslice-driver-probe", "fill",
                           "--chunk", "67108864", "--hold-s", "30"});
  }

  static std::string Gpuslice() { return BuildDir() + "/bin/gpuslice"; }
  static std::string Limiter() { return BuildDir() + "/lib/libgpuslice.so"; }
  static std::string File(const char* kind, int n) { return kind + std::to_string(n); }
  // The value of `name` in `env`-style output, or "<unset>".
  static std::string Var(const std::string& env_output, const std::string& name) {
    std::istringstream in(env_output);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with(name + "=")) return line.substr(name.size() + 1);
    }
    return "<unset>";
  }

  int next_ = 0;
};

TEST_F(CliTest, RunPreloadsTheLimiterAndSetsTheMemoryLimit) {
  const std::string lib = std::filesystem::canonical(Limiter());
  Result r = Run({"run", "--memory", "1GiB", "--", "env"}, {"LD_PRELOAD=/other.so"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Var(r.out, "LD_PRELOAD"), lib + ":/other.so");
  EXPECT_EQ(Var(r.out, "GPUSLICE_MEMORY_LIMIT"), "1GiB");
  EXPECT_EQ(Var(r.out, "GPUSLICE_COMPUTE_LIMIT"), "<unset>");
  EXPECT_EQ(Var(r.out, "GPUSLICE_GROUP"), "<unset>");  // the limiter picks its default
}

TEST_F(CliTest, RunTranslatesPerDeviceFlagsToJson) {
  Result r = Run({"run", "--memory", "0=1GiB,1=2GiB", "--compute", "0=50,1=25", "--group", "g7",
                  "--shm-dir", shm_dir_ + "/other", "--", "env"},
                 {"LD_PRELOAD=" + Limiter()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Var(r.out, "GPUSLICE_MEMORY_LIMIT"), R"({"0":"1GiB","1":"2GiB"})");
  EXPECT_EQ(Var(r.out, "GPUSLICE_COMPUTE_LIMIT"), R"({"0":50,"1":25})");
  EXPECT_EQ(Var(r.out, "GPUSLICE_GROUP"), "g7");
  EXPECT_EQ(Var(r.out, "GPUSLICE_SHM_DIR"), shm_dir_ + "/other");
  EXPECT_EQ(Var(r.out, "LD_PRELOAD"), std::string(std::filesystem::canonical(Limiter())));
}

TEST_F(CliTest, BadFlagsExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--memory", "lots", "--", "true"}, "--memory"},
      {{"run", "--memory", "0=1GiB,0=2GiB", "--", "true"}, "--memory"},
      {{"run", "--compute", "0", "--", "true"}, "--compute"},
      {{"run", "--compute", "101", "--", "true"}, "--compute"},
      {{"run", "--group", "a/b", "--", "true"}, "--group"},
      {{"limit", "set", "--group", "g", "--memory", "0"}, "--memory"},
      {{"status", "--group", ".hidden"}, "--group"},
  };
  for (const auto& [args, flag] : cases) {
    Result r = Run(args);
    EXPECT_EQ(r.code, 2) << args[1] << " " << args[2] << " " << args[3];
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, AMissingCommandExits127) {
  Result r = Run({"run", "--memory", "1GiB", "--", dir_ + "/no-such-program"});
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("no-such-program"), std::string::npos) << r.err;
}

TEST_F(CliTest, AMissingLimiterIsAClearError) {
  Result r = Run({"run", "--", "true"}, {"GPUSLICE_LIMITER_PATH=" + dir_ + "/nothing.so"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("nothing.so"), std::string::npos) << r.err;
}

TEST_F(CliTest, RunUnderSimRunKeepsTheSimulatorsLibraryPath) {
  Result r = Run({"sim", "run", "--", Gpuslice(), "run", "--memory", "1GiB", "--", "env"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string sim_lib = std::filesystem::canonical(BuildDir() + "/sim/lib");
  EXPECT_TRUE(Var(r.out, "LD_LIBRARY_PATH").starts_with(sim_lib)) << Var(r.out, "LD_LIBRARY_PATH");
  EXPECT_NE(Var(r.out, "LD_PRELOAD").find("libgpuslice.so"), std::string::npos);
}

TEST_F(CliTest, SimCommandsRunTheSimulatorsOwnTool) {
  // gpuslice itself never links the simulator: `sim` hands its arguments,
  // --help included, to <sim dir>/bin/gpuslice-sim.
  Result help = Run({"sim", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Usage: gpuslice sim"), std::string::npos) << help.out;
  EXPECT_EQ(Run({"sim", "stats", "--count", "x"}).code, 2);
  Result missing = Run({"sim", "env"}, {"GPUSLICE_SIM_DIR=" + dir_ + "/no-sim"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no-sim has no lib/libcuda.so.1"), std::string::npos) << missing.err;
}

TEST_F(CliTest, StatusWithoutSegmentsSaysNoGroups) {
  Result r = Run({"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "no groups\n");
}

TEST_F(CliTest, StatusShowsALimitedProcessAndForgetsItWhenKilled) {
  pid_t probe = StartLimitedProbe("1GiB", "t1");
  json group;
  ASSERT_TRUE(WaitFor(
      [&] {
        group = Group(Status(), "t1");
        // Filled: the probe reports its out-of-memory and holds what it got.
        return !group.is_null() && group["live_members"] == 1 &&
               Read(File("out", 0)).find("\"chunks\"") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << group.dump() << Read(File("err", 0));
  ASSERT_EQ(group["devices"].size(), 1u);
  const json& dev = group["devices"][0];
  EXPECT_EQ(dev["memory_limit_bytes"], kGiB);
  EXPECT_GT(dev["memory_used_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(dev["memory_used_bytes"].get<uint64_t>(), kGiB);
  EXPECT_TRUE(dev["compute_limit_percent"].is_null());
  ASSERT_EQ(group["members"].size(), 1u);
  EXPECT_EQ(group["members"][0]["pid"], probe);  // run and sim run exec, no fork
  EXPECT_EQ(group["members"][0]["memory_bytes"], dev["memory_used_bytes"]);

  Result text = Run({"status"});
  EXPECT_NE(text.out.find("t1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("/ 1.00 GiB"), std::string::npos) << text.out;

  kill(probe, SIGKILL);
  EXPECT_EQ(Join(probe), 128 + SIGKILL);
  // Idle now: hidden by default, shown by --all with its memory reclaimed.
  EXPECT_TRUE(Group(Status(), "t1").is_null());
  group = Group(Status({"--all"}), "t1");
  ASSERT_FALSE(group.is_null());
  EXPECT_EQ(group["live"], false);
  EXPECT_GE(group["idle_seconds"].get<int64_t>(), 0);
  EXPECT_EQ(group["live_members"], 0);
  EXPECT_EQ(group["devices"][0]["memory_used_bytes"], 0);
  EXPECT_TRUE(group["members"].empty());
  Result hint = Run({"status"});
  EXPECT_NE(hint.out.find("1 idle group not shown"), std::string::npos) << hint.out;
  EXPECT_NE(Run({"status", "--all"}).out.find("none, idle"), std::string::npos);

  // --gc keeps it within the grace period and removes it after.
  Result kept = Run({"status", "--gc"});
  EXPECT_EQ(kept.code, 0) << kept.err;
  EXPECT_FALSE(Group(Status({"--all"}), "t1").is_null());
  Result removed = Run({"status", "--gc", "--gc-grace-s", "0"});
  EXPECT_EQ(removed.code, 0) << removed.err;
  EXPECT_NE(removed.err.find("removed group 't1'"), std::string::npos) << removed.err;
  EXPECT_TRUE(Group(Status({"--all"}), "t1").is_null());
  EXPECT_FALSE(
      std::filesystem::exists(shm_dir_ + "/group-t1.v" + std::to_string(kGroupSegmentVersion)));
}

// Runs gpuslice as uid/gid 65534 (the test must be root), with this test's
// simulation and segment directory.
Result RunAsNobody(const std::string& dir, const std::vector<std::string>& args,
                   const std::vector<std::string>& env) {
  const std::string out = dir + "/nobody.out", err = dir + "/nobody.err";
  const int out_fd = open(out.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  const int err_fd = open(err.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  std::vector<std::string> argv = {BuildDir() + "/bin/gpuslice"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argv_c, env_c;
  for (auto& a : argv) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  std::vector<std::string> env_copy = env;
  for (auto& e : env_copy) env_c.push_back(e.data());
  env_c.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0 || setgroups(0, nullptr) != 0 ||
        setgid(65534) != 0 || setuid(65534) != 0) {
      _exit(125);
    }
    execve(argv_c[0], argv_c.data(), env_c.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
}

TEST_F(CliTest, AnotherUserCannotReadOrRaiseAGroupsLimits) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run gpuslice as uid 65534";
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  pid_t probe = StartLimitedProbe("1GiB", "rooted");
  ASSERT_TRUE(
      WaitFor([&] { return !Group(Status(), "rooted").is_null(); }, std::chrono::seconds(20)))
      << Read(File("err", 0));
  const std::vector<std::string> env = {"GPUSLICE_SHM_DIR=" + shm_dir_, "PATH=/usr/bin:/bin"};
  Result raise =
      RunAsNobody(dir_, {"limit", "set", "--group", "rooted", "--memory", "unlimited"}, env);
  EXPECT_EQ(raise.code, 1) << raise.out << raise.err;
  EXPECT_NE(raise.err.find("not this user's"), std::string::npos) << raise.err;
  EXPECT_EQ(Group(Status(), "rooted")["devices"][0]["memory_limit_bytes"], kGiB);  // unchanged

  Result status = RunAsNobody(dir_, {"status"}, env);
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("1 group belongs to other users"), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find("rooted"), std::string::npos) << status.out;
  kill(probe, SIGKILL);
  Join(probe);
}

TEST_F(CliTest, GcNeverRemovesAGroupAProcessIsAttachedTo) {
  pid_t probe = StartLimitedProbe("1GiB", "busy");
  ASSERT_TRUE(WaitFor([&] { return !Group(Status(), "busy").is_null(); }, std::chrono::seconds(20)))
      << Read(File("err", 0));
  Result r = Run({"status", "--gc", "--gc-grace-s", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json group = Group(json::parse(r.out), "busy");
  ASSERT_FALSE(group.is_null()) << r.out;
  EXPECT_EQ(group["live"], true);
  EXPECT_EQ(group["live_members"], 1);
  kill(probe, SIGKILL);
  Join(probe);
}

TEST_F(CliTest, LimitSetChangesWhatStatusReports) {
  EXPECT_EQ(Run({"limit", "set", "--group", "t1", "--memory", "2GiB"}).code, 1);  // no segment

  pid_t probe = StartLimitedProbe("1GiB", "t1");
  ASSERT_TRUE(WaitFor(
      [&] {
        json g = Group(Status(), "t1");
        return !g.is_null() && g["live_members"] == 1;
      },
      std::chrono::seconds(20)))
      << Read(File("err", 1));

  Result set = Run({"limit", "set", "--group", "t1", "--memory", "2GiB", "--compute", "40"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("memory limit 1.00 GiB -> 2.00 GiB"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("compute limit unlimited -> 40%"), std::string::npos) << set.out;
  json dev = Group(Status(), "t1")["devices"][0];
  EXPECT_EQ(dev["memory_limit_bytes"], 2 * kGiB);
  EXPECT_EQ(dev["compute_limit_percent"], 40);

  Result one = Run({"limit", "set", "--group", "t1", "--device", "0", "--memory", "unlimited",
                    "--compute", "100"});
  ASSERT_EQ(one.code, 0) << one.err;
  dev = Group(Status(), "t1")["devices"][0];
  EXPECT_TRUE(dev["memory_limit_bytes"].is_null());
  EXPECT_TRUE(dev["compute_limit_percent"].is_null());

  Result by_uuid = Run({"limit", "set", "--group", "t1", "--device", dev["uuid"].get<std::string>(),
                        "--memory", "3GiB"});
  ASSERT_EQ(by_uuid.code, 0) << by_uuid.err;
  EXPECT_EQ(Group(Status(), "t1")["devices"][0]["memory_limit_bytes"], 3 * kGiB);

  Result no_device = Run({"limit", "set", "--group", "t1", "--device", "5", "--memory", "1GiB"});
  EXPECT_EQ(no_device.code, 1);
  EXPECT_NE(no_device.err.find("no device '5'"), std::string::npos) << no_device.err;
  kill(probe, SIGKILL);
  Join(probe);
}

TEST_F(CliTest, AnInvalidSegmentIsAWarningAndTheOthersAreShown) {
  pid_t probe = StartLimitedProbe("1GiB", "good");
  ASSERT_TRUE(WaitFor([&] { return !Group(Status(), "good").is_null(); }, std::chrono::seconds(20)))
      << Read(File("err", 0));
  const std::string bad = shm_dir_ + "/group-bad.v" + std::to_string(kGroupSegmentVersion);
  std::ofstream(bad) << "not a segment";
  Result r = Run({"status", "--json"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  json status = json::parse(r.out);
  EXPECT_FALSE(Group(status, "good").is_null());
  EXPECT_TRUE(Group(status, "bad").is_null());
  kill(probe, SIGKILL);
  Join(probe);
}

// The pid of whoever serves the Unix socket `path` (SO_PEERCRED); 0 if nobody.
pid_t ServerOf(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  pid_t pid = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid = cred.pid;
  }
  close(fd);
  return pid;
}

// True while `pid` runs (a zombie whose parent does not reap it has ended).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

TEST_F(CliTest, SimRunStartsTheNodeHelperWhichEndsWithItsSocket) {
  Result r = Run({"sim", "run", "--", "true"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string socket = state_ + ".node";
  const pid_t helper = ServerOf(socket);
  ASSERT_GT(helper, 0) << "nothing serves " << socket << "; " << r.err;
  EXPECT_TRUE(Running(helper));
  // A second run uses the helper that answers.
  ASSERT_EQ(Run({"sim", "run", "--", "true"}).code, 0);
  EXPECT_EQ(ServerOf(socket), helper);
  // Its socket removed (as when the test's directory goes), the helper ends.
  ASSERT_EQ(unlink(socket.c_str()), 0);
  EXPECT_TRUE(WaitFor([&] { return !Running(helper); }, std::chrono::seconds(10)));
}

}  // namespace
}  // namespace gpuslice
