// SimGpu: one process's handle on a simulation. Maps the shared state file
// (creating and initialising it on first use), registers the calling process,
// and offers the operations the simulated driver and NVML are built from.
//
// Every operation takes the state mutex, advances the schedule of the devices
// it touches to now, does its work and unlocks. Operations that wait (a full
// launch queue, a synchronisation) compute when the work they depend on could
// earliest complete, sleep until then unlocked, and re-check, since other
// processes may have queued work meanwhile.
//
// Thread-safe. Process-shared through the mutex, which is robust: a process
// killed while holding it does not wedge the others.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "sim/core/config.h"
#include "sim/core/process_identity.h"
#include "sim/core/state.h"

namespace gpuslice::sim {

struct OpenOptions {
  std::string state_path;   // default: DefaultStatePath()
  std::string config_text;  // JSON; empty = DefaultSimConfig()
  // An observer (NVML, nvidia-smi, the CLI) reads and sets device state but is
  // not a process of the simulation: it is not registered and cannot create
  // contexts. It accepts a state made from any config.
  bool observer = false;
};

// Initialises a zeroed SimState from `config` as of `now_ns` (monotonic).
void InitializeState(SimState* state, const SimConfig& config, uint64_t config_hash,
                     int64_t now_ns);

// GPUSLICE_SIM_STATE, or /dev/shm/gpuslice-sim-<uid>.state.
std::string DefaultStatePath();
// Options from GPUSLICE_SIM_STATE and GPUSLICE_SIM_CONFIG.
StatusOr<OpenOptions> OptionsFromEnv();

// What an MPS client context gets from its server (fixed at connect).
struct MpsAttachment {
  int32_t server_pid = 0;           // the nvidia-cuda-mps-server serving it
  uint32_t thread_percent = 100;    // active thread percentage, 1..100
  uint64_t pinned_limit_bytes = 0;  // device memory cap for the context; 0 = none
  uint32_t priority = 0;            // CUDA_MPS_CLIENT_PRIORITY
  uint32_t sm_count = 0;            // in an MPS v3 static SM partition, its SMs; else 0
};

// SMs an MPS client with `thread_percent` sees: floor(sms x percent / 100),
// at least 1; all of them at 100.
uint32_t MpsSmCount(uint32_t sms, uint32_t thread_percent);

// The status operations return on a context whose MPS client was terminated
// (the driver maps it to CUDA_ERROR_MPS_CLIENT_TERMINATED).
Status MpsClientTerminatedError();
bool IsMpsClientTerminated(const Status& status);

// Names a context across processes: a slot and the generation it had when
// created (a stale handle to a reused slot is detected).
struct ContextId {
  int32_t index = -1;
  uint64_t generation = 0;
};

class SimGpu {
 public:
  // Maps the state at options.state_path, creating it from options.config_text
  // if absent. If it exists but was made from another config: re-created when
  // no live process uses it, else FailedPrecondition naming the users.
  static StatusOr<std::unique_ptr<SimGpu>> Open(const OpenOptions& options);
  ~SimGpu();
  SimGpu(const SimGpu&) = delete;
  SimGpu& operator=(const SimGpu&) = delete;

  int device_count() const;
  const DeviceInfo& device(int index) const;  // REQUIRES: 0 <= index < device_count()
  const SimParams& params() const;
  const std::string& path() const { return path_; }

  // ---- contexts ----
  // Creates a context of this process on `device`, reserving
  // params.context_bytes. Errors: ResourceExhausted (memory or slots),
  // FailedPrecondition (compute mode forbids it; message says which),
  // InvalidArgument (no such device).
  // With `mps`, the context is an MPS client of mps->server_pid (flag
  // kContextMpsClient): EXCLUSIVE_PROCESS admits it beside that server and its
  // other clients; at most kMaxMpsClientsPerDevice per device
  // (ResourceExhausted). A kContextMpsServer context is the server's own.
  // With `lane` > 0 the context is on that MIG device of `device` (mig_state.h
  // MigLane): FailedPrecondition if the compute instance is gone; its memory
  // is its GPU instance's. A GPU in MIG mode takes contexts only on its MIG
  // devices (FailedPrecondition for lane 0).
  StatusOr<ContextId> CreateContext(int device, uint32_t flags = 0,
                                    const MpsAttachment* mps = nullptr, int lane = 0);
  Status DestroyContext(ContextId ctx);

  // ---- memory accounting (callers back the bytes themselves) ----
  // Charges `bytes` rounded up to the granularity to the context's device.
  // ResourceExhausted when the device (or the context's MIG instance) has
  // not that much free, an MPS
  // client's pinned memory limit would be exceeded, or (not `managed`) a
  // driver memory limit of this process's cgroup would (memory_limits.h).
  // Managed memory is charged to the device but not to cgroup limits.
  Status Allocate(ContextId ctx, uint64_t bytes, bool managed = false);
  // Same rounding and `managed` as the Allocate it undoes.
  void Free(ContextId ctx, uint64_t bytes, bool managed = false);
  uint64_t RoundToGranularity(uint64_t bytes) const;
  // The device's free/total, or inside a limited cgroup the limit's view
  // (ViewFromCgroup); on a MIG device (`lane` > 0) its GPU instance's.
  // Observers see the device's.
  void MemoryInfo(int device, uint64_t* free_bytes, uint64_t* total_bytes, int lane = 0);

