#include "limiter/process_state.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>
#include <utility>

#include "common/clock.h"
#include "common/hot.h"
#include "common/log.h"
#include "control/group_keeper.h"
#include "gpuslice/paths.h"
#include "limiter/attachment.h"
#include "limiter/compute_gate.h"
#include "limiter/core/context_footprint.h"
#include "limiter/driver_usage.h"
#include "limiter/keeper_thread.h"
#include "limiter/real/real_driver.h"
#include "limiter/registration_thread.h"

namespace gpuslice::limiter {
namespace {

// One line on stderr, whatever the log level: an operator must see why CUDA
// is refused.
void ReportConfigError(const std::string& message) {
  std::string line = "gpuslice: configuration error: " + message +
                     " (CUDA is disabled in this process: cuInit returns "
                     "CUDA_ERROR_NOT_INITIALIZED)\n";
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  GS_LOG(kError, "limiter", "%s", message.c_str());
}

std::string ReadFile(const char* path) {
  std::string out;
  FILE* f = fopen(path, "re");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

// This process's pid as the outermost pid namespace its /proc shows it
// (the first NSpid entry): the host pid unless /proc is a container's own.
int32_t OutermostPid() {
  const std::string status = ReadFile("/proc/self/status");
  const size_t at = status.find("\nNSpid:");
  if (at != std::string::npos) {
    const auto pid = static_cast<int32_t>(strtol(status.c_str() + at + 7, nullptr, 10));
    if (pid > 0) return pid;
  }
  return static_cast<int32_t>(getpid());
}

// The driver's answers about a device's graph memory pool.
class RealGraphMemDriver final : public GraphMemDriver {
 public:
  // REQUIRES: `state` outlives this.
  explicit RealGraphMemDriver(const ProcessState& state) : state_(state) {}
  std::optional<PoolUsage> Usage(int ordinal) override {
    const auto get = state_.cuda().cuDeviceGetGraphMemAttribute;
    if (get == nullptr || ordinal < 0) return std::nullopt;
    cuuint64_t reserved = 0, used = 0;
    if (get(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
        get(ordinal, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
      return std::nullopt;
    }
    return PoolUsage{reserved, used};
  }

 private:
  const ProcessState& state_;
};

// The driver's answers about a pool.
class RealPoolDriver final : public PoolDriver {
 public:
  // REQUIRES: `state` outlives this.
  explicit RealPoolDriver(const ProcessState& state) : state_(state) {}
  std::optional<PoolUsage> Usage(uint64_t pool) override {
    const auto get = state_.cuda().cuMemPoolGetAttribute;
    if (get == nullptr) return std::nullopt;
    auto* handle = reinterpret_cast<CUmemoryPool>(pool);  // NOLINT(performance-no-int-to-ptr)
    cuuint64_t reserved = 0, used = 0;
    if (get(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
        get(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
      return std::nullopt;
    }
    return PoolUsage{reserved, used};
  }
  void TrimTo(uint64_t pool, uint64_t keep) override {
    const auto trim = state_.cuda().cuMemPoolTrimTo;
    if (trim != nullptr) trim(reinterpret_cast<CUmemoryPool>(pool), keep);  // NOLINT
  }

 private:
  const ProcessState& state_;
};

// The driver's count of this process on a device of its group (NVML).
class RealContextDriver final : public ContextDriver {
 public:
  // REQUIRES: `segment` (the process's) outlives this.
  explicit RealContextDriver(const std::unique_ptr<GroupSegment>& segment) : segment_(segment) {}
  std::optional<uint64_t> ProcessBytes(int device) override {
    if (segment_ == nullptr || device < 0) return std::nullopt;
    return DriverProcessBytes(segment_->DeviceUuid(device), static_cast<uint32_t>(getpid()));
  }

 private:
  const std::unique_ptr<GroupSegment>& segment_;
};

// The pools' refresh thread: every 200 ms, while any pool is charged, their
// charges settle on what the driver reserves (a synchronize releases pool
// memory without a call the limiter sees). Blocks every signal; detached.
void* WatchPoolsForever(void* arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  auto* pools = static_cast<PoolCharges*>(arg);
  for (;;) {
    timespec period{0, 200'000'000};
    while (nanosleep(&period, &period) != 0) {
    }
    if (pools->any_charged()) pools->RefreshAll();
  }
  return nullptr;
}

}  // namespace

uint64_t ProcessState::FirstGeneration() {
  static constinit std::atomic<uint64_t> next{1};
  return next.fetch_add(uint64_t{1} << 32, std::memory_order_relaxed);
}

GS_HOT ProcessState& ProcessState::Get() {
  // Never destroyed: hooks may run during exit.
  static ProcessState* const limiter = [] {
    auto* state = new ProcessState(ProcessSources{});
    pthread_atfork(&AtForkPrepare, &AtForkParent, &AtForkChild);
    return state;
  }();
  return *limiter;
}

ProcessState::ProcessState(ProcessSources sources)
    : cuda_(sources.cuda),
      nvml_(sources.nvml),
      env_(std::move(sources.env)),
      pool_driver_(std::make_unique<RealPoolDriver>(*this)),
      pools_(ledger_, *pool_driver_, granularity_),
      graph_memory_driver_(std::make_unique<RealGraphMemDriver>(*this)),
      graph_memory_(ledger_, *graph_memory_driver_),
      context_driver_(std::make_unique<RealContextDriver>(segment_)) {
  InitLogging(LogLevel::kOff);
}

void ProcessState::AtForkPrepare() {
  ProcessState& l = Get();
  l.attach_mu_.lock();
  l.ledger_.LockForFork();
  l.pools_.LockForFork();
  l.graph_memory_.LockForFork();
  l.contexts_.LockForFork();
  l.compute_gate_.LockForFork();
}

void ProcessState::AtForkParent() {
  ProcessState& l = Get();
  l.compute_gate_.UnlockForFork();
  l.contexts_.UnlockForFork();
  l.graph_memory_.UnlockForFork();
  l.pools_.UnlockForFork();
  l.ledger_.UnlockForFork();
  l.attach_mu_.unlock();
}

void ProcessState::AtForkChild() {
  ProcessState& l = Get();
  l.forked_.store(true, std::memory_order_release);
  l.registration_started_.store(false);  // the parent's thread did not survive the fork
  l.compute_gate_.UnlockForFork();
  l.contexts_.UnlockForFork();
  l.graph_memory_.UnlockForFork();
  l.pools_.UnlockForFork();
  l.ledger_.UnlockForFork();
  l.attach_mu_.unlock();
}

CUresult ProcessState::EnsureAttachedSlow() {
  const int state = state_.load(std::memory_order_acquire);
  if (state == kFailedClosed) return CUDA_ERROR_NOT_INITIALIZED;
  if (state == kAttached && !forked_.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  const CUresult rc = AttachWithCuda();
  if (rc == CUDA_SUCCESS) StartRegistration();
  return rc;
}

void ProcessState::StartRegistration() {
  if (state_.load(std::memory_order_acquire) != kAttached || !registration_) return;
  if (registration_started_.exchange(true)) return;
  StartRegistrationThread(segment_.get(), *registration_, daemon_, registration_wait_);
}

CUresult ProcessState::AttachWithCuda() {
  MutexLock lock(attach_mu_);
  if (forked_.exchange(false)) {
    // The child of a fork: a new member of the group, with nothing allocated.
    ledger_.ResetInChild();
    pools_.ResetInChild();
    graph_memory_.ResetInChild();
    pools_watched_.store(false);  // the parent's refresh thread did not survive the fork
    ForgetContexts();             // the parent's contexts are not the child's
    captures_.Reset();            // nor its captures
    if (segment_ != nullptr) {
      if (segment_->ReopenAfterFork().ok()) {
        // The parent's keeper did not survive the fork.
        StartKeeperThread(segment_.get(), DaemonSocket());
      } else {
        compute_gate_.Disarm();
        ledger_.Bind(nullptr);
        (void)segment_.release();  // the mapping is the parent's too: never unmapped here
        state_.store(kDetached);
      }
    }
  }
  const int state = state_.load();
  if (state == kAttached) return CUDA_SUCCESS;
  if (state == kFailedClosed) return CUDA_ERROR_NOT_INITIALIZED;

  std::vector<DriverDevice> devices;
  if (CUresult rc = CudaDevices(cuda(), &devices); rc != CUDA_SUCCESS) return rc;
  return Attach(devices) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

bool ProcessState::EnsureAttachedForNvml() {
  if (state_.load(std::memory_order_acquire) == kAttached && !forked_.load()) return true;
  if (failed_closed()) return false;
  // A process with CUDA initialised attaches through CUDA (its ordinals).
  const bool has_cuda = cuda_ != nullptr || real::CudaHandle() != nullptr;
  if (has_cuda && EnsureAttached() == CUDA_SUCCESS) return true;
  MutexLock lock(attach_mu_);
  if (state_.load() != kDetached) return state_.load() == kAttached;
  std::vector<DriverDevice> devices;
  if (!NvmlDevices(nvml(), &devices)) return false;
  return Attach(devices);
}

bool ProcessState::Attach(const std::vector<DriverDevice>& devices) {
  const EnvLookup getenv_lookup = [](std::string_view name) {
    return getenv(std::string(name).c_str());
  };
  auto settings =
      ReadAttachSettings(env_ ? env_ : getenv_lookup, devices, ReadFile("/proc/self/cgroup"),
                         static_cast<int>(getpid()), OutermostPid());
  StatusOr<Attachment> attachment =
      settings.ok() ? AttachToGroup(*settings, devices) : StatusOr<Attachment>(settings.status());
  if (!attachment.ok()) {
    ReportConfigError(attachment.status().message());
    state_.store(kFailedClosed, std::memory_order_release);
    return false;
  }
  daemon_ = std::move(settings->daemon);
  registration_ = std::move(settings->registration);
  registration_wait_ = settings->registration_wait;
  segment_ = std::move(attachment->segment);
  const std::string daemon_socket = DaemonSocket();
  if (!daemon_socket.empty() && !segment_->control().DaemonClaims(MonotonicNs()) &&
      access(daemon_socket.c_str(), F_OK) == 0) {
    // Paced from the first launch while gpusliced is about to adopt the group
    // (the keeper thread keeps this when it takes the role meanwhile).
    control::GroupKeeper::GrantProvisionally(*segment_);
  }
  StartKeeperThread(segment_.get(), daemon_socket);
  ledger_.Bind(segment_.get());
  contexts_.Bind(segment_.get(), settings->context, context_driver_.get());
  compute_gate_.Arm(segment_.get(), attachment->ordinal_to_device, &ledger_, &captures_);
  ordinal_to_device_ = std::move(attachment->ordinal_to_device);
  ForgetContexts();  // the ordinals' group devices may have changed
  GS_LOG(kInfo, "limiter", "attached to group '%s' (%zu devices)", segment_->group().c_str(),
         devices.size());
  state_.store(kAttached, std::memory_order_release);
  return true;
}

// ---- devices ----

GS_HOT int ProcessState::GroupDevice(CUdevice ordinal) const {
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= ordinal_to_device_.size()) return -1;
  return ordinal_to_device_[ordinal];
}

CUdevice ProcessState::Ordinal(int device) const {
  if (device < 0) return -1;
  for (size_t ordinal = 0; ordinal < ordinal_to_device_.size(); ++ordinal) {
    if (ordinal_to_device_[ordinal] == device) return static_cast<CUdevice>(ordinal);
  }
  return -1;
}

int ProcessState::CurrentGroupDeviceSlow(uintptr_t* ctx) const {
  const uint64_t generation = contexts_generation_.load(std::memory_order_acquire);
  const real::CudaTable& cu = cuda();
  CUcontext current = nullptr;
  if (cu.cuCtxGetCurrent == nullptr || cu.cuCtxGetCurrent(&current) != CUDA_SUCCESS) return -1;
  const auto raw = reinterpret_cast<uintptr_t>(current);
  if (ctx != nullptr) *ctx = raw;
  CUdevice dev = -1;
  if (cu.cuCtxGetDevice == nullptr || cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  const int device = GroupDevice(dev);
  current_ = CurrentContext{generation, raw, device};
  return device;
}

int ProcessState::StreamGroupDevice(CUstream stream) const {
  const auto raw = reinterpret_cast<uintptr_t>(stream);
  if (raw == 0 || raw == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
      raw == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    return CurrentGroupDevice();
  }
  return GroupDevice(StreamOrdinal(stream));
}

CUdevice ProcessState::StreamOrdinal(CUstream stream) const {
  const real::CudaTable& cu = cuda();
  const auto raw = reinterpret_cast<uintptr_t>(stream);
  CUdevice dev = -1;
  if (raw == 0 || raw == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
      raw == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    if (cu.cuCtxGetDevice == nullptr || cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
    return dev;
  }
  // One call where the driver has it (r570+); else through the stream's
  // context, made current for the question.
  if (cu.cuStreamGetDevice != nullptr && cu.cuStreamGetDevice(stream, &dev) == CUDA_SUCCESS) {
    return dev;
  }
  if (cu.cuStreamGetCtx == nullptr || cu.cuCtxGetDevice == nullptr) return -1;
  CUcontext ctx = nullptr;
  if (cu.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  if (cu.cuCtxPushCurrent_v2 == nullptr || cu.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return -1;
  ForgetCurrentContext();  // switched behind the hooks' back
  if (cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = -1;
  CUcontext popped = nullptr;
  cu.cuCtxPopCurrent_v2(&popped);
  ForgetCurrentContext();
  return dev;
}

int ProcessState::PoolGroupDevice(CUmemoryPool pool, CUstream stream) {
  const auto raw = reinterpret_cast<uint64_t>(pool);
  if (std::optional<int> known = pools_.DeviceOf(raw)) return *known;
  // A device's default pool, handed to cuMemAllocFromPoolAsync by its handle.
  if (const auto get = cuda().cuDeviceGetDefaultMemPool; get != nullptr) {
    for (size_t ordinal = 0; ordinal < ordinal_to_device_.size(); ++ordinal) {
      CUmemoryPool p = nullptr;
      if (get(&p, static_cast<CUdevice>(ordinal)) == CUDA_SUCCESS && p == pool) {
        const int device = ordinal_to_device_[ordinal];
        pools_.Add(raw, device);
        return device;
      }
    }
  }
  return StreamGroupDevice(stream);
}

void ProcessState::WatchPools() {
  if (pools_watched_.load(std::memory_order_acquire) || pools_watched_.exchange(true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, size_t{64} * 1024);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, &WatchPoolsForever, &pools_);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    GS_LOG(kWarn, "limiter", "cannot start the pool refresh thread (error %d)", rc);
    return;
  }
  pthread_setname_np(thread, "gpuslice-pools");
}

void ProcessState::PoolMemoryFreed(uint64_t ptr) {
  if (!pools_.any_charged()) return;
  if (ptr != 0) {
    pools_.Freed(ptr);
  } else {
    pools_.RefreshAll();
  }
}

std::optional<Charge> ProcessState::ReserveAfterPoolRefresh(int device, uint64_t bytes) {
  if (!pools_.any_charged() || !pools_.RefreshAll()) return std::nullopt;
  return ledger_.ReserveDevice(device, bytes);
}

int ProcessState::GroupDeviceByUuid(const char* uuid) const {
  return segment_ != nullptr ? segment_->FindDevice(uuid) : -1;
}

uint64_t ProcessState::MemoryLimit(int device) const {
  return segment_ != nullptr && device >= 0 ? segment_->MemoryLimit(device) : kUnlimitedBytes;
}

uint64_t ProcessState::MemoryUsed(int device) const {
  return segment_ != nullptr && device >= 0 ? segment_->ledger().MemoryUsed(device) : 0;
}

std::string ProcessState::DaemonSocket() const {
  return registration_ && !daemon_.tcp() ? daemon_.unix_path : std::string();
}

bool ProcessState::IsGroupMember(uint32_t pid) const {
  if (pid == static_cast<uint32_t>(getpid())) return true;
  return segment_ != nullptr && pid <= INT32_MAX &&
         segment_->IsLiveMember(static_cast<int32_t>(pid));
}

}  // namespace gpuslice::limiter
