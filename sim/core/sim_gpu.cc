#include "sim/core/sim_gpu.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.h"
#include "common/process.h"
#include "sim/core/memory_limits.h"
#include "sim/core/mig_state.h"
#include "sim/core/scheduler.h"

namespace gpuslice::sim {

namespace {
// Bumped in every forked child, so that the lock can tell a child from its
// parent without a getpid() system call per operation.
std::atomic<uint64_t> g_fork_generation{0};
void CountFork() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }
const bool kForkHandlerInstalled = pthread_atfork(nullptr, nullptr, &CountFork) == 0;
}  // namespace

namespace {

constexpr int64_t kReapIntervalNs = 100'000'000;  // look for dead processes at most this often
constexpr int64_t kMinSleepNs = 2'000;
constexpr int64_t kMaxSleepNs = 20'000'000;

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

}  // namespace

void InitializeState(SimState* s, const SimConfig& config, uint64_t config_hash, int64_t now_ns) {
  memset(s, 0, sizeof(StateHeader));
  s->header.magic = kStateMagic;
  s->header.version = kStateVersion;
  s->header.size = sizeof(SimState);
  s->header.config_hash = config_hash;
  s->header.created_ns = now_ns;
  s->header.realtime_offset_ns = RealtimeNs() - s->header.created_ns;
  s->header.reset_ns = s->header.created_ns;

  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&s->mutex, &attr);
  pthread_mutexattr_destroy(&attr);

  s->params = config.params;
  s->device_count = config.device_count;
  for (uint32_t i = 0; i < config.device_count; ++i) {
    DeviceState& d = s->devices[i];
    d.info = config.devices[i];
    d.power_limit_mw = d.info.power_default_mw;
    d.compute_mode = kComputeDefault;
    for (SchedLane& lane : d.lanes) lane.running_ctx = lane.last_ctx = -1;
    d.sched_ns = s->header.created_ns;
    d.window_start_ns = s->header.created_ns;
    d.mig_mode = d.mig_pending_mode = d.info.mig_enabled;
  }
}

namespace {

bool HeaderValid(const SimState* s, size_t file_size) {
  return file_size >= sizeof(SimState) && s->header.magic == kStateMagic &&
         s->header.version == kStateVersion && s->header.size == sizeof(SimState) &&
         s->device_count >= 1 && s->device_count <= kMaxDevices;
}

// Maps `fd` (already sized); nullptr on failure.
SimState* Map(int fd) {
  void* p = mmap(nullptr, sizeof(SimState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<SimState*>(p);
}

// Creates the state file atomically: build it under a private name, then link
// it into place (fails if another process won the race).
StatusOr<bool> CreateStateFile(const std::string& path, const SimConfig& config, uint64_t hash) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return Unavailable(Errno("cannot create simulator state " + tmp));
  fchmod(fd, 0666);  // every user of the node's simulation shares it
  Status status;
  if (ftruncate(fd, sizeof(SimState)) != 0) {
    status = Unavailable(Errno("cannot size simulator state " + tmp));
  } else if (SimState* s = Map(fd); s == nullptr) {
    status = Unavailable(Errno("cannot map simulator state " + tmp));
  } else {
    InitializeState(s, config, hash, MonotonicNs());
    munmap(s, sizeof(SimState));
  }
  close(fd);
  bool won = false;
  if (status.ok()) {
    if (link(tmp.c_str(), path.c_str()) == 0) {
      won = true;
    } else if (errno != EEXIST) {
      status = Unavailable(Errno("cannot publish simulator state " + path));
    }
  }
  unlink(tmp.c_str());
  if (!status.ok()) return status;
  return won;
}

// Pids of live processes registered in `s` other than `self` (for error
// messages); empty if none. A record this process cannot judge (another pid
// namespace) counts as live.
std::string LiveUsers(SimState* s, const ProcessIdentity& self, uint64_t view_ns) {
  std::string pids;
  for (const ProcessRecord& p : s->processes) {
    if (p.status != kProcessAlive || (p.pid == self.pid && p.pid_ns == self.pid_ns)) continue;
    if (view_ns != 0 && p.pid_ns == view_ns && !ProcessAlive(p.pid, p.start_time)) continue;
    pids += (pids.empty() ? "" : ", ") + std::to_string(p.pid);
  }
  return pids;
}

}  // namespace

uint32_t MpsSmCount(uint32_t sms, uint32_t thread_percent) {
  if (thread_percent >= 100) return sms;
  return std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{sms} * thread_percent / 100));
}

