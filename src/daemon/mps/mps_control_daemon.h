// MpsControlDaemon: one GPU's MPS control daemon as the MPS manager runs it
// (DESIGN.md section 5; docs/mps.md "One control daemon per GPU"), with its
// own lock and state, so that a hung daemon delays only the calls for its own
// GPU.
//
// Lifecycle (the manager runs one per GPU, for its whole life):
//   1. The first tenant brings it up: the GPU's compute mode is saved and set
//      to EXCLUSIVE_PROCESS, `nvidia-cuda-mps-control -d` runs with
//      CUDA_VISIBLE_DEVICES=<uuid> and its own pipe and log directories
//      (<root>/<uuid>/{pipe,log}); on MPS v3 with `-p 3 -a <root>/<uuid>/mps.toml`
//      holding a namespace per tenant. Its pid is read from the pid file.
//   2. Further tenants share it (its tenant set is the reference count); on
//      v3 each gets a namespace (`namespace create`), or v2 variables where
//      that fails.
//   3. CheckHealth(): its pid is alive and `get_server_list` answers within
//      the command timeout; else it is killed and started again.
//   4. The last tenant's removal stops it (`quit`, a kill if it does not go)
//      and restores the compute mode.
//
// State file: after every change the daemon publishes a snapshot of its
// record (taken under its lock) and calls the manager's save function, which
// writes <root>/state.json from the published snapshots of every daemon
// without taking their locks: a hung daemon never blocks another's save.
//
// Thread safety: every method may be called from any thread. Calls on one
// daemon are serialised by its own mutex, held across its control commands
// (each bounded by the command timeout); Published() never waits for them.
// Lock order: a daemon's mutex, then the manager's save lock (inside `save`),
// then any daemon's published-snapshot mutex (a leaf).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/mps/mps_host.h"
#include "daemon/mps/mps_state.h"
#include "gpuslice/paths.h"

namespace gpuslice::daemon::mps {

struct MpsOptions {
  std::string root = kDefaultMpsRoot;
  // A path, or a name looked up on PATH.
  std::string control_binary = "nvidia-cuda-mps-control";
  int64_t command_timeout_ns = 5'000'000'000;  // every control command
  int64_t start_timeout_ns = 10'000'000'000;   // `-d` until the pid file exists
  int64_t stop_timeout_ns = 5'000'000'000;     // `quit` until the pid is gone
  int64_t poll_interval_ns = 50'000'000;       // while waiting for the above
};

enum class Health { kUnknown, kHealthy, kUnhealthy };
std::string_view HealthName(Health health);  // "unknown", "healthy", "unhealthy"

// The environment for one process that uses one GPU through its MPS daemon.
struct GpuEnv {
  int index = 0;
  std::string uuid;
  std::map<std::string, std::string> env;
};

// What every daemon of one manager shares, fixed by the manager's Start().
struct MpsDaemonConfig {
  MpsOptions options;
  std::string binary_path;  // the control binary found by the probe
  int protocol = 2;         // what the binary speaks (2 or 3)
};

// sun_path holds 108 bytes; a control socket path must fit.
inline constexpr size_t kMaxSocketPath = 107;

// The directory of GPU `uuid`'s control daemon under the MPS root `root`
// (its pipe/ and log/ are in it): the UUID's first 12 characters, "GPU-" and
// 8 hex digits. Short, so that an MPS v3 namespace's control socket,
// <dir>/pipe/<server>/<namespace>/control, fits a socket address for a
// namespace named by a claim UID (36 characters) under a root of up to 30:
// with the whole UUID it never did, and every claim's client fell back to
// the GPU's shared pipe directory.
std::string MpsGpuDir(const std::string& root, const std::string& uuid);

class MpsControlDaemon {
 public:
  // What the daemon's record holds at the last change; see the header.
  struct Snapshot {
    MpsState::GpuRecord record;
    bool running = false;
    Health health = Health::kUnknown;
    std::string last_error;
    int64_t last_check_ns = 0;                      // 0 if never checked
    std::map<std::string, uint32_t> sm_partitions;  // tenant -> SMs of its partition (v3)
  };

  // `gpus`, `host`, `clock` and whatever `save` uses must outlive the daemon.
  // `save` writes the manager's state file; it must not take this daemon's
  // mutex (it may read Published()).
  MpsControlDaemon(GpuRef gpu, const MpsDaemonConfig& config, GpuModeControl& gpus, MpsHost& host,
                   const Clock& clock, std::function<void()> save);

  MpsControlDaemon(const MpsControlDaemon&) = delete;
  MpsControlDaemon& operator=(const MpsControlDaemon&) = delete;

  const GpuRef& gpu() const { return gpu_; }
  std::string PipeDir() const;
  std::string LogDir() const;

