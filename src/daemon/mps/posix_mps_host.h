// PosixMpsHost: MpsHost on the real machine (posix_spawn, /proc, the
// filesystem, nanosleep).
//
// Run(): the command's stdin is a socket (so writing to a command that exits
// early gives an error, never SIGPIPE), stdout and stderr are pipes read with
// poll() until the command exits; at the timeout the command is killed with
// SIGKILL and reaped. Output a daemonised grandchild writes after the command
// has exited is not waited for. Thread-safe: every descriptor it opens is
// close-on-exec, so concurrent spawns do not leak them into each other.
#pragma once

#include "daemon/mps/mps_host.h"

namespace gpuslice::daemon::mps {

class PosixMpsHost final : public MpsHost {
 public:
  bool IsLinux() override;
  StatusOr<std::string> FindExecutable(std::string_view program) override;
  StatusOr<CommandResult> Run(const CommandSpec& spec) override;
  bool ProcessAlive(pid_t pid) override;
  Status Kill(pid_t pid, int signal) override;
  StatusOr<std::string> ReadFile(const std::string& path) override;
  Status WriteFileAtomic(const std::string& path, std::string_view contents) override;
  Status RemoveFile(const std::string& path) override;
  Status MakeDirs(const std::string& path) override;
  StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  void SleepNs(int64_t ns) override;
};

}  // namespace gpuslice::daemon::mps
