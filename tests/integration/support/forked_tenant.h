// ForkedTenants: tenant processes for the daemon's integration tests. Each
// is a forked child of the test that registers itself with gpusliced over
// its Unix socket (POST /v1/tenants, so the daemon identifies it by
// SO_PEERCRED), optionally first joining a cgroup, a new pid namespace and
// another uid, reports the daemon's answer to the test, and then either runs
// a step the test gives it (join a segment, exec a program) or waits until
// the test releases or kills it.
//
// Header-only, for test binaries that link gpuslice_cli_http and
// nlohmann_json. Not thread-safe: one test thread uses one instance.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/unix_http_client.h"

namespace gpuslice::testing {

// The daemon's answer to a registration, as the registering process got it.
struct TenantReply {
  int status = -1;   // HTTP status; -1: no answer (the client's error is the body)
  std::string body;  // the reply's body
};

struct ForkedTenantOptions {
  // A cgroup directory (of a mounted cgroup hierarchy) the process moves
  // itself into ("0" written to its cgroup.procs) before anything else; its
  // pid namespace's processes are born there. Empty: stays in the test's.
  std::string cgroup;
  // Registers from pid 1 of a new pid namespace (CLONE_NEWPID; needs root).
  bool own_pid_namespace = false;
  // Registers as this uid (and gid of the same number; needs root).
  std::optional<uid_t> uid;
  // Runs in the registered process after the reply and before the test hears
  // of it; a non-empty result is reported as ForkedTenant::step_error.
  std::function<std::string(const TenantReply&)> after_register;
  // Runs after the report in place of waiting for Release (e.g. an execve);
  // if it returns, the process exits with status 6.
  std::function<void(const TenantReply&)> then;
};

// NOLINTNEXTLINE(bugprone-exception-escape): nlohmann::json member; a test helper.
struct ForkedTenant {
  // Above the kernel's largest pid_max (2^22): never a process, so a kill()
  // of an unset pid harms nothing.
  static constexpr pid_t kNoProcess = 1 << 23;

  pid_t pid = kNoProcess;    // the registered process's host pid (the reply's
                             // tenant.host_pid), else `child`
  pid_t child = kNoProcess;  // the test's direct child (differs in a pid namespace)
  int status = -1;           // of POST /v1/tenants; -1: no answer, or a setup step failed
  nlohmann::json body;       // its reply (discarded JSON when not JSON)
  std::string step_error;    // after_register's, or why a setup step failed
  int stop_fd = -1;          // ForkedTenants' (closing it releases a waiting tenant)
};

class ForkedTenants {
 public:
  ForkedTenants() = default;
  explicit ForkedTenants(std::string socket) : socket_(std::move(socket)) {}
  ~ForkedTenants() { KillAll(); }
  ForkedTenants(const ForkedTenants&) = delete;
  ForkedTenants& operator=(const ForkedTenants&) = delete;

  // The daemon's Unix socket the tenants register on.
  void set_socket(std::string socket) { socket_ = std::move(socket); }