  // Adds `tenant` (or replaces its settings), bringing the daemon up for a
  // first tenant; the tenant's client environment on this GPU. An error when
  // the daemon cannot be brought up (the compute mode is then restored and
  // nothing is left running). REQUIRES: valid name and settings.
  StatusOr<GpuEnv> AddTenant(const std::string& tenant, const TenantSettings& settings)
      EXCLUDES(mu_);
  // Removes `tenant`; the last one stops the daemon and restores the compute
  // mode. A tenant it does not hold: nothing.
  void RemoveTenant(const std::string& tenant) EXCLUDES(mu_);
  // Applies `settings` (merged; `changed` names the fields given) to a tenant
  // it holds: its namespace on v3; on v2, where it is the only tenant, the
  // running servers' thread percentage and pinned memory limit. Its new
  // client environment. NotFound if it does not hold the tenant.
  StatusOr<GpuEnv> UpdateTenant(const std::string& tenant, const TenantSettings& settings,
                                const TenantSettings& changed) EXCLUDES(mu_);
  // `terminate_client` for the server that has `client_pid`. NotFound when
  // no daemon runs or no server has it.
  Status TerminateClient(pid_t client_pid) EXCLUDES(mu_);
  // Verifies the daemon (see the header, step 3) where it has tenants.
  void CheckHealth(bool can_start) EXCLUDES(mu_);

  // Recovery at the manager's start from the state file's `record` and the
  // tenants' settings: re-adopts a live daemon, restarts a dead one that has
  // tenants (where `can_start`), and stops one without tenants. Whether the
  // record still holds anything.
  bool Recover(const MpsState::GpuRecord& record,
               const std::map<std::string, TenantSettings>& tenants, bool can_start,
               const std::string& unavailable) EXCLUDES(mu_);
  // Stops a daemon of this GPU that no record knows (pid from its pid file).
  void StopOrphan() EXCLUDES(mu_);

  // The record at the last change; nullopt when the daemon holds nothing (no
  // tenants, no process). Never waits for a control command.
  std::optional<Snapshot> Published() const EXCLUDES(published_mu_);

 private:
  struct TenantState {
    TenantSettings settings;
    bool v2 = false;  // on a v3 daemon its namespace could not be made: v2 variables
    // Its static SM partition (named as the tenant) on a v3 daemon: the chunks
    // it was made with and the SMs the daemon reports; 0 when it has none.
    uint32_t partition_chunks = 0;
    uint32_t partition_sms = 0;
  };

  StatusOr<std::string> Control(const std::string& command) REQUIRES(mu_);
  StatusOr<pid_t> ReadPidFile() const;
  bool WaitUntil(int64_t timeout_ns, const std::function<bool()>& condition);
  std::map<std::string, std::string> ControlEnv() const;
  Status StartDaemon() REQUIRES(mu_);
  void StopDaemon() REQUIRES(mu_);
  Status BringUp() REQUIRES(mu_);
  void TearDown() REQUIRES(mu_);
  bool UsesNamespace(const std::string& tenant) const REQUIRES(mu_);
  void EnsureNamespace(const std::string& tenant) REQUIRES(mu_);
  // MPS v3: makes, resizes or deletes the tenant's static SM partition to
  // match settings.sm_partition_percent (docs/mps.md "SM partitions"); a
  // failure is logged and the tenant runs without one (its namespace's
  // thread percentage still holds).
  void EnsurePartition(const std::string& tenant) REQUIRES(mu_);
  void DeletePartition(const std::string& tenant) REQUIRES(mu_);
  GpuEnv EnvFor(const std::string& tenant) const REQUIRES(mu_);
  // Copies the record into the published snapshot, then saves the state file.
  void PublishAndSave() REQUIRES(mu_);
  void Publish() REQUIRES(mu_);

  const GpuRef gpu_;
  const MpsDaemonConfig& config_;
  GpuModeControl& gpus_;
  MpsHost& host_;
  const Clock& clock_;
  const std::function<void()> save_;

  mutable Mutex mu_ ACQUIRED_BEFORE(published_mu_);
  pid_t control_pid_ GUARDED_BY(mu_) = 0;  // 0 while not running
  ComputeMode previous_mode_ GUARDED_BY(mu_) = ComputeMode::kDefault;
  // Set from BringUp's save until TearDown: the compute mode is ours to restore.
  bool mode_saved_ GUARDED_BY(mu_) = false;
  std::map<std::string, TenantState> tenants_ GUARDED_BY(mu_);
  Health health_ GUARDED_BY(mu_) = Health::kUnknown;
  std::string last_error_ GUARDED_BY(mu_);
  int restarts_ GUARDED_BY(mu_) = 0;
  int64_t last_check_ns_ GUARDED_BY(mu_) = 0;
  int protocol_ GUARDED_BY(mu_) = 2;  // the protocol its daemon was started with

  mutable Mutex published_mu_;
  std::optional<Snapshot> published_ GUARDED_BY(published_mu_);
};

}  // namespace gpuslice::daemon::mps
