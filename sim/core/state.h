// The simulated GPU's shared state: one file (GPUSLICE_SIM_STATE), mapped by
// every process of a simulation. Layout rules (DESIGN.md section 3 style):
// fixed-width fields, trivially copyable, magic + version + size first.
//
// Concurrency: every field below the header's `mutex` is guarded by it
// (a robust, process-shared mutex; see SimGpu). Fields marked "immutable" are
// written once at creation and may be read without the lock.
//
// Invariants (checked by tests and, in debug builds, by CheckInvariants):
//  1. A context's queue holds `count` ops starting at `head`; their seqs are
//     consecutive, ending at next_seq - 1; completed_seq = first seq - 1.
//  2. The op at a non-empty queue's head is a kernel with remaining_ns > 0:
//     event markers are completed as soon as everything before them is.
//  3. DeviceState::used_bytes = sum over its active contexts of
//     reservation_bytes + allocated_bytes; ProcessRecord memory likewise.
//  4. At most one scheduling group of a device's lane executes at any instant
//     (time-slicing). A group is one plain context, or all MPS client contexts
//     of one server on the device (their kernels run concurrently). Lanes
//     (MIG devices) execute independently.
//  5. A context's lane is 0 unless its device is in MIG mode, and a GPU in
//     MIG mode has no context on lane 0 (a mode change needs an idle GPU).
#pragma once

#include <pthread.h>

#include <cstdint>
#include <type_traits>