  // Forks a tenant that registers with `body` as `options` say and returns
  // once it has reported the daemon's answer.
  ForkedTenant Start(const std::string& body, const ForkedTenantOptions& options = {}) {
    ForkedTenant t;
    int report[2], stop[2];
    if (pipe2(report, O_CLOEXEC) != 0 || pipe2(stop, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << strerror(errno);
      return t;
    }
    const pid_t child = fork();
    if (child == 0) RunChild(body, options, report, stop);  // never returns
    close(report[1]);
    close(stop[0]);
    if (child < 0) {
      ADD_FAILURE() << "fork: " << strerror(errno);
      close(report[0]);
      close(stop[1]);
      return t;
    }
    t.child = child;
    t.pid = child;
    t.stop_fd = stop[1];
    int32_t status = -1;
    std::string text, step;
    if (ReadAll(report[0], &status, sizeof status) && ReadString(report[0], text) &&
        ReadString(report[0], step)) {
      t.status = status;
      t.step_error = step;
      t.body = nlohmann::json::parse(text, nullptr, false);
      if (t.body.is_object() && t.body.contains("tenant") && t.body["tenant"].is_object()) {
        const auto host_pid = t.body["tenant"].value("host_pid", 0);
        if (host_pid > 0) t.pid = host_pid;
      }
    } else {
      t.step_error = "the tenant exited before reporting";
    }
    close(report[0]);
    tenants_.push_back(t);
    return t;
  }

  // Lets a waiting tenant exit by itself, and reaps it.
  void Release(ForkedTenant& t) {
    ForkedTenant* own = Find(t);
    if (own == nullptr) return;
    CloseStop(*own);
    Reap(t);
  }

  // SIGKILLs the tenant (and, in a pid namespace, the registered process)
  // and reaps it. Nothing for a tenant already reaped.
  void Kill(ForkedTenant& t) {
    ForkedTenant* own = Find(t);
    if (own == nullptr) return;
    // Signal only a child still ours and running: one reaped elsewhere (a
    // waitpid of the test's) may have had its pid reused.
    if (waitpid(own->child, nullptr, WNOHANG) != 0) {
      CloseStop(*own);
      Forget(t);
      return;
    }
    if (own->pid > 0 && own->pid != own->child) kill(own->pid, SIGKILL);
    if (own->child > 0) kill(own->child, SIGKILL);
    CloseStop(*own);
    Reap(t);
  }

  // Waits for the tenant's exit; its exit code, or 128 + signal (-1 if it
  // was reaped already).
  int Join(ForkedTenant& t) {
    if (Find(t) == nullptr) return -1;
    int status = 0;
    waitpid(t.child, &status, 0);
    Forget(t);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Releases every waiting tenant and reaps them all (a tenant that runs a
  // program is waited for: kill it first).
  void ReleaseAll() {
    for (ForkedTenant& t : tenants_) CloseStop(t);
    for (ForkedTenant t : std::vector<ForkedTenant>(tenants_)) Reap(t);
  }

  void KillAll() {
    for (ForkedTenant t : std::vector<ForkedTenant>(tenants_)) Kill(t);
  }

 private:
  [[noreturn]] void RunChild(const std::string& body, const ForkedTenantOptions& options,
                             const int report[2], const int stop[2]) {
    close(report[0]);
    close(stop[1]);
    auto fail = [&](const std::string& why) {
      Report(report[1], -1, "", why);
      _exit(3);
    };
    if (!options.cgroup.empty()) {
      const std::string procs = options.cgroup + "/cgroup.procs";
      const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) fail("cannot join " + procs + ": " + strerror(errno));
      close(fd);
    }
    if (options.own_pid_namespace) {
      // The next child is pid 1 of a new namespace; this one waits for it.
      if (unshare(CLONE_NEWPID) != 0) fail(std::string("unshare: ") + strerror(errno));
      const pid_t inner = fork();
      if (inner < 0) fail(std::string("fork: ") + strerror(errno));
      if (inner != 0) {
        close(report[1]);
        close(stop[0]);
        int st = 0;
        waitpid(inner, &st, 0);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
      }
    }
    if (options.uid && (setgid(*options.uid) != 0 || setuid(*options.uid) != 0)) {
      fail("cannot become uid " + std::to_string(*options.uid));
    }
    auto r =
        cli::UnixHttpClient(socket_, std::chrono::seconds(10)).Request("POST", "/v1/tenants", body);
    TenantReply reply;
    reply.status = r.ok() ? r->status : -1;
    reply.body = r.ok() ? r->body : r.status().ToString();
    const std::string step = options.after_register ? options.after_register(reply) : "";
    if (!Report(report[1], reply.status, reply.body, step)) _exit(5);
    close(report[1]);
    if (options.then) {
      options.then(reply);
      _exit(6);
    }
    char c;
    while (read(stop[0], &c, 1) > 0) {
    }
    _exit(0);
  }

  static bool Report(int fd, int32_t status, const std::string& body, const std::string& step) {
    return WriteAll(fd, &status, sizeof status) && WriteString(fd, body) && WriteString(fd, step);
  }
  static bool WriteAll(int fd, const void* data, size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = write(fd, p, size);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  static bool WriteString(int fd, const std::string& s) {
    const auto len = static_cast<uint32_t>(s.size());
    return WriteAll(fd, &len, sizeof len) && WriteAll(fd, s.data(), s.size());
  }
  static bool ReadAll(int fd, void* data, size_t size) {
    auto* p = static_cast<char*>(data);
    while (size > 0) {
      const ssize_t n = read(fd, p, size);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  static bool ReadString(int fd, std::string& out) {
    uint32_t len = 0;
    if (!ReadAll(fd, &len, sizeof len)) return false;
    out.assign(len, '\0');
    return ReadAll(fd, out.data(), len);
  }

  // The record of `t` while it is not reaped; null otherwise.
  ForkedTenant* Find(const ForkedTenant& t) {
    for (ForkedTenant& own : tenants_) {
      if (own.child == t.child && t.child != ForkedTenant::kNoProcess) return &own;
    }
    return nullptr;
  }
  static void CloseStop(ForkedTenant& t) {
    if (t.stop_fd >= 0) close(t.stop_fd);
    t.stop_fd = -1;
  }
  void Reap(ForkedTenant& t) {
    if (Find(t) == nullptr) return;
    waitpid(t.child, nullptr, 0);  // ECHILD if reaped elsewhere: nothing to wait for
    Forget(t);
  }
  // Drops the record of `t` (reaped) and marks the caller's copy so.
  void Forget(ForkedTenant& t) {
    const pid_t child = t.child;
    std::erase_if(tenants_, [child](const ForkedTenant& own) { return own.child == child; });
    t.child = ForkedTenant::kNoProcess;
    t.stop_fd = -1;
  }

  std::string socket_;
  std::vector<ForkedTenant> tenants_;  // started and not yet reaped
};

// A ForkedTenantOptions::then that execs `argv` (argv[0] a path) with `env`
// and, when `reply_env`, the registration reply's "env" object after it (as a
// limiter would start its CUDA work; getenv finds the first of a name, so a
// variable already in `env` wins), its stdout in "<out_dir>/tenant<pid>.out".
// Exits 7 when that file cannot be made.
inline std::function<void(const TenantReply&)> ExecAfterReply(std::vector<std::string> argv,
                                                              std::vector<std::string> env,
                                                              std::string out_dir,
                                                              bool reply_env = true) {
  return [argv = std::move(argv), env = std::move(env), out_dir = std::move(out_dir),
          reply_env](const TenantReply& r) mutable {
    if (reply_env) {
      const nlohmann::json reply = nlohmann::json::parse(r.body, nullptr, false);
      if (reply.is_object() && reply.contains("env") && reply["env"].is_object()) {
        for (const auto& [name, value] : reply["env"].items()) {
          if (value.is_string()) env.push_back(name + "=" + value.get<std::string>());
        }
      }
    }
    const std::string out = out_dir + "/tenant" + std::to_string(getpid()) + ".out";
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0) _exit(7);
    std::vector<char*> argv_c;
    std::vector<char*> env_c;
    argv_c.reserve(argv.size() + 1);
    env_c.reserve(env.size() + 1);
    for (auto& a : argv) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    for (auto& e : env) env_c.push_back(e.data());
    env_c.push_back(nullptr);
    execve(argv_c[0], argv_c.data(), env_c.data());
  };
}

}  // namespace gpuslice::testing