namespace {
constexpr std::string_view kTerminatedMessage = "MPS client terminated by its server";
}  // namespace

Status MpsClientTerminatedError() { return Unavailable(std::string(kTerminatedMessage)); }

bool IsMpsClientTerminated(const Status& status) {
  return status.code() == StatusCode::kUnavailable && status.message() == kTerminatedMessage;
}

std::string DefaultStatePath() {
  if (const char* p = getenv("GPUSLICE_SIM_STATE"); p != nullptr && *p != '\0') return p;
  return "/dev/shm/gpuslice-sim-" + std::to_string(getuid()) + ".state";
}

StatusOr<OpenOptions> OptionsFromEnv() {
  OpenOptions o;
  o.state_path = DefaultStatePath();
  if (const char* c = getenv("GPUSLICE_SIM_CONFIG"); c != nullptr) {
    auto text = LoadSimConfigText(c);
    if (!text.ok()) return text.status().WithContext("GPUSLICE_SIM_CONFIG");
    o.config_text = std::move(*text);
  }
  return o;
}

StatusOr<std::unique_ptr<SimGpu>> SimGpu::Open(const OpenOptions& options) {
  std::string path = options.state_path.empty() ? DefaultStatePath() : options.state_path;
  GS_ASSIGN_OR_RETURN(SimConfig config, ParseSimConfig(options.config_text));
  const uint64_t hash = HashConfigText(options.config_text);

  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) return Unavailable(Errno("cannot open simulator state " + path));
      GS_ASSIGN_OR_RETURN(bool created, CreateStateFile(path, config, hash));
      (void)created;  // either way, open what is there now
      continue;
    }
    struct stat st {};
    fstat(fd, &st);
    SimState* s = static_cast<size_t>(st.st_size) >= sizeof(SimState) ? Map(fd) : nullptr;
    close(fd);
    if (s == nullptr || !HeaderValid(s, static_cast<size_t>(st.st_size))) {
      // Not ours, from another version, or torn: never trust it; replace it.
      GS_LOG(kWarn, "sim", "replacing invalid simulator state %s", path.c_str());
      if (s != nullptr) munmap(s, sizeof(SimState));
      unlink(path.c_str());
      continue;
    }
    if (s->header.config_hash != hash && !options.observer) {
      const ProcessIdentity self = LearnProcessIdentity(NodeSocketPath(path));
      std::string users = LiveUsers(s, self, ProcViewNamespace(self));
      munmap(s, sizeof(SimState));
      if (!users.empty()) {
        // NOLINTBEGIN(performance-inefficient-string-concatenation): once, leaving the loop
        return FailedPrecondition("simulator state " + path +
                                  " was created from another config and is in use by pid " + users +
                                  "; stop them, or set GPUSLICE_SIM_STATE to another file");
        // NOLINTEND(performance-inefficient-string-concatenation)
      }
      unlink(path.c_str());
      continue;
    }
    std::unique_ptr<SimGpu> gpu(new SimGpu(path, s, sizeof(SimState), options.observer));
    gpu->AdoptIdentity(LearnProcessIdentity(gpu->node_socket_));
    if (!options.observer) {
      Locked lock(*gpu);
      if (gpu->RegisterProcessLocked() < 0) {
        return ResourceExhausted("simulator state " + path + " has no free process slot");
      }
    }
    // Waits sleep until a computed instant; default timer slack (50 us) would
    // blur every such wake-up.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    return gpu;
  }
  return Unavailable("simulator state " + path + " keeps changing under us; giving up");
}

SimGpu::SimGpu(std::string path, SimState* state, size_t mapped_size, bool observer)
    : path_(std::move(path)),
      state_(state),
      mapped_size_(mapped_size),
      pid_(getpid()),
      node_socket_(NodeSocketPath(path_)),
      observer_(observer) {}

void SimGpu::AdoptIdentity(const ProcessIdentity& self) {
  self_ = self;
  view_ns_ = ProcViewNamespace(self_);
}

