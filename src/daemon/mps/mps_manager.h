// MpsManager: the daemon's MPS control daemons, one per GPU (DESIGN.md
// section 5).
//
// Lifecycle of a GPU's MPS control daemon:
//   1. The first tenant that acquires the GPU starts it: the GPU's compute mode
//      is saved and set to EXCLUSIVE_PROCESS, `nvidia-cuda-mps-control -d`
//      runs with CUDA_VISIBLE_DEVICES=<uuid> and its own pipe and log
//      directories (<root>/<uuid>/{pipe,log}), and its pid is read from the
//      pid file in the pipe directory.
//   2. Further tenants share it (the GPU's tenant set is its reference count).
//   3. CheckHealth() verifies each daemon: its pid is alive and a control
//      command (get_server_list) answers within the command timeout; a dead or
//      unresponsive daemon is killed and started again.
//   4. When the last tenant releases the GPU, `quit` stops the daemon (a kill
//      if it does not go), and the saved compute mode is restored.
// Tenants and per-GPU state are saved in <root>/state.json (MpsState, written
// to a temporary file and renamed) after every change; Start() on a new manager
// re-adopts live daemons and their tenants from it, restarts dead ones that
// still have tenants, and stops daemons under the root that no tenant uses.
//
// Tiers: a tenant gets "mps" where MPS can run, else "shared" (time-slicing
// under the limiter) with the reason, instead of an error. MPS cannot run when
// the platform is not Linux, the control binary is not found, the GPUs'
// compute mode cannot be set (no permission), or starting the daemon fails.
//
// Thread safety: all public methods may be called from any thread. They are
// serialised by one mutex, which is held across control commands: a slow or
// hung command (bounded by the command timeout) delays every other call,
// including those for other GPUs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/mps/mps_host.h"
#include "daemon/mps/mps_state.h"  // Tier, TenantSettings, GpuRef

namespace gpuslice::daemon::mps {

struct MpsOptions {
  std::string root = "/run/gpuslice/mps";
  // A path, or a name looked up on PATH.
  std::string control_binary = "nvidia-cuda-mps-control";
  int64_t command_timeout_ns = 5'000'000'000;  // every control command
  int64_t start_timeout_ns = 10'000'000'000;   // `-d` until the pid file exists
  int64_t stop_timeout_ns = 5'000'000'000;     // `quit` until the pid is gone
  int64_t poll_interval_ns = 50'000'000;       // while waiting for the above
};

struct AcquireRequest {
  std::string tenant;  // 1-100 of A-Z a-z 0-9 . _ -, not starting with '.'
  std::string gpus;    // "0", "0,1", "GPU-<uuid>" (or a list of them)
  TenantSettings settings;
};

// The environment for one process that uses one GPU through its MPS daemon.
struct GpuEnv {
  int index = 0;
  std::string uuid;
  std::map<std::string, std::string> env;
};

struct AcquireResult {
  Tier tier = Tier::kShared;
  std::string reason;  // why the tier is "shared" (empty for "mps")
  // The environment to start the tenant's processes with. With several GPUs
  // on the mps tier a process can use only one MPS daemon: `env` is the first
  // GPU's and `per_gpu` has one per GPU (one process per GPU).
  std::map<std::string, std::string> env;
  std::vector<GpuEnv> per_gpu;
};

struct TenantInfo {
  std::string name;
  Tier tier = Tier::kShared;
  std::string reason;
  std::vector<int> gpus;           // indexes
  std::vector<std::string> uuids;  // the same GPUs' UUIDs
  TenantSettings settings;
};

enum class Health { kUnknown, kHealthy, kUnhealthy };
std::string_view HealthName(Health health);  // "unknown", "healthy", "unhealthy"

struct GpuMpsStatus {
  int index = 0;
  std::string uuid;
  bool running = false;
  pid_t control_pid = 0;
  std::string pipe_dir, log_dir;
  ComputeMode previous_compute_mode = ComputeMode::kDefault;
  std::vector<std::string> tenants;
  Health health = Health::kUnknown;
  std::string last_error;
  int restarts = 0;
  int64_t last_check_ns = 0;  // manager clock; 0 if never checked
};

struct MpsStatus {
  bool available = false;
  std::string reason;  // why not, when unavailable
  // The MPS protocol the control binary speaks where MPS is available (2 or
  // 3), else 0. Probed, not inferred from the driver: `<binary> -p 3 -h`
  // lists MPS v3's `namespace` module only where v3 is there (NVIDIA's
  // requirements check for MPS v3).
  int protocol = 0;
  std::string control_binary;
  std::string root;
  std::vector<GpuMpsStatus> gpus;  // GPUs with a daemon (or one being restarted)
  // State file writes that failed (what they held is lost to a daemon
  // restart), and the last one's error.
  uint64_t save_failures = 0;
  std::string last_save_error;
};

class MpsManager {
 public:
  // `gpus`, `host` and `clock` must outlive the manager.
  MpsManager(MpsOptions options, GpuModeControl& gpus, MpsHost& host, const Clock& clock);

  MpsManager(const MpsManager&) = delete;
  MpsManager& operator=(const MpsManager&) = delete;

  // Probes whether MPS can run and recovers the state file. Call once, before
  // anything else. An error only when the state directory is unusable or the
  // state file is corrupt (it is then left as it is).
  Status Start();

