// ProcessState: the per-process state of libgpuslice.so (DESIGN.md sections 2, 3).
//
// It keeps the process attached to its group: the attachment (attachment.h:
// the devices the driver lists, the settings from the environment, the
// group's segment with the limits applied), the CUDA ordinal -> group device
// map and the group device of a context or stream; it owns the process's
// memory ledger (ledger.h: which allocation holds how many bytes of which
// device) with the contexts', pools' and graphs' charges on it, the compute
// gate, and starts registration and the keeper thread.
//
// Lifecycle: nothing happens before the first hook. Attach() runs once the
// driver is initialised (from cuInit, or lazily from the first hook that
// needs it): it makes the attachment from the driver's table and binds
// the ledger, the charges and the gate to it. A configuration error is
// terminal for the process: it is printed once and every CUDA entry point
// that could hand out resources fails with CUDA_ERROR_NOT_INITIALIZED (fail
// closed).
//
// Registration: once attached through CUDA, the process registers with
// gpusliced (when its socket exists and GPUSLICE_REGISTER is not 0) on a
// thread of its own (registration_thread.h); the host never waits for it.
//
// Device lookup of the current context (the allocation path): no driver
// call. Each thread caches its current context and that context's device;
// the entry is forgotten when the thread switches contexts through a hooked
// entry point (cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPopCurrent, context
// creation: ForgetCurrentContext) and, for every thread, when a context is
// destroyed or a primary context released (ForgetContexts), so a handle
// reused for a context on another device is asked about again.
//
// Sources: the process's own state (Get()) reads the real libraries, loaded
// on first use, and the process's environment; a test builds one on its own
// driver tables and environment (ProcessSources) and calls the hooks
// (hooks.h) with it. The compute gate and the count of a context's memory
// (NVML's) always use the real libraries.
//
// Thread-safe. Fork: the child of Get()'s state starts with an empty ledger
// and joins the group as itself on its first call (pthread_atfork), and
// registers itself.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "cuda_abi/cuda_driver_api.h"
#include "limiter/attachment.h"
#include "limiter/compute_gate.h"
#include "limiter/core/context_charges.h"
#include "limiter/core/limit_config.h"
#include "limiter/daemon_client.h"
#include "limiter/graph_memory_charges.h"
#include "limiter/ledger.h"
#include "limiter/pool_charges.h"
#include "limiter/real/real_driver.h"
#include "limiter/registration_thread.h"
#include "limiter/stream_captures.h"
#include "nvml_abi/nvml.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

// Where a ProcessState's drivers and settings come from.
struct ProcessSources {
  const real::CudaTable* cuda = nullptr;  // nullptr: the real driver (real::Cuda())
  const real::NvmlTable* nvml = nullptr;  // nullptr: the real NVML (real::Nvml())
  EnvLookup env;                          // empty: getenv
};

class alignas(4096) ProcessState {
 public:
  // The process's limiter, on the real libraries and the environment;
  // created on first use (and pthread_atfork's handlers registered), never
  // destroyed.
  static ProcessState& Get();

  // A limiter on `sources` (the tables must outlive it). It starts detached;
  // once attached it runs a keeper thread on its segment, so it must then
  // live as long as the process. Not forked with the process.
  explicit ProcessState(ProcessSources sources);
  ProcessState(const ProcessState&) = delete;
  ProcessState& operator=(const ProcessState&) = delete;

  // The driver table the hooks call (the real one unless a test gave its own).
  const real::CudaTable& cuda() const {
    if (cuda_ != nullptr) [[unlikely]] {
      return *cuda_;
    }
    return real::Cuda();
  }
  const real::NvmlTable& nvml() const { return nvml_ != nullptr ? *nvml_ : real::Nvml(); }