bool SimGpu::IsSelf(const ProcessRecord& p) const {
  return p.pid == self_.pid && p.pid_ns == self_.pid_ns;
}

bool SimGpu::KnownDead(const ProcessRecord& p) const {
  if (view_ns_ == 0 || p.pid_ns != view_ns_ || IsSelf(p)) return false;
  return !ProcessAlive(p.pid, p.start_time);
}

SimGpu::~SimGpu() { munmap(state_, mapped_size_); }

SimGpu::Locked::Locked(SimGpu& gpu) : gpu_(gpu) {
  const uint64_t generation = g_fork_generation.load(std::memory_order_relaxed);
  const bool forked =
      generation != gpu.fork_generation_.load(std::memory_order_relaxed) && getpid() != gpu.pid_;
  // A forked child is a new process of the simulation: it learns its own
  // identity (talking to the node helper) before taking the lock.
  ProcessIdentity child;
  if (forked) child = LearnProcessIdentity(gpu.node_socket_);
  int r = pthread_mutex_lock(&gpu.state_->mutex);
  if (r == EOWNERDEAD) {
    // Its holder died mid-operation. The state stays usable: operations keep
    // the invariants at every step that can be interrupted by a kill.
    pthread_mutex_consistent(&gpu.state_->mutex);
    gpu.state_->header.last_reap_ns = 0;  // find the dead process soon
  }
  if (forked) {
    gpu.pid_ = getpid();
    gpu.AdoptIdentity(child);
    gpu.process_slot_ = -1;
    if (!gpu.observer_) gpu.RegisterProcessLocked();
  }
  gpu.fork_generation_.store(generation, std::memory_order_relaxed);
}

SimGpu::Locked::~Locked() { pthread_mutex_unlock(&gpu_.state_->mutex); }

int SimGpu::device_count() const { return static_cast<int>(state_->device_count); }
const DeviceInfo& SimGpu::device(int index) const { return state_->devices[index].info; }
const SimParams& SimGpu::params() const { return state_->params; }

int SimGpu::RegisterProcessLocked() {
  const uint64_t start = self_.start_time;
  int free_slot = -1, oldest_exited = -1;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessRecord& p = state_->processes[i];
    if (p.status == kProcessAlive && IsSelf(p) && p.start_time == start) {
      return process_slot_ = i;
    }
    if (p.status == kProcessFree && free_slot < 0) free_slot = i;
    if (p.status == kProcessExited &&
        (oldest_exited < 0 || p.exit_ns < state_->processes[oldest_exited].exit_ns)) {
      oldest_exited = i;
    }
  }
  int slot = free_slot >= 0 ? free_slot : oldest_exited;
  if (slot < 0) return -1;
  ProcessRecord& p = state_->processes[slot];
  memset(&p, 0, sizeof p);
  p.pid = self_.pid;
  p.status = kProcessAlive;
  p.start_time = start;
  p.pid_ns = self_.pid_ns;
  p.local_pid = self_.local_pid;
  p.flags = self_.host_known ? uint32_t{kProcessHostPid} : 0u;
  p.first_seen_ns = MonotonicNs();
  OwnProcessName(p.name, sizeof p.name);
  const std::string cgroup = OwnCgroupPath();
  if (cgroup.size() < sizeof p.cgroup) memcpy(p.cgroup, cgroup.data(), cgroup.size());
  return process_slot_ = slot;
}

void SimGpu::AdvanceAllLocked(int64_t now) {
  ReapDeadProcessesLocked(now, false);
  for (uint32_t d = 0; d < state_->device_count; ++d) {
    AdvanceDevice(*state_, static_cast<int>(d), now);
  }
}

namespace {
// Destroys context `i`: drops its work and returns its memory. REQUIRES: lock.
void DestroyContextLocked(SimState& s, int i, int64_t now) {
  ContextRecord& c = s.contexts[i];
  AdvanceDevice(s, c.device, now);
  DropQueuedWork(s, i, now);
  const uint64_t bytes = c.reservation_bytes + c.allocated_bytes;
  s.devices[c.device].used_bytes -= bytes;
  if (c.process_slot >= 0) s.processes[c.process_slot].devices[c.device].memory_bytes -= bytes;
  c.status = kContextFree;
}
}  // namespace