  // ---- work ----
  // Duration of a kernel launch per the model (DESIGN.md section 7): a kernel
  // named "gpuslice_sim_spin" takes `spin_ns`; others launch_ns + waves *
  // wave_ns * clock_factor.
  // An MPS client passes its thread percentage: the waves are counted over
  // MpsSmCount(SMs, thread_percent) SMs; a MIG device passes its SMs
  // (`sm_count` > 0: counted over those).
  int64_t KernelDurationNs(int device, std::string_view function_name, uint64_t blocks,
                           uint32_t threads_per_block, uint64_t spin_ns,
                           uint32_t thread_percent = 100, uint32_t sm_count = 0) const;
  // Queues a kernel; blocks while max_pending ops are in flight. Returns its seq.
  StatusOr<uint64_t> EnqueueKernel(ContextId ctx, int64_t duration_ns);
  // Queues an event marker for `event_slot`. Returns its seq.
  StatusOr<uint64_t> EnqueueEventRecord(ContextId ctx, int event_slot);
  bool IsComplete(ContextId ctx, uint64_t seq);
  // Waits until every op of ctx with seq <= `seq` completed.
  Status Wait(ContextId ctx, uint64_t seq);
  // Seq of the context's last queued op (0 if none ever).
  uint64_t LastSeq(ContextId ctx);

  // Event slots live in the context record so that any process advancing the
  // schedule can timestamp them.
  StatusOr<int> AllocateEventSlot(ContextId ctx);
  void FreeEventSlot(ContextId ctx, int slot);
  // Completion time of the marker with `seq` recorded for `slot`, if complete.
  bool EventTime(ContextId ctx, int slot, uint64_t seq, int64_t* time_ns);

  // ---- MPS ----
  // The server side: this process serves `device` (DeviceState::mps_server_pid)
  // or stops serving it.
  void SetMpsServer(int device, bool serving);
  // terminate_client: every MPS client context of process `client_pid` (of
  // server `server_pid`) drops its work, returns its memory and is marked
  // kContextMpsTerminated; later operations on it return
  // MpsClientTerminatedError(). Returns how many contexts it hit. Callable by
  // observers.
  int TerminateMpsClient(int32_t server_pid, int32_t client_pid);

  // ---- everything else (NVML, stats, settings) ----
  // Runs f(SimState&) under the lock after advancing every device to now and
  // reaping dead processes. f must not block.
  template <typename F>
  auto WithState(F&& f) {
    Locked lock(*this);
    AdvanceAllLocked(NowNs());
    return f(*state_);
  }
  // Clears ground truth: exited processes, counters, windows. Live contexts and
  // memory stay.
  void ResetStats();
  int64_t NowNs() const { return MonotonicNs(); }
  // This process's slot in state.processes.
  int process_slot() const { return process_slot_; }
  // How this process is named in the records (its host pid when the node
  // helper told it; see process_identity.h).
  const ProcessIdentity& identity() const { return self_; }

 private:
  class Locked {
   public:
    explicit Locked(SimGpu& gpu);
    ~Locked();
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    SimGpu& gpu_;
  };

  SimGpu(std::string path, SimState* state, size_t mapped_size, bool observer);
  // Takes `self` as this process's identity (at open, and in a forked child).
  void AdoptIdentity(const ProcessIdentity& self);
  void AdvanceAllLocked(int64_t now);
  // Destroys the contexts of processes found dead. Only records whose pid
  // namespace this process's /proc shows are judged (view_ns_).
  void ReapDeadProcessesLocked(int64_t now, bool force);
  // Drops context i's work, returns its memory and marks it terminated (later
  // operations fail with MpsClientTerminatedError). REQUIRES: lock.
  void TerminateContextLocked(int i, int64_t now);
  // Whether record `p` names this process.
  bool IsSelf(const ProcessRecord& p) const;
  // Whether this process can tell that record `p`'s process is gone.
  bool KnownDead(const ProcessRecord& p) const;
  int RegisterProcessLocked();
  ContextRecord* LookupLocked(ContextId ctx);
  // LookupLocked, and not terminated: *status says why when it returns nullptr.
  ContextRecord* LookupLiveLocked(ContextId ctx, Status* status);
  enum class WaitFor { kCompletion, kLaunchSlot, kQueueSlot };
  // Sleeps until op `seq` completed (kCompletion), or until the queue has room
  // for a kernel (kLaunchSlot: below max_pending) or a marker (kQueueSlot).
  Status WaitUntil(ContextId ctx, WaitFor what, uint64_t seq);

  std::string path_;
  SimState* state_;
  size_t mapped_size_;
  int process_slot_ = -1;  // -1 for observers
  pid_t pid_;              // getpid() as of the last fork check
  // g_fork_generation when pid_ was last checked; read before the state's lock
  // by every thread (relaxed: a stale value only means checking getpid()).
  std::atomic<uint64_t> fork_generation_{0};
  std::string node_socket_;  // the node helper's socket (NodeSocketPath)
  ProcessIdentity self_;     // this process's record identity
  uint64_t view_ns_ = 0;     // pid namespace this process's /proc shows; 0 = unknown
  bool observer_;
};

}  // namespace gpuslice::sim
