// The side effects the MPS manager has on the machine, behind interfaces so the
// manager's logic runs in unit tests against fakes and a simulated clock:
// - GpuModeControl: GPU identity and compute mode (the daemon's NVML layer in
//   production, adapted by the daemon; an in-memory fake in tests);
// - MpsHost: running commands (the MPS control tool) with stdin and a timeout,
//   process liveness and signals, the state file, sleeping.
//
// Thread safety: implementations must allow calls from several threads (the
// manager serialises its own calls, but the daemon may share a GpuModeControl).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/gpu/compute_mode.h"

namespace gpuslice::daemon::mps {

// The daemon's one compute-mode type (daemon/gpu/compute_mode.h).
using ::gpuslice::daemon::ComputeMode;
using ::gpuslice::daemon::ComputeModeName;
using ::gpuslice::daemon::ParseComputeMode;

// GPU identity and compute mode, by NVML index.
class GpuModeControl {
 public:
  virtual ~GpuModeControl() = default;
  virtual StatusOr<int> DeviceCount() = 0;
  // "GPU-xxxxxxxx-...": the UUID NVML reports for `index`.
  virtual StatusOr<std::string> Uuid(int index) = 0;
  virtual StatusOr<ComputeMode> GetComputeMode(int index) = 0;
  // PermissionDenied where the caller may not change it (not root); changes
  // nothing.
  virtual Status CheckComputeModeSettable(int index) = 0;
  // Holds `mode` on the GPU for MPS until ReleaseComputeMode, across
  // gpusliced's restarts (as MPS's control daemons run on); `baseline`: the
  // mode the GPU goes back to when no one else holds one.
  virtual Status HoldComputeMode(int index, ComputeMode mode, ComputeMode baseline) = 0;
  // Ends MPS's hold (none: OK).
  virtual Status ReleaseComputeMode(int index) = 0;
};

// One command to run to completion.
struct CommandSpec {
  std::vector<std::string> argv;  // argv[0] is a path
  // Variables set for the command, on top of (and overriding) the caller's
  // own environment.
  std::map<std::string, std::string> env;
  std::string stdin_text;  // written to the command's stdin, which is then closed
  int64_t timeout_ns = 0;  // > 0: the command is killed (SIGKILL) when it runs longer
  // Non-empty: stdout and stderr are appended to this file (e.g. /dev/null)
  // instead of being captured. Needed for commands that daemonise: their
  // background child keeps the inherited descriptors open.
  std::string output_file;
};

struct CommandResult {
  int exit_code = 0;       // exit status, or 128 + signal
  bool timed_out = false;  // killed after timeout_ns
  std::string out;         // stdout (empty with output_file)
  std::string err;         // stderr (empty with output_file)
};

class MpsHost {
 public:
  virtual ~MpsHost() = default;

  // Whether this platform can run MPS at all (MPS is Linux only).
  virtual bool IsLinux() = 0;
  // The path of `program`: itself if it contains a '/' and is executable,
  // else the first executable match on PATH. NotFound otherwise.
  virtual StatusOr<std::string> FindExecutable(std::string_view program) = 0;
  // Runs a command and waits for it (at most its timeout). Never leaves a
  // zombie. An error Status only when it could not be started at all.
  virtual StatusOr<CommandResult> Run(const CommandSpec& spec) = 0;

  // True if `pid` exists and is not a zombie.
  virtual bool ProcessAlive(pid_t pid) = 0;
  virtual Status Kill(pid_t pid, int signal) = 0;

  // Files. ReadFile gives NotFound when the file does not exist.
  virtual StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Writes to a temporary file beside `path` and renames it over `path`.
  virtual Status WriteFileAtomic(const std::string& path, std::string_view contents) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;  // OK if absent
  virtual Status MakeDirs(const std::string& path) = 0;    // mkdir -p, mode 0755
  // Names of the entries of a directory (not "." or ".."); NotFound if absent.
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;

  // Blocks the calling thread for `ns` (a no-op, or a clock advance, in fakes).
  virtual void SleepNs(int64_t ns) = 0;
};

}  // namespace gpuslice::daemon::mps