void SimGpu::ReapDeadProcessesLocked(int64_t now, bool force) {
  if (!force && now - state_->header.last_reap_ns < kReapIntervalNs) return;
  state_->header.last_reap_ns = now;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessRecord& p = state_->processes[i];
    if (p.status != kProcessAlive || !KnownDead(p)) continue;
    // As the driver does when a process dies: its contexts and memory go.
    for (int c = 0; c < kMaxContexts; ++c) {
      if (state_->contexts[c].status == kContextActive && state_->contexts[c].process_slot == i) {
        DestroyContextLocked(*state_, c, now);
      }
    }
    p.status = kProcessExited;
    p.exit_ns = now;
  }
}

ContextRecord* SimGpu::LookupLiveLocked(ContextId ctx, Status* status) {
  ContextRecord* c = LookupLocked(ctx);
  if (c == nullptr) {
    *status = InvalidArgument("invalid or destroyed context");
  } else if ((c->flags & kContextMpsTerminated) != 0) {
    *status = MpsClientTerminatedError();
    return nullptr;
  }
  return c;
}

ContextRecord* SimGpu::LookupLocked(ContextId ctx) {
  if (ctx.index < 0 || ctx.index >= kMaxContexts) return nullptr;
  ContextRecord& c = state_->contexts[ctx.index];
  if (c.status != kContextActive || c.generation != ctx.generation ||
      c.process_slot != process_slot_) {
    return nullptr;
  }
  return &c;
}

