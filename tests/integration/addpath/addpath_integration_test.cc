// Runs real programs (/bin/sh, /usr/bin/env, /usr/bin/printenv) with
// libgpuslice-addpath.so preloaded under a fully controlled environment and
// checks the exact variables they print.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#ifndef GPUSLICE_ADDPATH_LIB
#error "GPUSLICE_ADDPATH_LIB must name libgpuslice-addpath.so"
#endif

namespace {

constexpr const char* kLib = GPUSLICE_ADDPATH_LIB;
// Real do-nothing libraries: preloading a missing file makes ld.so complain.
constexpr const char* kPreloadA = GPUSLICE_TEST_PRELOAD_A;
constexpr const char* kPreloadB = GPUSLICE_TEST_PRELOAD_B;
constexpr const char* kBasePath = "/usr/bin:/bin";

using Env = std::map<std::string, std::string>;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` with exactly the environment `env` (nothing inherited) and
// returns its exit code, stdout and stderr.
RunResult RunProgram(const std::vector<std::string>& argv, const Env& env) {
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : env) {
    env_strings.push_back(std::string(name).append("=").append(value));
  }
  std::vector<char*> argv_c, envp_c;
  for (const auto& a : argv) argv_c.push_back(const_cast<char*>(a.c_str()));
  argv_c.push_back(nullptr);
  for (const auto& e : env_strings) envp_c.push_back(const_cast<char*>(e.c_str()));
  envp_c.push_back(nullptr);

  RunResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv_c[0], &actions, nullptr, argv_c.data(), envp_c.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << rc;
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Parses `env`/`printenv` output (one NAME=value per line).
Env ParseEnv(const std::string& text) {
  Env vars;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

// A minimal environment with the library preloaded, plus `extra` (which may
// override PATH and LD_PRELOAD).
Env PreloadedEnv(const Env& extra) {
  Env env = {{"PATH", kBasePath}, {"LD_PRELOAD", kLib}};
  for (const auto& [name, value] : extra) env[name] = value;
  return env;
}

std::optional<std::string> Get(const Env& vars, const std::string& name) {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

// Runs `sh -c <script>` preloaded with `extra`; expects success and silence on
// stderr, and returns the variables /usr/bin/env printed.
Env ShellEnv(const Env& extra, const std::string& script = "/usr/bin/env") {
  RunResult r = RunProgram({"/bin/sh", "-c", script}, PreloadedEnv(extra));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return ParseEnv(r.out);
}

TEST(AddPathTest, WithoutTfVariablesNothingChanges) {
  Env vars = ShellEnv({{"LD_LIBRARY_PATH", "/l1::/l2:"}});
  EXPECT_EQ(Get(vars, "PATH"), kBasePath);
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), kLib);
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), "/l1::/l2:");  // not even normalized
}

TEST(AddPathTest, DocumentedExample) {
  Env vars = ShellEnv({{"TF_LD_PRELOAD", kPreloadA}});
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), std::string(kLib) + ":" + kPreloadA);
}

TEST(AddPathTest, AppendsAllThree) {
  Env vars = ShellEnv({{"LD_LIBRARY_PATH", "/l1"},
                       {"TF_PATH", "/opt/a/bin"},
                       {"TF_LD_PRELOAD", kPreloadA},
                       {"TF_LD_LIBRARY_PATH", "/l2"}});
  EXPECT_EQ(Get(vars, "PATH"), std::string(kBasePath) + ":/opt/a/bin");
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), std::string(kLib) + ":" + kPreloadA);
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), "/l1:/l2");
}

TEST(AddPathTest, PrependsAllThree) {
  Env vars = ShellEnv({{"LD_LIBRARY_PATH", "/l1"},
                       {"TF_PREPEND_PATH", "/opt/custom/bin"},
                       {"TF_PREPEND_LD_PRELOAD", kPreloadA},
                       {"TF_PREPEND_LD_LIBRARY_PATH", "/l0"}});
  EXPECT_EQ(Get(vars, "PATH"), std::string("/opt/custom/bin:") + kBasePath);
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), std::string(kPreloadA) + ":" + kLib);
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), "/l0:/l1");
}

TEST(AddPathTest, MultipleEntriesKeepTheirOrder) {
  Env vars = ShellEnv({{"TF_PATH", "/a:/b"}, {"TF_PREPEND_PATH", "/p:/q"}});
  EXPECT_EQ(Get(vars, "PATH"), std::string("/p:/q:") + kBasePath + ":/a:/b");
}

TEST(AddPathTest, PrependMovesExistingEntryToFront) {
  Env vars = ShellEnv({{"PATH", "/usr/bin:/bin:/opt/x"}, {"TF_PREPEND_PATH", "/opt/x"}});
  EXPECT_EQ(Get(vars, "PATH"), "/opt/x:/usr/bin:/bin");
}

TEST(AddPathTest, AppendLeavesExistingEntryInPlace) {
  Env vars = ShellEnv({{"PATH", "/opt/x:/usr/bin:/bin"}, {"TF_PATH", "/opt/x:/opt/y"}});
  EXPECT_EQ(Get(vars, "PATH"), "/opt/x:/usr/bin:/bin:/opt/y");
}

TEST(AddPathTest, NestedShellsKeepOneCopy) {
  Env extra = {{"TF_PATH", "/a"},
               {"TF_PREPEND_PATH", "/p"},
               {"TF_LD_PRELOAD", kPreloadA},
               {"TF_PREPEND_LD_LIBRARY_PATH", "/l0"}};
  Env once = ShellEnv(extra, "/usr/bin/printenv");
  Env nested = ShellEnv(extra, "/bin/sh -c '/bin/sh -c \"/bin/sh -c /usr/bin/printenv\"'");
  std::string path = std::string("/p:") + kBasePath + ":/a";
  std::string preload = std::string(kLib) + ":" + kPreloadA;
  for (const Env* vars : {&once, &nested}) {
    EXPECT_EQ(Get(*vars, "PATH"), path);
    EXPECT_EQ(Get(*vars, "LD_PRELOAD"), preload);
    EXPECT_EQ(Get(*vars, "LD_LIBRARY_PATH"), "/l0");
  }
}

TEST(AddPathTest, DirectExecCreatesUnsetTargets) {
  // No shell in between (a shell may invent its own PATH): printenv itself is
  // preloaded and prints its own environment.
  RunResult r = RunProgram(
      {"/usr/bin/printenv"},
      {{"LD_PRELOAD", kLib}, {"TF_PATH", "/opt/a/bin"}, {"TF_PREPEND_LD_LIBRARY_PATH", "/l0:/l1"}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  Env vars = ParseEnv(r.out);
  EXPECT_EQ(Get(vars, "PATH"), "/opt/a/bin");
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), "/l0:/l1");
}

TEST(AddPathTest, EmptyValuesChangeNothing) {
  Env vars = ShellEnv({{"TF_PATH", ""},
                       {"TF_PREPEND_PATH", ":::"},
                       {"TF_LD_PRELOAD", " : "},
                       {"TF_LD_LIBRARY_PATH", ""}});
  EXPECT_EQ(Get(vars, "PATH"), kBasePath);
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), kLib);
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), std::nullopt);
}

TEST(AddPathTest, StrayColonsAreDropped) {
  Env vars = ShellEnv({{"LD_LIBRARY_PATH", ":/l1::/l2:"},
                       {"TF_LD_LIBRARY_PATH", "::/l3::/l1:"},
                       {"TF_PATH", ":/a:"}});
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), "/l1:/l2:/l3");
  EXPECT_EQ(Get(vars, "PATH"), std::string(kBasePath) + ":/a");
}

TEST(AddPathTest, SpaceSeparatedPreloadIsUnderstood) {
  Env vars = ShellEnv({{"LD_PRELOAD", std::string(kLib) + "  " + kLib},
                       {"TF_LD_PRELOAD", std::string(kPreloadA) + " " + kPreloadB + " " + kLib}});
  EXPECT_EQ(Get(vars, "LD_PRELOAD"), std::string(kLib) + ":" + kPreloadA + ":" + kPreloadB);
}

TEST(AddPathTest, VeryLongValues) {
  // One 100 KB entry appended to PATH, and ~100 KB of short, repeating entries
  // added to LD_LIBRARY_PATH (half of them duplicates). Each stays under the
  // kernel's 128 KB limit for one environment string.
  std::string huge = "/" + std::string(size_t{100} * 1024, 'x');
  std::string many, expected;
  for (int i = 0; i < 16000; ++i) {
    std::string entry = "/l/" + std::to_string(i % 8000);
    many += entry + ":";
    if (i < 8000) expected += (i == 0 ? "" : ":") + entry;
  }
  ASSERT_GT(many.size(), 90u * 1024);
  Env extra = {{"TF_PATH", huge}, {"TF_LD_LIBRARY_PATH", many}};
  Env vars = ShellEnv(extra, "/bin/sh -c /usr/bin/printenv");
  EXPECT_EQ(Get(vars, "PATH"), std::string(kBasePath) + ":" + huge);
  EXPECT_EQ(Get(vars, "LD_LIBRARY_PATH"), expected);
}

TEST(AddPathTest, DebugLevelLogsToStderr) {
  RunResult r = RunProgram({"/bin/sh", "-c", "/usr/bin/printenv PATH"},
                           PreloadedEnv({{"TF_PATH", "/a"}, {"GPUSLICE_LOG_LEVEL", "debug"}}));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string(kBasePath) + ":/a\n");  // stdout untouched
  EXPECT_NE(r.err.find("gpuslice["), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("addpath: appended TF_PATH to PATH"), std::string::npos) << r.err;
}

TEST(AddPathTest, DefaultIsSilentAndWritesNoLogFile) {
  std::string log_file = testing::TempDir() + "addpath_silent_" + std::to_string(getpid());
  unlink(log_file.c_str());
  RunResult r = RunProgram({"/bin/sh", "-c", "/usr/bin/printenv PATH"},
                           PreloadedEnv({{"TF_PATH", "/a"},
                                         {"TF_PREPEND_LD_LIBRARY_PATH", "/l"},
                                         {"GPUSLICE_LOG_FILE", log_file}}));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string(kBasePath) + ":/a\n");
  EXPECT_EQ(r.err, "");
  EXPECT_NE(access(log_file.c_str(), F_OK), 0) << "log file created without a log level";
}

TEST(AddPathTest, LogFileReceivesDebugOutput) {
  std::string log_file = testing::TempDir() + "addpath_log_" + std::to_string(getpid());
  unlink(log_file.c_str());
  RunResult r = RunProgram({"/usr/bin/printenv", "PATH"}, {{"LD_PRELOAD", kLib},
                                                           {"TF_PATH", "/a"},
                                                           {"GPUSLICE_LOG_LEVEL", "debug"},
                                                           {"GPUSLICE_LOG_FILE", log_file}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "/a\n");
  EXPECT_EQ(r.err, "");
  FILE* f = fopen(log_file.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[4096] = {};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(log_file.c_str());
  EXPECT_NE(std::string(buf, n).find("appended TF_PATH to PATH"), std::string::npos);
}

// Runs a shell command and returns its stdout, or nullopt if it failed.
std::optional<std::string> Capture(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return pclose(p) == 0 ? std::optional(out) : std::nullopt;
}

TEST(AddPathTest, ExportsNothingAndNeedsOnlyLibc) {
  auto symbols = Capture(std::string("nm -D --defined-only ") + kLib + " 2>/dev/null");
  auto dynamic = Capture(std::string("readelf -d ") + kLib + " 2>/dev/null");
  if (!symbols || !dynamic) GTEST_SKIP() << "binutils (nm, readelf) not available";
  // Only linker-made version nodes may remain; no code or data symbols.
  std::istringstream lines(*symbols);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_NE(line.find(" A "), std::string::npos) << "exported: " << line;
  }
  EXPECT_EQ(dynamic->find("libstdc++"), std::string::npos) << *dynamic;
  EXPECT_EQ(dynamic->find("libgcc_s"), std::string::npos) << *dynamic;
}

}  // namespace