namespace gpuslice::sim {

inline constexpr uint64_t kStateMagic = 0x4d49535f534c5047;  // "GPLS_SIM"
// 2: MPS fields; 3: host pids (ProcessRecord); 4: r615 per-cgroup memory limits;
// 5: a window's per-process samples for every context (kWindowProcesses);
// 6: MIG mode and instances (DeviceState::mig_*)
inline constexpr uint32_t kStateVersion = 6;

inline constexpr int kMaxDevices = 8;
inline constexpr int kMaxContexts = 128;
inline constexpr int kMaxProcesses = 512;
inline constexpr int kQueueCapacity = 1024;  // upper bound for config max_pending
inline constexpr int kEventsPerContext = 1024;
inline constexpr int kUtilWindows = 64;  // closed NVML sampling windows kept
// Per-process samples kept per window: one for every context's process.
inline constexpr int kWindowProcesses = kMaxContexts;
inline constexpr int kMaxFunctions = 64;            // per-function wave_ns overrides
inline constexpr int kMaxMpsClientsPerDevice = 48;  // Volta+ MPS limit
inline constexpr int kMaxMemoryLimits = 32;         // r615 cgroup memory limits per device
inline constexpr int kCgroupPathBytes = 256;        // full sysfs cgroup path, NUL-terminated
inline constexpr int kMaxGpuInstances = 8;          // MIG: a GPU has 8 memory slices
inline constexpr int kMaxComputeInstances = 8;      // per GPU instance (at most 7 compute slices)

// ---- configuration (immutable after creation) ----

struct FunctionCost {
  char name[64];    // kernel (CUfunction) name, NUL-terminated
  int64_t wave_ns;  // duration of one wave at clock factor 1
};

// What nvmlDeviceGetProcessUtilization returns (SimParams::process_util).
enum ProcessUtilMode : uint32_t {
  // One sample per process over every window since lastSeenTimeStamp, each
  // window split exactly by what each process ran (an idealisation).
  kProcessUtilSplit = 0,
  // One sample per closed window, for one process drawn in proportion to what
  // each ran in it, carrying the window's whole device busy percent: what an
  // H100 on r580 does with time-sliced processes (docs/sim.md; the default).
  kProcessUtilWindow = 1,
};

struct SimParams {
  int64_t timeslice_ns;    // round-robin slice (DESIGN default 1024 us)
  int64_t switch_ns;       // context switch cost; nothing executes during it
  int64_t sample_ns;       // NVML utilization window
  int64_t launch_ns;       // fixed cost of every non-spin kernel
  int64_t wave_ns;         // default duration of one wave
  uint64_t context_bytes;  // device memory reserved by each context
  uint64_t granularity;    // allocation granularity (sizes round up to it)
  uint32_t max_pending;    // launches in flight per context before launch blocks
  uint32_t function_count;
  char driver_version[32];       // nvmlSystemGetDriverVersion, e.g. "580.65.06" or "615.10"
  uint32_t soft_limit_eviction;  // 1: model soft-limit eviction (see memory_limits.h)
  // Stream-ordered pools reserve backing memory in blocks of this many
  // granules (config "pool_block"; 0, in a state file of an older build: 1).
  uint32_t pool_block_granules;
  // How nvmlDeviceGetProcessUtilization attributes a window (config
  // "process_util"; docs/sim.md "Per-process utilization").
  uint32_t process_util;  // ProcessUtilMode
  uint32_t reserved;
  FunctionCost functions[kMaxFunctions];
};

// ---- devices ----

enum ComputeMode : uint32_t {  // values of nvmlComputeMode_t / CUcomputemode
  kComputeDefault = 0,
  kComputeExclusiveThread = 1,  // deprecated upstream; treated as exclusive process
  kComputeProhibited = 2,
  kComputeExclusiveProcess = 3,
};

struct DeviceInfo {  // immutable
  char name[96];
  char uuid[48];        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  char pci_bus_id[32];  // "00000000:19:00.0"
  char serial[32];
  uint32_t pci_domain, pci_bus, pci_device, pci_device_id, pci_subsystem_id;
  uint32_t sm_count;
  uint32_t max_threads_per_sm;
  uint32_t max_threads_per_block;
  uint32_t max_blocks_per_sm;
  uint32_t cc_major, cc_minor;
  uint32_t max_sm_clock_mhz, max_mem_clock_mhz;
  uint32_t default_sm_clock_mhz, default_mem_clock_mhz;  // application clocks
  uint32_t power_min_mw, power_max_mw, power_default_mw;
  uint32_t power_idle_mw;  // at 0% utilization
  uint32_t power_busy_mw;  // at 100% utilization, before the limit caps it
  uint32_t temperature_c;
  uint32_t memory_bus_width;
  uint32_t mig_enabled;  // MIG mode at creation (config "mig"); DeviceState::mig_mode is live
  uint64_t total_bytes;
};

struct UtilWindow {          // one closed NVML sampling window
  int64_t start_ns, end_ns;  // monotonic
  uint32_t gpu_percent;      // busy share of the window, rounded
  uint32_t process_count;
  struct {
    int32_t pid;
    uint32_t sm_percent;
  } processes[kWindowProcesses];  // processes that ran in the window
};

// An r615 per-cgroup memory limit (nvmlDeviceSetMemoryLimits_v1). A slot is
// in use iff cgroup[0] != 0. The limit applies to every process whose cgroup
// is `cgroup` or below it.
struct MemoryLimitRecord {
  char cgroup[kCgroupPathBytes];  // full sysfs path, e.g. "/sys/fs/cgroup/tenants/a"
  uint64_t soft_bytes;            // recorded and reported only (see docs/sim.md)
  uint64_t hard_bytes;            // allocations beyond fail with out-of-memory
};

// One time-slicing domain of a device (scheduler.h): lane 0 is the whole
// GPU; lane MigLane(gi, ci) (mig_state.h) a MIG compute instance, whose
// contexts time-slice among themselves only.
struct SchedLane {
  int32_t running_ctx;    // context index executing or switching in; -1 idle
  int32_t last_ctx;       // context that executed last; -1 none
  int64_t switch_end_ns;  // running_ctx starts executing at this time
  int64_t slice_end_ns;   // running_ctx's slice ends at this time
  uint32_t rr_next;       // round-robin cursor: first context index to consider
  uint32_t pad;
};
inline constexpr int kSchedLanes = 1 + kMaxGpuInstances * kMaxComputeInstances;

// MIG instances (mig_state.h). A record is in use iff `used` != 0. The
// placements are in the units of NVML's: a GPU instance's memory slices of
// the GPU's eight, a compute instance's compute slices of its GPU instance's.
struct MigComputeInstanceRecord {
  uint32_t used;
  uint32_t id;       // within its GPU instance (nvmlComputeInstanceInfo_t::id)
  uint32_t profile;  // NVML_COMPUTE_INSTANCE_PROFILE_* index
  uint32_t start, size;
  uint32_t pad;
  char uuid[48];  // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
};

struct MigGpuInstanceRecord {
  uint32_t used;
  uint32_t id;       // nvmlGpuInstanceInfo_t::id
  uint32_t profile;  // NVML_GPU_INSTANCE_PROFILE_* index (MigProfileIndex)
  uint32_t start, size;
  uint32_t pad;
  MigComputeInstanceRecord compute[kMaxComputeInstances];
};

struct DeviceState {
  DeviceInfo info;  // immutable

  // Settings (NVML setters). Locked clocks of 0 mean "not locked".
  uint32_t power_limit_mw;
  uint32_t persistence;   // 0 or 1
  uint32_t compute_mode;  // ComputeMode
  uint32_t locked_sm_min_mhz, locked_sm_max_mhz;
  uint32_t locked_mem_min_mhz, locked_mem_max_mhz;
  uint32_t mps_server_pid;  // the MPS server serving this device; 0 = none

  uint64_t used_bytes;  // invariant 3

  // Scheduler (see scheduler.h). The schedule is computed up to sched_ns;
  // each lane time-slices its own contexts.
  int64_t sched_ns;
  SchedLane lanes[kSchedLanes];

  // Ground truth.
  int64_t busy_ns;   // time a kernel executed
  uint64_t kernels;  // kernels completed
  int64_t switches;  // context switches performed
  double energy_mj;  // integrated power

  // NVML sampling: the open window and the ring of closed ones.
  int64_t window_start_ns;
  int64_t window_busy_ns;
  uint32_t window_process_count;
  uint32_t pad2;
  struct {
    int32_t process_slot;
    int32_t pad;
    int64_t busy_ns;
  } window_processes[kWindowProcesses];
  uint64_t windows_closed;  // total ever closed; ring index = n % kUtilWindows
  UtilWindow windows[kUtilWindows];