StatusOr<ContextId> SimGpu::CreateContext(int device, uint32_t flags, const MpsAttachment* mps,
                                          int lane) {
  if (observer_) return FailedPrecondition("an observer of the simulation cannot create contexts");
  if (process_slot_ < 0) return ResourceExhausted("this process has no slot in the simulation");
  if (device < 0 || device >= device_count()) {
    return InvalidArgument("no simulated device " + std::to_string(device));
  }
  if (mps != nullptr) {
    flags |= kContextMpsClient;
    if (mps->server_pid <= 0 || mps->thread_percent < 1 || mps->thread_percent > 100) {
      return InvalidArgument("bad MPS attachment");
    }
  }
  Locked lock(*this);
  const int64_t now = NowNs();
  ReapDeadProcessesLocked(now, false);
  DeviceState& d = state_->devices[device];

  // Whether context `c` of another process may share an exclusive device with
  // the new one: only an MPS server and its clients share.
  auto compatible = [&](const ContextRecord& c) {
    if (mps == nullptr) return false;
    const int32_t owner = state_->processes[c.process_slot].pid;
    if ((c.flags & kContextMpsServer) != 0) return owner == mps->server_pid;
    return (c.flags & kContextMpsClient) != 0 && c.mps_server_pid == mps->server_pid;
  };
  auto other_user = [&]() -> int {
    for (const ContextRecord& c : state_->contexts) {
      if (c.status == kContextActive && c.device == device && c.process_slot != process_slot_ &&
          !compatible(c)) {
        return state_->processes[c.process_slot].pid;
      }
    }
    return 0;
  };
  if (d.compute_mode == kComputeProhibited) {
    return FailedPrecondition("GPU " + std::to_string(device) + " is in PROHIBITED compute mode");
  }
  if (d.compute_mode == kComputeExclusiveProcess || d.compute_mode == kComputeExclusiveThread) {
    int pid = other_user();
    if (pid != 0) {
      ReapDeadProcessesLocked(now, true);
      pid = other_user();
    }
    if (pid != 0) {
      return FailedPrecondition("GPU " + std::to_string(device) +
                                " is in EXCLUSIVE_PROCESS compute mode and in use by pid " +
                                std::to_string(pid));
    }
  }
  int32_t server_slot = -1;
  if (mps != nullptr) {
    int clients = 0;
    for (const ContextRecord& c : state_->contexts) {
      if (c.status == kContextActive && c.device == device && (c.flags & kContextMpsClient) != 0 &&
          (c.flags & kContextMpsTerminated) == 0) {
        ++clients;
      }
    }
    if (clients >= kMaxMpsClientsPerDevice) {
      return ResourceExhausted("GPU " + std::to_string(device) + " already has " +
                               std::to_string(kMaxMpsClientsPerDevice) + " MPS clients");
    }
    for (int i = 0; i < kMaxProcesses && server_slot < 0; ++i) {
      const ProcessRecord& p = state_->processes[i];
      if (p.status == kProcessAlive && p.pid == mps->server_pid) server_slot = i;
    }
  }
  // MIG: a context is on one MIG device, within its GPU instance's memory.
  const MigLaneRecords mig = LaneRecords(d, lane);
  if (lane != 0 && mig.ci == nullptr) {
    return FailedPrecondition("MIG device " + std::to_string(lane) + " of GPU " +
                              std::to_string(device) + " no longer exists");
  }
  if (lane == 0 && d.mig_mode == kMigEnabled) {
    return FailedPrecondition("GPU " + std::to_string(device) +
                              " is in MIG mode: contexts run on its MIG devices");
  }
  const uint64_t reserve = state_->params.context_bytes;
  if (mig.gi != nullptr && MigDeviceMemory(*state_, device, *mig.gi).free_bytes < reserve) {
    return ResourceExhausted("not enough free memory on MIG device " + std::string(mig.ci->uuid) +
                             " for a context");
  }
  if (d.used_bytes + reserve > d.info.total_bytes) {
    ReapDeadProcessesLocked(now, true);
    if (d.used_bytes + reserve > d.info.total_bytes) {
      return ResourceExhausted("not enough free memory on GPU " + std::to_string(device) +
                               " for a context");
    }
  }
  // A cgroup's limit counts only live processes: the driver frees an exited
  // process's memory, so the dead are reaped before a refusal.
  if (Status s =
          CheckCgroupCharge(*state_, device, state_->processes[process_slot_].cgroup, reserve);
      !s.ok()) {
    ReapDeadProcessesLocked(now, true);
    GS_RETURN_IF_ERROR(
        CheckCgroupCharge(*state_, device, state_->processes[process_slot_].cgroup, reserve));
  }
  int slot = -1;
  for (int i = 0; i < kMaxContexts && slot < 0; ++i) {
    if (state_->contexts[i].status == kContextFree) slot = i;
  }
  if (slot < 0) return ResourceExhausted("all simulated contexts are in use");

  AdvanceDevice(*state_, device, now);
  ContextRecord& c = state_->contexts[slot];
  const uint64_t generation = c.generation + 1;
  memset(&c, 0, offsetof(ContextRecord, queue));
  memset(c.event_used, 0, sizeof c.event_used);
  memset(c.event_done_seq, 0, sizeof c.event_done_seq);
  c.status = kContextActive;
  c.flags = flags;
  c.device = device;
  c.process_slot = process_slot_;
  c.report_slot = process_slot_;
  c.lane = lane;
  c.generation = generation;
  c.reservation_bytes = reserve;
  c.thread_percent = 100;
  if (mps != nullptr) {
    c.thread_percent = mps->thread_percent;
    c.mps_server_pid = mps->server_pid;
    c.pinned_limit_bytes = mps->pinned_limit_bytes;
    c.mps_priority = mps->priority;
    if (server_slot >= 0) c.report_slot = server_slot;
  }
  c.next_seq = 1;
  d.used_bytes += reserve;
  auto& pm = state_->processes[process_slot_].devices[device];
  pm.memory_bytes += reserve;
  pm.peak_memory_bytes = std::max(pm.peak_memory_bytes, pm.memory_bytes);
  return ContextId{slot, generation};
}

Status SimGpu::DestroyContext(ContextId ctx) {
  Locked lock(*this);
  if (LookupLocked(ctx) == nullptr) return InvalidArgument("invalid or destroyed context");
  DestroyContextLocked(*state_, ctx.index, NowNs());
  return Status::Ok();
}

uint64_t SimGpu::RoundToGranularity(uint64_t bytes) const {
  const uint64_t g = state_->params.granularity;
  return (bytes + g - 1) & ~(g - 1);
}