  // Gives `tenant` the GPUs in `request.gpus`. InvalidArgument for a bad
  // tenant name, GPU list or setting, NotFound for an unknown GPU,
  // AlreadyExists if the tenant holds other GPUs. Acquiring the same GPUs
  // again replaces the tenant's settings and returns the environment again.
  StatusOr<AcquireResult> Acquire(const AcquireRequest& request);
  // Drops `tenant`; the last tenant of a GPU stops its daemon. NotFound if
  // unknown.
  Status Release(std::string_view tenant);
  // Replaces the tenant's settings (fields not given keep their value); the
  // result is its new environment, for processes started from now on (an MPS
  // client's limits are fixed when it connects). Where the tenant is the only
  // one on a GPU the thread percentage and pinned memory limit are also
  // applied to that daemon's running servers.
  StatusOr<AcquireResult> UpdateSettings(std::string_view tenant, const TenantSettings& settings);
  // Ends MPS client `client_pid` on `gpu` (index or UUID): finds the server it
  // is connected to and runs `terminate_client`. NotFound if no server of
  // that GPU's daemon has that client.
  Status TerminateClient(std::string_view gpu, pid_t client_pid);

  // Checks every daemon, restarting dead or unresponsive ones. Call
  // periodically (MpsHealthChecker does).
  void CheckHealth();

  MpsStatus GetStatus() const;
  std::vector<TenantInfo> Tenants() const;

  // The state file: <root>/state.json.
  std::string StatePath() const;

 private:
  struct GpuState {
    int index = 0;
    std::string uuid;
    pid_t control_pid = 0;  // 0 while not running
    ComputeMode previous_mode = ComputeMode::kDefault;
    std::set<std::string> tenants;
    Health health = Health::kUnknown;
    std::string last_error;
    int restarts = 0;
    int64_t last_check_ns = 0;
    int protocol = 2;  // the protocol its daemon was started with
  };
  struct Tenant {
    Tier tier = Tier::kShared;
    std::string reason;
    std::vector<GpuRef> gpus;
    TenantSettings settings;
    // v3 GPUs where its namespace could not be made: it uses v2 variables there.
    std::set<std::string> v2_gpus;
  };

  StatusOr<std::vector<GpuRef>> ResolveGpus(std::string_view list) const;
  Status Probe();
  // REQUIRES: mu_ held, binary_path_ set. 3 or 2 (see MpsStatus::protocol).
  int ProbeProtocol();
  Status Recover();
  std::string PipeDir(const std::string& uuid) const;
  std::string LogDir(const std::string& uuid) const;
  std::map<std::string, std::string> ControlEnv(const GpuState& gpu) const;
  // Runs one control command line against `gpu`'s daemon; its stdout.
  StatusOr<std::string> Control(const GpuState& gpu, const std::string& command);
  // Starts the daemon of `gpu` (compute mode already saved and set).
  Status StartDaemon(GpuState& gpu);
  // Quits (or kills) the daemon of `gpu`; does not touch the compute mode.
  void StopDaemon(GpuState& gpu);
  // Brings `gpu` up for a first tenant: compute mode, then the daemon.
  Status BringUp(GpuState& gpu);
  // Stops the daemon and restores the compute mode.
  void TearDown(GpuState& gpu);
  bool WaitUntil(int64_t timeout_ns, const std::function<bool()>& condition);
  StatusOr<pid_t> ReadPidFile(const std::string& uuid);
  AcquireResult EnvFor(const std::string& name, const Tenant& tenant) const;
  // MPS v3 (docs/daemon.md "MPS v3"): whether `tenant` is served by its own
  // namespace on `gpu` (a v3 daemon, and the namespace's socket path fits).
  bool UsesNamespace(const GpuState& gpu, const std::string& name, const Tenant& tenant) const;
  // Creates (or, if it exists, sets) the tenant's namespace on a v3 `gpu`;
  // a failure is logged and the tenant falls back to v2 variables there.
  void EnsureNamespace(GpuState& gpu, const std::string& name, Tenant& tenant);
  // REQUIRES: mu_ held. Writes the state file; Save's error is logged,
  // SaveState's also counted (MpsStatus::save_failures, the metrics).
  Status Save();
  void SaveState();

  const MpsOptions options_;
  GpuModeControl& gpus_;
  MpsHost& host_;
  const Clock& clock_;

  mutable std::mutex mu_;
  bool available_ = false;                     // GUARDED_BY(mu_)
  int protocol_ = 0;                           // GUARDED_BY(mu_)
  std::string unavailable_;                    // GUARDED_BY(mu_)
  std::string binary_path_;                    // GUARDED_BY(mu_)
  std::map<std::string, GpuState> gpu_state_;  // by UUID; GUARDED_BY(mu_)
  std::map<std::string, Tenant> tenants_;      // GUARDED_BY(mu_)
  uint64_t save_failures_ = 0;                 // GUARDED_BY(mu_)
  std::string last_save_error_;                // GUARDED_BY(mu_)
};

// Checks an API's tenant settings: percentage 1..100, pinned memory limit a
// positive whole number of MiB, priority 0 or 1.
Status ValidateSettings(const TenantSettings& settings);

// Parses a tenant name (see AcquireRequest::tenant).
Status ValidateTenantName(std::string_view name);

}  // namespace gpuslice::daemon::mps
