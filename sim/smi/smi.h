// The simulated nvidia-smi: the subset of the real tool's command line that
// gpuslice's tests, demo and users rely on, built only on NVML calls (through
// NvmlApi), so it shows whatever the loaded libnvidia-ml.so.1 reports.
//
//   nvidia-smi                       the summary table (devices, then processes)
//   nvidia-smi -L                    one line per GPU with its UUID
//   nvidia-smi --query-gpu=F,... --format=csv[,noheader][,nounits]
//   nvidia-smi --query-compute-apps=F,... --format=csv[,noheader][,nounits]
//   -i ID[,ID...]                    selects GPUs by index, UUID or PCI bus id
//   -h, --help
//   nvidia-smi memory-limits [-i ID] -c CGROUP            the r615 limits of a cgroup
//   nvidia-smi memory-limits [-i ID] -c CGROUP --hard-limit SIZE [--soft-limit SIZE]
//   nvidia-smi memory-limits [-i ID] -c CGROUP --clear
//     CGROUP is the full sysfs path of a cgroup v2 directory; SIZE is bytes or
//     a quantity such as 2GiB. Setting needs root (exit 4); a driver without
//     the limits, a MIG device or a node without cgroup v2 exits 3.
//   nvidia-smi -i ID -mig 0|1        sets the MIG mode (root; pending while in use)
//   nvidia-smi mig [-i ID] -lgip | -lgipp | -lgi | -lci    MIG profiles, placements, instances
//   nvidia-smi mig [-i ID] -cgi PROFILE[,PROFILE...] [-C]  creates GPU (and compute) instances
//   nvidia-smi mig [-i ID] -dci [-gi IDS] [-ci IDS] | -dgi [-gi IDS]   destroys them
//     (smi_mig.h); -L lists each GPU's MIG devices under it.
//
// Exit codes are the real tool's: 0 success, 2 invalid argument or field,
// 6 no such device / query failed, 9 driver (NVML init) failure, 12 NVML
// library not found.
#pragma once

#include <string>
#include <vector>

#include "sim/smi/nvml_api.h"

namespace gpuslice::smi {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidArgument = 2;
inline constexpr int kExitNotSupported = 3;
inline constexpr int kExitNoPermission = 4;
inline constexpr int kExitQueryFailed = 6;
inline constexpr int kExitDriverNotLoaded = 9;
inline constexpr int kExitLibraryNotFound = 12;

// Output of one run: what goes to stdout and stderr, and the exit code.
struct SmiResult {
  std::string out;
  std::string err;
  int exit_code = kExitOk;
};

struct SmiOptions {
  bool help = false;
  bool list = false;
  std::vector<std::string> ids;  // -i: indices, UUIDs or PCI bus ids
  std::string query_gpu;         // comma-separated field names
  std::string query_apps;
  bool format_given = false;
  bool csv = false, noheader = false, nounits = false;
  int mig_mode = -1;  // -mig / --multi-instance-gpu: 0 or 1 sets the MIG mode
  // mig subcommand (smi_mig.h)
  bool mig = false;
  std::string mig_action;  // "-lgip", "-lgipp", "-cgi", "-lgi", "-lci", "-dci", "-dgi"
  std::vector<std::string> mig_profiles;  // -cgi: profile names or ids
  bool mig_default_ci = false;            // -C: a compute instance in each created GPU instance
  std::vector<unsigned> gi_ids, ci_ids;   // -gi / -ci: only these instances
  // memory-limits subcommand
  bool memory_limits = false;
  std::string cgroup;  // -c / --cgroup
  bool set_hard = false, set_soft = false, clear = false;
  unsigned long long hard_bytes = 0, soft_bytes = 0;
};

// Parses the arguments after argv[0]. On error fills result (err, exit code)
// and returns false.
bool ParseSmiArgs(const std::vector<std::string>& args, SmiOptions* options, SmiResult* result);

// Runs a parsed command against an initialised NVML. REQUIRES: nvmlInit succeeded.
SmiResult RunSmi(const SmiOptions& options, const NvmlApi& nvml);

// The help text (-h).
std::string SmiHelp();
// The help text of `nvidia-smi memory-limits -h`.
std::string MemoryLimitsHelp();

}  // namespace gpuslice::smi