Status SimGpu::Allocate(ContextId ctx, uint64_t bytes, bool managed) {
  const uint64_t rounded = RoundToGranularity(bytes);
  Locked lock(*this);
  Status why;
  ContextRecord* c = LookupLiveLocked(ctx, &why);
  if (c == nullptr) return why;
  if (c->pinned_limit_bytes > 0 && c->allocated_bytes + rounded > c->pinned_limit_bytes) {
    return ResourceExhausted("MPS pinned device memory limit of " +
                             std::to_string(c->pinned_limit_bytes) + " bytes reached on GPU " +
                             std::to_string(c->device));
  }
  DeviceState& d = state_->devices[c->device];
  if (const MigLaneRecords mig = LaneRecords(d, c->lane); mig.gi != nullptr) {
    const uint64_t free = MigDeviceMemory(*state_, c->device, *mig.gi).free_bytes;
    if (rounded > free) {
      return ResourceExhausted("out of memory on MIG device " + std::string(mig.ci->uuid) + ": " +
                               std::to_string(rounded) + " bytes requested, " +
                               std::to_string(free) + " free");
    }
  }
  if (rounded > d.info.total_bytes - d.used_bytes) {
    ReapDeadProcessesLocked(NowNs(), true);
    // Soft-limit eviction (opt-in): a process within its soft limit takes
    // memory back from borrowers (memory_limits.h).
    const char* cgroup = state_->processes[process_slot_].cgroup;
    while (state_->params.soft_limit_eviction != 0 && !managed &&
           rounded > d.info.total_bytes - d.used_bytes &&
           WithinSoftGuarantee(*state_, c->device, cgroup, rounded)) {
      const int victim = PickEvictionVictim(*state_, c->device, process_slot_);
      if (victim < 0) break;
      TerminateContextLocked(victim, NowNs());
    }
    if (rounded > d.info.total_bytes - d.used_bytes) {
      return ResourceExhausted("out of memory on GPU " + std::to_string(c->device) + ": " +
                               std::to_string(rounded) + " bytes requested, " +
                               std::to_string(d.info.total_bytes - d.used_bytes) + " free");
    }
  }
  if (!managed) {
    if (!CheckCgroupCharge(*state_, c->device, state_->processes[process_slot_].cgroup, rounded)
             .ok()) {
      ReapDeadProcessesLocked(NowNs(), true);
    }
    GS_RETURN_IF_ERROR(
        CheckCgroupCharge(*state_, c->device, state_->processes[process_slot_].cgroup, rounded));
  }
  d.used_bytes += rounded;
  c->allocated_bytes += rounded;
  if (managed) c->managed_bytes += rounded;
  auto& pm = state_->processes[process_slot_].devices[c->device];
  pm.memory_bytes += rounded;
  pm.peak_memory_bytes = std::max(pm.peak_memory_bytes, pm.memory_bytes);
  return Status::Ok();
}

void SimGpu::Free(ContextId ctx, uint64_t bytes, bool managed) {
  uint64_t rounded = RoundToGranularity(bytes);
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  if (c == nullptr) return;
  rounded = std::min(rounded, c->allocated_bytes);
  c->allocated_bytes -= rounded;
  if (managed) c->managed_bytes -= std::min(rounded, c->managed_bytes);
  state_->devices[c->device].used_bytes -= rounded;
  state_->processes[process_slot_].devices[c->device].memory_bytes -= rounded;
}

void SimGpu::MemoryInfo(int device, uint64_t* free_bytes, uint64_t* total_bytes, int lane) {
  Locked lock(*this);
  ReapDeadProcessesLocked(NowNs(), false);
  DeviceState& d = state_->devices[device];
  if (const MigLaneRecords mig = LaneRecords(d, lane); mig.gi != nullptr) {
    const MigMemory m = MigDeviceMemory(*state_, device, *mig.gi);
    *total_bytes = m.total_bytes;
    *free_bytes = m.free_bytes;
    return;
  }
  const MemoryView v = ViewFromCgroup(
      *state_, device, process_slot_ >= 0 ? state_->processes[process_slot_].cgroup : "");
  *total_bytes = v.total_bytes;
  *free_bytes = v.free_bytes;
}