  // Attaches if not yet attached. Returns CUDA_SUCCESS once attached,
  // CUDA_ERROR_NOT_INITIALIZED after a configuration error, or the driver's
  // error when it cannot be asked about devices (e.g. before cuInit).
  CUresult EnsureAttached() {
    // Inline: the allocation path's first step, one load when attached.
    if (state_.load(std::memory_order_acquire) == kAttached &&
        !forked_.load(std::memory_order_relaxed)) [[likely]] {
      return CUDA_SUCCESS;
    }
    return EnsureAttachedSlow();
  }
  // Attaches from NVML alone (a process that never initialises CUDA, such as
  // nvidia-smi): devices enumerated through NVML. False if that fails.
  bool EnsureAttachedForNvml();
  // Starts registering with gpusliced, once per process (again in a forked
  // child), if attached and registration is enabled. Never blocks.
  void StartRegistration();
  // True after a configuration error (the process fails closed).
  bool failed_closed() const { return state_.load(std::memory_order_acquire) == kFailedClosed; }

  // ---- memory ----

  // Group device index of CUDA device `ordinal`, or -1.
  int GroupDevice(CUdevice ordinal) const;
  // Group device index of the current context's device, or -1; its context
  // in `ctx` when not null.
  int CurrentGroupDevice(uintptr_t* ctx = nullptr) const {
    // Inline: the cached answer, no call (the allocation path).
    if (current_.generation == contexts_generation_.load(std::memory_order_acquire)) [[likely]] {
      if (ctx != nullptr) *ctx = current_.ctx;
      return current_.device;
    }
    return CurrentGroupDeviceSlow(ctx);
  }
  // Group device index of the device `stream` belongs to (current context's
  // for the legacy/per-thread default streams), or -1.
  int StreamGroupDevice(CUstream stream) const;
  // CUDA device `stream` belongs to (the current context's for the legacy
  // and per-thread default streams), or -1.
  CUdevice StreamOrdinal(CUstream stream) const;
  // Group device index of the memory of `pool` (-1: not the group's, such as
  // a host pool): as recorded when it was created, a device's default pool,
  // else the device of `stream`.
  int PoolGroupDevice(CUmemoryPool pool, CUstream stream);
  // CUDA ordinal of group device `device`, or -1.
  CUdevice Ordinal(int device) const;
  // Group device index of the GPU with `uuid`, or -1.
  int GroupDeviceByUuid(const char* uuid) const;

  // Rounds an allocation up to the driver's allocation granularity.
  uint64_t Rounded(uint64_t bytes) const {
    const uint64_t g = granularity_;
    if (bytes > UINT64_MAX - g) return UINT64_MAX;
    if ((g & (g - 1)) == 0) return (bytes + g - 1) & ~(g - 1);  // no division on the hot path
    return (bytes + g - 1) / g * g;
  }
  // The process's memory ledger (valid for the process's life; charges
  // only once attached).
  Ledger& ledger() { return ledger_; }
  // The charges of its contexts' own memory (core/context_charges.h).
  ContextCharges& contexts() { return contexts_; }
  // The charges of its stream-ordered memory pools (pool_charges.h).
  PoolCharges& pools() { return pools_; }
  // The charges of its CUDA graphs' memory (graph_memory_charges.h).
  GraphMemCharges& graph_memory() { return graph_memory_; }
  // A pool now holds a charge: its reserve is refreshed every 200 ms from a
  // thread of the limiter's own (started once per process).
  void WatchPools();
  // Pool memory may have been given back (a free the ledger did not track,
  // of `ptr`; a destroyed context, ptr 0): refreshes the pools' charges if
  // any is charged (PoolCharges::Freed for a pointer).
  void PoolMemoryFreed(uint64_t ptr = 0);
  // Reserves `bytes` on `device` after refreshing the pools' charges (a
  // synchronize may have released pool memory); nullopt if there is still no
  // room. A Ledger::ReserveDevice charge (the group's count only). For a
  // refused reservation only (cold).
  std::optional<Charge> ReserveAfterPoolRefresh(int device, uint64_t bytes);
  // A context was destroyed or a primary context released: lookups of the
  // current context's device ask the driver again.
  void ForgetContexts() { contexts_generation_.fetch_add(1, std::memory_order_release); }
  // This thread's current context changed: its next lookup asks the driver.
  static void ForgetCurrentContext() { current_.generation = 0; }

  // The group's limit and usage on `device`.
  uint64_t MemoryLimit(int device) const;
  uint64_t MemoryUsed(int device) const;
  bool HasMemoryLimit(int device) const { return MemoryLimit(device) != kUnlimitedBytes; }

