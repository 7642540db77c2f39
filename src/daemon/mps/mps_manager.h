// MpsManager: the daemon's MPS control daemons, one per GPU, and their
// tenants (DESIGN.md section 5; docs/mps.md).
//
// Each GPU's control daemon is an MpsControlDaemon (mps_control_daemon.h: its
// lifecycle, health checks and MPS v3 namespaces) with its own lock; the
// manager holds the tenants and which GPUs each uses, and places a tenant by
// asking each of its GPUs' daemons in turn.
//
// Tenants and per-GPU state are saved in <root>/state.json (MpsState, written
// to a temporary file and renamed) after every change, from the snapshots each
// daemon publishes under its own lock; Start() on a new manager re-adopts live
// daemons and their tenants from it, restarts dead ones that still have
// tenants, and stops daemons under the root that no tenant uses.
//
// Tiers: a tenant gets "mps" where MPS can run, else "shared" (time-slicing
// under the limiter) with the reason, instead of an error. MPS cannot run when
// the platform is not Linux, the control binary is not found, the GPUs'
// compute mode cannot be set (no permission), or starting the daemon fails.
//
// Thread safety: all public methods may be called from any thread. A call
// waits only for the daemons of the GPUs it names (a control command holds
// its daemon's lock, bounded by the command timeout): a hung daemon on one
// GPU never delays placing, changing or releasing tenants on the others, nor
// GetStatus(), Tenants() or the state file. Calls for the same tenant are
// serialised. Lock order: a tenant's turn (busy_), then daemon locks (one at
// a time), then save_mu_, then mu_, then a daemon's published snapshot.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/mps/mps_control_daemon.h"
#include "daemon/mps/mps_host.h"
#include "daemon/mps/mps_state.h"  // Tier, TenantSettings, GpuRef

namespace gpuslice::daemon::mps {

struct AcquireRequest {
  std::string tenant;  // 1-100 of A-Z a-z 0-9 . _ -, not starting with '.'
  std::string gpus;    // "0", "0,1", "GPU-<uuid>" (or a list of them)
  TenantSettings settings;
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
  // MPS v3: the static SM partition of each tenant that has one, its SMs.
  std::map<std::string, uint32_t> sm_partitions;
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
  struct Tenant {
    Tier tier = Tier::kShared;
    std::string reason;
    std::vector<GpuRef> gpus;
    TenantSettings settings;
  };
  // Holds tenant `name`'s turn for its scope: calls for one tenant wait for
  // each other, never for other tenants.
  class TenantTurn {
   public:
    TenantTurn(MpsManager& manager, std::string name);
    ~TenantTurn();
    TenantTurn(const TenantTurn&) = delete;
    TenantTurn& operator=(const TenantTurn&) = delete;

   private:
    MpsManager& manager_;
    std::string name_;
  };

  StatusOr<std::vector<GpuRef>> ResolveGpus(std::string_view list) const;
  Status Probe();
  // 3 or 2 (see MpsStatus::protocol). REQUIRES: config_.binary_path set.
  int ProbeProtocol();
  Status Recover() EXCLUDES(mu_, save_mu_);
  // The daemon of `gpu`, made on first use; one per GPU for the manager's life.
  std::shared_ptr<MpsControlDaemon> DaemonOf(const GpuRef& gpu) EXCLUDES(mu_);
  std::vector<std::shared_ptr<MpsControlDaemon>> AllDaemons() const EXCLUDES(mu_);
  // The client environment of a tenant on the shared tier.
  static AcquireResult SharedEnv(const Tenant& tenant);
  // Writes the state file from the tenants and every daemon's published
  // snapshot; a failure is logged and counted (MpsStatus::save_failures).
  void SaveState() EXCLUDES(save_mu_, mu_);

  const MpsOptions options_;
  GpuModeControl& gpus_;
  MpsHost& host_;
  const Clock& clock_;

  // Written by Start() only, before any other call; read-only after.
  MpsDaemonConfig config_;
  bool available_ = false;
  std::string unavailable_;

  mutable Mutex save_mu_ ACQUIRED_BEFORE(mu_);
  uint64_t save_failures_ GUARDED_BY(save_mu_) = 0;
  std::string last_save_error_ GUARDED_BY(save_mu_);

  mutable Mutex mu_;
  std::condition_variable_any turn_cv_;         // a tenant's turn ended
  std::set<std::string> busy_ GUARDED_BY(mu_);  // tenants whose turn is held
  std::map<std::string, std::shared_ptr<MpsControlDaemon>> daemons_ GUARDED_BY(mu_);  // by UUID
  std::map<std::string, Tenant> tenants_ GUARDED_BY(mu_);
};

// Checks an API's tenant settings: percentage 1..100, pinned memory limit a
// positive whole number of MiB, priority 0 or 1.
Status ValidateSettings(const TenantSettings& settings);

// Parses a tenant name (see AcquireRequest::tenant).
Status ValidateTenantName(std::string_view name);

}  // namespace gpuslice::daemon::mps