int64_t SimGpu::KernelDurationNs(int device, std::string_view function_name, uint64_t blocks,
                                 uint32_t threads_per_block, uint64_t spin_ns,
                                 uint32_t thread_percent, uint32_t sm_count) const {
  if (function_name == "gpuslice_sim_spin") {
    return std::max<int64_t>(1, static_cast<int64_t>(spin_ns));
  }
  const SimParams& p = state_->params;
  const DeviceState& d = state_->devices[device];
  int64_t wave_ns = p.wave_ns;
  for (uint32_t i = 0; i < p.function_count; ++i) {
    if (function_name == p.functions[i].name) wave_ns = p.functions[i].wave_ns;
  }
  const uint32_t tpb = std::max<uint32_t>(1, threads_per_block);
  const uint64_t per_sm =
      std::clamp<uint64_t>(d.info.max_threads_per_sm / tpb, 1, d.info.max_blocks_per_sm);
  const uint64_t per_wave =
      per_sm * (sm_count > 0 ? sm_count : MpsSmCount(d.info.sm_count, thread_percent));
  const uint64_t waves = std::max<uint64_t>(1, (blocks + per_wave - 1) / per_wave);
  // Locked clocks slow kernels down in proportion (read racily: a setting).
  const uint32_t locked = __atomic_load_n(&d.locked_sm_max_mhz, __ATOMIC_RELAXED);
  const double factor = locked > 0 && locked < d.info.max_sm_clock_mhz
                            ? static_cast<double>(d.info.max_sm_clock_mhz) / locked
                            : 1.0;
  return p.launch_ns + static_cast<int64_t>(static_cast<double>(waves * wave_ns) * factor);
}