  // True if `pid` is a live member of this process's group.
  bool IsGroupMember(uint32_t pid) const;

  // The group segment (nullptr before attach).
  GroupSegment* segment() const { return segment_.get(); }

  // The process's compute gate (armed once attached).
  ComputeGate& compute_gate() { return compute_gate_; }

  // The process's open stream captures (stream_captures.h).
  StreamCaptures& captures() { return captures_; }

 private:
  enum State : int { kDetached = 0, kAttached, kFailedClosed };
  // The first context generation of a new state: 2^32 past the last one's.
  static uint64_t FirstGeneration();
  CUresult AttachWithCuda();
  // EnsureAttached and CurrentGroupDevice when the fast answer does not hold.
  CUresult EnsureAttachedSlow();
  int CurrentGroupDeviceSlow(uintptr_t* ctx) const;
  // Attaches to the group (attachment.h) and starts what keeps it.
  bool Attach(const std::vector<DriverDevice>& devices) REQUIRES(attach_mu_);
  // The daemon's socket when this process registers over one; empty
  // otherwise (a daemon reached over TCP cannot be looked for on disk).
  std::string DaemonSocket() const;
  // pthread_atfork's handlers take every lock in Prepare and give them back
  // in Parent or Child: a pairing across functions the analysis cannot follow.
  static void AtForkPrepare() NO_THREAD_SAFETY_ANALYSIS;
  static void AtForkParent() NO_THREAD_SAFETY_ANALYSIS;
  static void AtForkChild() NO_THREAD_SAFETY_ANALYSIS;

  // What the allocation and free paths read, first and together: one page
  // (the class is page-aligned) that a TLB flush in the driver between two
  // calls makes the path walk once, not once per scattered field.
  std::atomic<int> state_{kDetached};
  std::atomic<bool> forked_{false};
  uint64_t granularity_ = 2ull << 20;
  // Bumped by ForgetContexts (and attach): per-thread context -> device
  // entries of an older generation are stale. Each state's generations lie
  // in a range of their own (FirstGeneration), so a thread's entry for
  // another state never matches.
  std::atomic<uint64_t> contexts_generation_{FirstGeneration()};
  const real::CudaTable* const cuda_;  // nullptr: real::Cuda()
  Ledger ledger_;

  const real::NvmlTable* const nvml_;  // nullptr: real::Nvml()
  const EnvLookup env_;                // empty: getenv
  Mutex attach_mu_;                    // serialises Attach
  std::unique_ptr<GroupSegment> segment_;
  std::vector<int> ordinal_to_device_;  // CUDA ordinal -> group device
  // What to tell gpusliced (set by Attach before state_ becomes kAttached,
  // then read-only); nullopt: registration disabled.
  std::optional<RegistrationRequest> registration_;
  DaemonAddress daemon_;  // where registration_ goes
  std::atomic<bool> registration_started_{false};
  // How long the first registration's answer is waited for
  // (GPUSLICE_REGISTER_WAIT_MS; registration_thread.h).
  std::chrono::milliseconds registration_wait_ = kDefaultFirstAnswerWait;

  std::unique_ptr<PoolDriver> pool_driver_;  // the real driver's pool attributes
  PoolCharges pools_;
  std::unique_ptr<GraphMemDriver> graph_memory_driver_;  // the real driver's graph pools
  GraphMemCharges graph_memory_;
  std::atomic<bool> pools_watched_{false};         // the refresh thread was started
  std::unique_ptr<ContextDriver> context_driver_;  // NVML's count of this process
  ContextCharges contexts_{ledger_, granularity_};
  StreamCaptures captures_;
  ComputeGate compute_gate_;  // large (its stream cache): last
  // This thread's current context and its group device, valid while
  // `generation` equals contexts_generation_ (0: nothing cached).
  struct CurrentContext {
    uint64_t generation;
    uintptr_t ctx;
    int device;
  };
  static inline thread_local CurrentContext current_
      __attribute__((tls_model("initial-exec"))) = {0, 0, -1};
};

}  // namespace gpuslice::limiter
