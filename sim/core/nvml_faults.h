// Faults the simulated NVML injects (docs/sim-nvml.md "NVML faults"): a control
// file beside the simulation's state file, "<state path>.nvml-faults", which
// `gpuslice sim nvml-fault` writes, one rule a line:
//
//   <function|*> <gpu|*> <error> [after=N] [times=M]
//
// e.g. "* 1 GPU_IS_LOST" (every device call on GPU 1 fails: a GPU fallen off
// the bus) or "nvmlDeviceSetPowerManagementLimit * UNKNOWN after=1 times=1"
// (the second power-limit setting, on whichever GPU, fails once: an error in
// the middle of a multi-GPU setting).
//
// A rule matches a call of the entry point `function` ("*": any entry point
// that takes a device handle) on device index `gpu` ("*": any). Of the calls
// it matches, the first `after` succeed, the next `times` (0: all, until the
// rule is removed) return `error` (an NVML error name without the
// NVML_ERROR_ prefix, or its number) without touching the simulation. The
// first rule that fails a call decides it. Calls are counted per process,
// from the moment the process first sees the file as it is: every change to
// the file restarts every count.
//
// The file is replaced whole (temporary file, then rename), so a reader sees
// the old rules or the new ones, never half a file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuslice::sim {

struct NvmlFaultRule {
  std::string function = "*";
  int gpu = -1;   // -1: any
  int error = 0;  // an nvmlReturn_t, never NVML_SUCCESS
  uint64_t after = 0;
  uint64_t times = 0;  // 0: every call after `after`

  bool operator==(const NvmlFaultRule&) const = default;
};

std::string NvmlFaultsPath(const std::string& state_path);

// The nvmlReturn_t an error name ("GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "15")
// stands for; kInvalidArgument for an unknown name or NVML_SUCCESS.
StatusOr<int> ParseNvmlError(std::string_view name);
// "GPU_IS_LOST" for 15; the number for a code without a name.
std::string NvmlErrorName(int error);

// One line of the file (without its newline), and back.
StatusOr<NvmlFaultRule> ParseNvmlFaultRule(std::string_view line);
std::string FormatNvmlFaultRule(const NvmlFaultRule& rule);

// The file's rules (none when there is no file). A malformed line is
// kInvalidArgument naming it.
StatusOr<std::vector<NvmlFaultRule>> ReadNvmlFaults(const std::string& state_path);
// Replaces the file with `rules` (removes it when empty).
Status WriteNvmlFaults(const std::string& state_path, const std::vector<NvmlFaultRule>& rules);

// One process's view of the file: decides each call. Thread-safe.
class NvmlFaultInjector {
 public:
  explicit NvmlFaultInjector(std::string state_path);

  // The error the call of `function` on device `gpu` must return, or 0
  // (NVML_SUCCESS) to go ahead. Re-reads the file when it changed (one
  // stat(2) per call otherwise); an unreadable or malformed file injects
  // nothing.
  int Check(std::string_view function, int gpu);

 private:
  struct Signature {
    ino_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const Signature&) const = default;
  };
  void RefreshLocked();

  const std::string state_path_;
  std::mutex mu_;
  Signature seen_;                    // guarded by mu_
  std::vector<NvmlFaultRule> rules_;  // guarded by mu_
  std::vector<uint64_t> matched_;     // guarded by mu_: calls each rule matched
};

}  // namespace gpuslice::sim