Status SimGpu::WaitUntil(ContextId ctx, WaitFor what, uint64_t seq) {
  for (;;) {
    int64_t sleep_ns;
    int64_t now = NowNs();
    {
      Locked lock(*this);
      Status why;
      ContextRecord* c = LookupLiveLocked(ctx, &why);
      if (c == nullptr) return why;
      ReapDeadProcessesLocked(now, false);
      AdvanceDevice(*state_, c->device, now);
      uint64_t target = seq;
      if (what != WaitFor::kCompletion) {
        const uint32_t limit =
            what == WaitFor::kLaunchSlot ? state_->params.max_pending : kQueueCapacity;
        if (c->count < limit) return Status::Ok();
        target = c->queue[c->head].seq;
      } else if (c->completed_seq >= seq) {
        return Status::Ok();
      }
      sleep_ns = CompletionLowerBoundNs(*state_, ctx.index, target);
    }
    sleep_ns = std::clamp(sleep_ns, kMinSleepNs, kMaxSleepNs);
    const int64_t wake = now + sleep_ns;
    timespec ts{static_cast<time_t>(wake / 1'000'000'000), static_cast<long>(wake % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
}

StatusOr<uint64_t> SimGpu::EnqueueKernel(ContextId ctx, int64_t duration_ns) {
  for (;;) {
    {
      Locked lock(*this);
      Status why;
      ContextRecord* c = LookupLiveLocked(ctx, &why);
      if (c == nullptr) return why;
      const int64_t now = NowNs();
      ReapDeadProcessesLocked(now, false);
      AdvanceDevice(*state_, c->device, now);
      if (c->count < state_->params.max_pending) {
        return EnqueueOp(*state_, ctx.index, std::max<int64_t>(1, duration_ns), -1, now);
      }
    }
    GS_RETURN_IF_ERROR(WaitUntil(ctx, WaitFor::kLaunchSlot, 0));
  }
}

StatusOr<uint64_t> SimGpu::EnqueueEventRecord(ContextId ctx, int event_slot) {
  if (event_slot < 0 || event_slot >= kEventsPerContext) return InvalidArgument("bad event slot");
  for (;;) {
    {
      Locked lock(*this);
      Status why;
      ContextRecord* c = LookupLiveLocked(ctx, &why);
      if (c == nullptr) return why;
      const int64_t now = NowNs();
      AdvanceDevice(*state_, c->device, now);
      if (c->count < kQueueCapacity) return EnqueueOp(*state_, ctx.index, 0, event_slot, now);
    }
    GS_RETURN_IF_ERROR(WaitUntil(ctx, WaitFor::kQueueSlot, 0));
  }
}

bool SimGpu::IsComplete(ContextId ctx, uint64_t seq) {
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  if (c == nullptr) return true;
  AdvanceDevice(*state_, c->device, NowNs());
  return c->completed_seq >= seq;
}

Status SimGpu::Wait(ContextId ctx, uint64_t seq) {
  return WaitUntil(ctx, WaitFor::kCompletion, seq);
}

uint64_t SimGpu::LastSeq(ContextId ctx) {
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  return c == nullptr ? 0 : c->next_seq - 1;
}

StatusOr<int> SimGpu::AllocateEventSlot(ContextId ctx) {
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  if (c == nullptr) return InvalidArgument("invalid or destroyed context");
  for (int i = 0; i < kEventsPerContext; ++i) {
    if (!c->event_used[i]) {
      c->event_used[i] = 1;
      c->event_done_seq[i] = 0;
      return i;
    }
  }
  return ResourceExhausted("a simulated context holds at most " +
                           std::to_string(kEventsPerContext) + " events");
}

void SimGpu::FreeEventSlot(ContextId ctx, int slot) {
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  if (c != nullptr && slot >= 0 && slot < kEventsPerContext) c->event_used[slot] = 0;
}

bool SimGpu::EventTime(ContextId ctx, int slot, uint64_t seq, int64_t* time_ns) {
  Locked lock(*this);
  ContextRecord* c = LookupLocked(ctx);
  if (c == nullptr || slot < 0 || slot >= kEventsPerContext) return false;
  AdvanceDevice(*state_, c->device, NowNs());
  if (c->completed_seq < seq || c->event_done_seq[slot] < seq) return false;
  *time_ns = c->event_time_ns[slot];
  return true;
}

void SimGpu::SetMpsServer(int device, bool serving) {
  if (device < 0 || device >= device_count()) return;
  Locked lock(*this);
  uint32_t& server = state_->devices[device].mps_server_pid;
  if (serving) {
    server = static_cast<uint32_t>(self_.pid);
  } else if (server == static_cast<uint32_t>(self_.pid)) {
    server = 0;
  }
}

int SimGpu::TerminateMpsClient(int32_t server_pid, int32_t client_pid) {
  Locked lock(*this);
  const int64_t now = NowNs();
  int hit = 0;
  for (int i = 0; i < kMaxContexts; ++i) {
    ContextRecord& c = state_->contexts[i];
    if (c.status != kContextActive || (c.flags & kContextMpsClient) == 0 ||
        (c.flags & kContextMpsTerminated) != 0 || c.mps_server_pid != server_pid ||
        state_->processes[c.process_slot].pid != client_pid) {
      continue;
    }
    TerminateContextLocked(i, now);
    ++hit;
  }
  return hit;
}

void SimGpu::TerminateContextLocked(int i, int64_t now) {
  ContextRecord& c = state_->contexts[i];
  AdvanceDevice(*state_, c.device, now);
  DropQueuedWork(*state_, i, now);
  const uint64_t bytes = c.reservation_bytes + c.allocated_bytes;
  state_->devices[c.device].used_bytes -= bytes;
  state_->processes[c.process_slot].devices[c.device].memory_bytes -= bytes;
  c.reservation_bytes = 0;
  c.allocated_bytes = 0;
  c.managed_bytes = 0;
  c.flags |= kContextMpsTerminated;
}

void SimGpu::ResetStats() {
  Locked lock(*this);
  const int64_t now = NowNs();
  ReapDeadProcessesLocked(now, /*force=*/true);
  AdvanceAllLocked(now);
  for (ProcessRecord& p : state_->processes) {
    if (p.status == kProcessExited) {
      memset(&p, 0, sizeof p);
      continue;
    }
    for (auto& d : p.devices) {
      d.busy_ns = 0;
      d.kernels = 0;
      d.peak_memory_bytes = d.memory_bytes;
    }
  }
  for (ContextRecord& c : state_->contexts) {
    c.busy_ns = 0;
    c.kernels = 0;
  }
  for (uint32_t i = 0; i < state_->device_count; ++i) {
    DeviceState& d = state_->devices[i];
    d.busy_ns = 0;
    d.kernels = 0;
    d.switches = 0;
    d.window_start_ns = now;
    d.window_busy_ns = 0;
    d.window_process_count = 0;
    d.windows_closed = 0;
  }
  state_->header.reset_ns = now;
}

}  // namespace gpuslice::sim