  MemoryLimitRecord memory_limits[kMaxMemoryLimits];  // r615 driver only

  // MIG (mig_state.h): the mode and the mode after the next activation
  // (NVML_DEVICE_MIG_ENABLE 1 or _DISABLE 0), and the instances.
  uint32_t mig_mode;
  uint32_t mig_pending_mode;
  uint64_t mig_created;  // compute instances ever created: each one's UUID is new
  MigGpuInstanceRecord gpu_instances[kMaxGpuInstances];
};

// ---- processes ----

enum ProcessStatus : uint32_t { kProcessFree = 0, kProcessAlive = 1, kProcessExited = 2 };
enum ProcessFlags : uint32_t {
  kProcessHostPid = 1u << 0,  // pid was learned from the node helper (see process_identity.h)
};

// A process is named by its host pid, as NVIDIA's driver names it; `pid_ns`
// says in which pid namespace `pid` is valid (the node helper's, or the
// process's own when it could not learn its host pid). Only a process whose
// /proc shows `pid_ns` judges whether the record's process is alive.
struct ProcessRecord {
  int32_t pid;
  uint32_t status;      // ProcessStatus
  uint64_t start_time;  // from /proc/<pid>/stat; tells a reused pid apart
  uint64_t pid_ns;      // inode of the pid namespace `pid` belongs to; 0 = unknown
  int32_t local_pid;    // getpid() of the process: its pid in its own namespace
  uint32_t flags;       // ProcessFlags
  char name[32];
  char cgroup[kCgroupPathBytes];  // full sysfs path of its cgroup v2 at registration; "" = none
  int64_t first_seen_ns, exit_ns;
  struct {
    int64_t busy_ns;
    uint64_t kernels;
    uint64_t memory_bytes;  // current: its contexts' reservations + allocations
    uint64_t peak_memory_bytes;
  } devices[kMaxDevices];
};

// ---- contexts ----

enum ContextStatus : uint32_t { kContextFree = 0, kContextActive = 1 };
enum ContextFlags : uint32_t {
  kContextPrimary = 1u << 0,
  kContextMpsClient = 1u << 1,      // created through an MPS server (see mps_* fields)
  kContextMpsServer = 1u << 2,      // an MPS server's own context on the device
  kContextMpsTerminated = 1u << 3,  // terminate_client: work dropped, memory freed, calls fail
};

struct QueuedOp {
  uint64_t seq;
  int64_t remaining_ns;  // kernels: > 0 while queued (invariant 2); markers: 0
  int32_t event_slot;    // -1 for a kernel; else the event this marker records
  uint32_t pad;
};

struct ContextRecord {
  uint32_t status;  // ContextStatus
  uint32_t flags;   // ContextFlags
  int32_t device;
  int32_t process_slot;
  uint64_t generation;  // bumped on every creation; handles carry it
  uint64_t reservation_bytes;
  uint64_t allocated_bytes;
  uint64_t managed_bytes;       // part of allocated_bytes that is managed (not cgroup-charged)
  uint32_t thread_percent;      // MPS active thread percentage (100 without MPS)
  int32_t mps_server_pid;       // MPS clients: their server's pid; else 0
  uint64_t pinned_limit_bytes;  // MPS clients: allocated_bytes cap; 0 = none
  uint32_t mps_priority;        // MPS clients: CUDA_MPS_CLIENT_PRIORITY (recorded only)
  int32_t report_slot;          // process slot NVML attributes its work to (server for MPS)
  int32_t lane;                 // DeviceState::lanes index: 0 the whole GPU, else a MIG device
  uint32_t pad_lane;
  int64_t busy_ns;
  uint64_t kernels;

  uint64_t next_seq;       // seq the next enqueued op gets (first is 1)
  uint64_t completed_seq;  // every op with seq <= this is complete
  uint32_t head, count;    // ring over `queue` (invariant 1)
  QueuedOp queue[kQueueCapacity];

  int64_t event_time_ns[kEventsPerContext];    // when the event's last marker completed
  uint64_t event_done_seq[kEventsPerContext];  // seq of that marker (0 = never)
  uint8_t event_used[kEventsPerContext];
};

// ---- the file ----

struct StateHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t pad;
  uint64_t size;               // sizeof(SimState)
  uint64_t config_hash;        // FNV-1a of the config text it was created from
  int64_t created_ns;          // monotonic
  int64_t realtime_offset_ns;  // realtime - monotonic at creation, for NVML timestamps
  int64_t last_reap_ns;        // when dead processes were last looked for
  int64_t reset_ns;            // when stats were last reset (or created_ns)
};

struct SimState {
  StateHeader header;  // immutable except last_reap_ns / reset_ns
  pthread_mutex_t mutex;
  SimParams params;  // immutable
  uint32_t device_count;
  uint32_t pad;
  DeviceState devices[kMaxDevices];
  ProcessRecord processes[kMaxProcesses];
  ContextRecord contexts[kMaxContexts];
};

static_assert(std::is_trivially_copyable_v<SimState>);
static_assert(std::is_standard_layout_v<SimState>);

}  // namespace gpuslice::sim
