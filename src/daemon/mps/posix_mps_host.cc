#include "daemon/mps/posix_mps_host.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/process.h"

extern char** environ;

namespace gpuslice::daemon::mps {
namespace {

Status Errno(const std::string& what) {
  const int err = errno;
  const std::string message = what + ": " + strerror(err);
  if (err == ENOENT) return NotFound(message);
  if (err == EACCES || err == EPERM) return PermissionDenied(message);
  return Unavailable(message);
}

bool Executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Closes a descriptor once (and marks it closed).
void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The caller's environment with `overrides` replacing or adding variables.
std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string name(entry.substr(0, entry.find('=')));
    if (!overrides.contains(name)) env.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) {
    std::string entry = name;
    entry += '=';
    entry += value;
    env.push_back(std::move(entry));
  }
  return env;
}

}  // namespace

bool PosixMpsHost::IsLinux() {
#ifdef __linux__
  return true;
#else
  return false;
#endif
}

StatusOr<std::string> PosixMpsHost::FindExecutable(std::string_view program) {
  const std::string name(program);
  if (name.empty()) return InvalidArgument("empty program name");
  if (name.find('/') != std::string::npos) {
    if (Executable(name)) return name;
    return NotFound(name + " is not an executable file");
  }
  const char* path = getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    std::string candidate(dir.empty() ? std::string_view(".") : dir);
    candidate += '/';
    candidate += name;
    if (Executable(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return NotFound(name + " not found on PATH");
}

StatusOr<CommandResult> PosixMpsHost::Run(const CommandSpec& spec) {
  if (spec.argv.empty()) return InvalidArgument("no command to run");
  int in[2] = {-1, -1};
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* fds : {in, out, err}) {
      CloseFd(fds[0]);
      CloseFd(fds[1]);
    }
  };
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) return Errno("socketpair");
  if (!!spec.output_file.empty() && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
    Status failed = Errno("pipe");
    close_all();
    return failed;
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[1], 0);
  if (!spec.output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, spec.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else {
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  }
  // Its own process group: a terminal's Ctrl-C to the daemon does not reach it.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);

  std::vector<std::string> argv_s = spec.argv;
  std::vector<std::string> env_s = MergedEnvironment(spec.env);
  std::vector<char*> argv_c;
  std::vector<char*> env_c;
  argv_c.reserve(argv_s.size() + 1);
  env_c.reserve(env_s.size() + 1);
  for (auto& a : argv_s) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  for (auto& e : env_s) env_c.push_back(e.data());
  env_c.push_back(nullptr);

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv_c[0], &actions, &attr, argv_c.data(), env_c.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  CloseFd(in[1]);
  CloseFd(out[1]);
  CloseFd(err[1]);
  if (rc != 0) {
    close_all();
    errno = rc;
    return Errno("cannot run " + spec.argv[0]);
  }

  CommandResult result;
  const int64_t deadline = spec.timeout_ns > 0 ? MonotonicNs() + spec.timeout_ns : INT64_MAX;
  size_t written = 0;
  if (spec.stdin_text.empty()) CloseFd(in[0]);
  int status = 0;
  bool exited = false;
  while (!exited) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    const int64_t now = MonotonicNs();
    if (now >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      exited = true;
      break;
    }
    pollfd fds[3];
    nfds_t n = 0;
    if (in[0] >= 0) fds[n++] = {in[0], POLLOUT, 0};
    if (out[0] >= 0) fds[n++] = {out[0], POLLIN, 0};
    if (err[0] >= 0) fds[n++] = {err[0], POLLIN, 0};
    // Wake at least every 10 ms to notice the exit even when a grandchild
    // keeps the pipes open.
    const int64_t wait_ms = std::min<int64_t>((deadline - now) / 1'000'000 + 1, 10);
    if (poll(fds, n, static_cast<int>(wait_ms)) < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in[0]) {
        const ssize_t w = send(in[0], spec.stdin_text.data() + written,
                               spec.stdin_text.size() - written, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = spec.stdin_text.size();
        if (written >= spec.stdin_text.size()) CloseFd(in[0]);
        continue;
      }
      char buf[4096];
      const ssize_t r = read(fds[i].fd, buf, sizeof buf);
      std::string& sink = fds[i].fd == out[0] ? result.out : result.err;
      if (r > 0) {
        sink.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        CloseFd(fds[i].fd == out[0] ? out[0] : err[0]);
      }
    }
  }
  // What is already in the pipes, without waiting for writers that linger.
  for (int fd : {out[0], err[0]}) {
    if (fd < 0) continue;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0) {
      (fd == out[0] ? result.out : result.err).append(buf, static_cast<size_t>(r));
    }
  }
  close_all();
  if (!exited) {  // poll failed: do not leave it running or unreaped
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool PosixMpsHost::ProcessAlive(pid_t pid) { return gpuslice::ProcessAlive(pid, 0); }

Status PosixMpsHost::Kill(pid_t pid, int signal) {
  if (pid <= 0) return InvalidArgument("kill: bad pid " + std::to_string(pid));
  if (kill(pid, signal) != 0 && errno != ESRCH) return Errno("kill " + std::to_string(pid));
  return Status::Ok();
}

StatusOr<std::string> PosixMpsHost::ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(path);
  std::string text;
  char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(r));
  const int read_errno = errno;
  close(fd);
  if (r < 0) {
    errno = read_errno;
    return Errno(path);
  }
  return text;
}

Status PosixMpsHost::WriteFileAtomic(const std::string& path, std::string_view contents) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(temp);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t w = write(fd, contents.data() + done, contents.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      Status failed = Errno(temp);
      close(fd);
      unlink(temp.c_str());
      return failed;
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    Status failed = Errno(temp);
    unlink(temp.c_str());
    return failed;
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    Status failed = Errno("rename to " + path);
    unlink(temp.c_str());
    return failed;
  }
  return Status::Ok();
}

Status PosixMpsHost::RemoveFile(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return Errno(path);
  return Status::Ok();
}

Status PosixMpsHost::MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    if (ec == std::errc::permission_denied) return PermissionDenied(path + ": " + ec.message());
    return Unavailable(path + ": " + ec.message());
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> PosixMpsHost::ListDir(const std::string& path) {
  std::error_code ec;
  std::vector<std::string> names;
  std::filesystem::directory_iterator it(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return NotFound(path + ": " + ec.message());
    return Unavailable(path + ": " + ec.message());
  }
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  return names;
}

void PosixMpsHost::SleepNs(int64_t ns) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

}  // namespace gpuslice::daemon::mps
