// The simulated driver's per-process state (DESIGN.md section 7): handle
// tables for every object a program names (contexts, streams, events, modules,
// functions, graphs, pools, arrays, physical memory), the registry of device
// address ranges, the thread's context stack, and the SimGpu the work goes to.
// The extern "C" entry points (entry_*.cc) are thin layers over this.
//
// Handles are never pointers: a handle encodes a type tag, a slot index and
// the slot's generation, so a stale, foreign or garbage handle is detected by
// a bounds and generation check instead of being dereferenced. Looking a
// handle up is lock-free (the launch path uses it).
//
// Thread-safety: every table has its own mutex for adding and removing;
// lookups are lock-free. A program that destroys an object while another of
// its threads uses it gets what the real driver gives it (undefined results),
// never a crash of the lookup itself. The memory registry is behind a
// shared_mutex. The context stack is thread-local.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda_abi/cuda_driver_api.h"
#include "sim/core/pool_model.h"
#include "sim/core/sim_gpu.h"
#include "sim/core/visible_devices.h"

#define GS_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuslice::sim::driver {

// ---- handles ---------------------------------------------------------------------

enum class Tag : uint8_t {
  kContext = 0xc1,
  kStream,
  kEvent,
  kModule,
  kFunction,
  kGraph,
  kGraphExec,
  kPool,
  kArray,
  kMipmap,
  kPhysical,
  kGraphNode,
};

// Fixed-capacity table of T. Handle layout (64 bits): generation (32, odd
// while the slot is live) | slot index + 1 (24) | tag (8).
//
// Invariant: a slot's value is written only while its generation is even
// (free) and under mu_, and published by the release-store of an odd
// generation; Get() acquires it.
template <typename T, uint32_t N, Tag kTag>
class HandleTable {
 public:
  static_assert(N < (1u << 24));

  // Stores `value` in a free slot; returns its handle, or 0 when full.
  uint64_t Add(T&& value) {
    std::lock_guard lock(mu_);
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else if (next_ < N) {
      index = next_++;
    } else {
      return 0;
    }
    Slot& s = slots_[index];
    s.value = std::move(value);
    const uint32_t gen = s.generation.load(std::memory_order_relaxed) + 1;  // odd: live
    s.generation.store(gen, std::memory_order_release);
    return Encode(index, gen);
  }

  // The live object `handle` names, or nullptr (0, another type, stale, garbage).
  T* Get(uint64_t handle) {
    uint32_t index, gen;
    if (!Decode(handle, &index, &gen)) return nullptr;
    return slots_[index].generation.load(std::memory_order_acquire) == gen ? &slots_[index].value
                                                                           : nullptr;
  }

  // Removes the object; its value is moved to *out when out != nullptr.
  // False when `handle` names no live object.
  bool Remove(uint64_t handle, T* out = nullptr) {
    uint32_t index, gen;
    if (!Decode(handle, &index, &gen)) return false;
    std::lock_guard lock(mu_);
    Slot& s = slots_[index];
    if (s.generation.load(std::memory_order_relaxed) != gen) return false;
    s.generation.store(gen + 1, std::memory_order_release);  // even: free
    if (out != nullptr) *out = std::move(s.value);
    s.value = T{};
    free_.push_back(index);
    return true;
  }

  // Handles of the live objects for which pred(const T&) holds.
  template <typename Pred>
  std::vector<uint64_t> Find(Pred pred) {
    std::vector<uint64_t> out;
    std::lock_guard lock(mu_);
    for (uint32_t i = 0; i < next_; ++i) {
      const uint32_t gen = slots_[i].generation.load(std::memory_order_relaxed);
      if ((gen & 1) != 0 && pred(slots_[i].value)) out.push_back(Encode(i, gen));
    }
    return out;
  }

  static constexpr uint64_t Encode(uint32_t index, uint32_t gen) {
    return (uint64_t{gen} << 32) | (uint64_t{index + 1} << 8) | static_cast<uint8_t>(kTag);
  }

 private:
  static bool Decode(uint64_t handle, uint32_t* index, uint32_t* gen) {
    if ((handle & 0xff) != static_cast<uint8_t>(kTag)) return false;
    const auto i1 = static_cast<uint32_t>((handle >> 8) & 0xffffff);
    *gen = static_cast<uint32_t>(handle >> 32);
    if (i1 == 0 || i1 > N || (*gen & 1) == 0) return false;
    *index = i1 - 1;
    return true;
  }

  struct Slot {
    std::atomic<uint32_t> generation{0};
    T value{};
  };
  std::mutex mu_;
  uint32_t next_ = 0;           // GUARDED_BY(mu_): slots [0, next_) have been used
  std::vector<uint32_t> free_;  // GUARDED_BY(mu_)
  Slot slots_[N];
};

// ---- objects -----------------------------------------------------------------------

inline constexpr int kLimitCount = 8;  // CUlimit values 0x00..0x06 (+ spare)

struct Context {
  ContextId id;
  int device = -1;
  unsigned flags = 0;
  bool primary = false;
  uint64_t unique_id = 0;  // cuCtxGetId
  size_t limits[kLimitCount] = {};
  uint32_t thread_percent = 100;  // MPS active thread percentage (100 for plain contexts)
};

struct Stream {
  uint64_t ctx = 0;
  unsigned flags = 0;
  int priority = 0;
  uint64_t unique_id = 0;
  std::atomic<uint64_t> last_seq{0};       // last op enqueued through this stream
  std::atomic<uint64_t> capture_graph{0};  // graph handle while capturing, else 0
  uint64_t capture_id = 0;

  Stream() = default;
  Stream(Stream&& o) noexcept { *this = std::move(o); }
  Stream& operator=(Stream&& o) noexcept {
    ctx = o.ctx;
    flags = o.flags;
    priority = o.priority;
    unique_id = o.unique_id;
    last_seq.store(o.last_seq.load());
    capture_graph.store(o.capture_graph.load());
    capture_id = o.capture_id;
    return *this;
  }
};

struct Event {
  uint64_t ctx = 0;
  unsigned flags = 0;
  int slot = -1;
  uint64_t seq = 0;  // seq of the last record; 0: never recorded
};

struct Module {
  uint64_t ctx = 0;  // 0 for libraries (context-independent)
  bool library = false;
  std::map<std::string, uint64_t> functions;   // name -> function handle
  std::map<std::string, CUdeviceptr> globals;  // name -> backing page
};

struct Function {
  std::string name;
  bool spin = false;  // the simulator's gpuslice_sim_spin kernel
  uint64_t module = 0;
  int max_dynamic_shared = 0;  // cuFuncSetAttribute
};

// One kernel as a graph holds it: launch shape and, for the spin kernel, its
// duration (parameters are copied at node creation as the driver does).
struct KernelNode {
  uint64_t function = 0;
  uint32_t grid[3] = {};
  uint32_t block[3] = {};
  uint64_t spin_ns = 0;
};

// A graph's memory allocation node (cuGraphAddMemAllocNode, or
// cuMemAllocAsync captured): its address is fixed when the node is made; its
// physical memory is the device's graph pool's, mapped at the exec's first
// launch (docs/sim.md "Graph memory", graph_memory.cc).
struct GraphAlloc {
  int device = -1;
  uint64_t bytes = 0;      // rounded to the granularity
  uint64_t requested = 0;  // as asked for
  uint32_t node = 0;       // its node's index
  uintptr_t address = 0;
  bool freed_in_graph = false;  // a free node of the same graph frees it
};

struct Graph {
  std::vector<KernelNode> kernels;
  uint32_t nodes = 0;                  // every node (== types.size())
  std::vector<CUgraphNodeType> types;  // by node index
  std::vector<GraphAlloc> allocs;
};

struct GraphExec {
  std::vector<KernelNode> kernels;
  std::vector<GraphAlloc> allocs;
  uint64_t need = 0;       // the physical memory its allocations map (their sum)
  int device = -1;         // of its allocations (the first one's)
  bool auto_free = false;  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
  // GUARDED_BY(Driver::pools_mu):
  bool mapped = false;          // holds `need` of the graph pool
  std::vector<uintptr_t> live;  // its allocations not freed since its last launch
};

// A stream-ordered memory pool (a device's default pool, or cuMemPoolCreate's).
// Its backing memory (model.reserved()) is charged to one context of the
// pool's device (`backing_ctx`, the first that allocated from it), so NVML's
// per-process usage counts what the pool reserves, not what is allocated.
// GUARDED_BY(Driver::pools_mu), except `device` and `is_default` (fixed).
struct Pool {
  int device = -1;
  bool is_default = false;
  bool destroyed = false;    // cuMemPoolDestroy'd with allocations outstanding
  uint64_t backing_ctx = 0;  // context handle the reserve is charged to (0: none)
  ContextId backing_cid;
  PoolModel model;
};

// An array or mipmapped array: accounted device memory without a backing.
struct Array {
  uint64_t ctx = 0;
  ContextId cid;
  uint64_t bytes = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 1;
};

// cuMemCreate's physical memory: a memfd so that it can be mapped at several
// addresses; accounted until released and unmapped everywhere.
struct Physical {
  uint64_t ctx = 0;
  ContextId cid;
  int device = -1;
  uint64_t bytes = 0;
  int fd = -1;
  int refs = 0;  // 1 for the handle + 1 per mapping + cuMemRetainAllocationHandle
  CUmemAllocationProp prop{};
};

// A device-visible address range the driver handed out.
enum class RangeKind : uint8_t {
  kDevice,      // cuMemAlloc*, pitch, managed, async, pool: accounted, owns its mapping
  kMapped,      // a cuMemMap of physical memory into a reservation
  kGlobal,      // a module global: unaccounted backing page
  kHost,        // page-locked host memory (cuMemAllocHost, cuMemHostAlloc): not accounted
  kRegistered,  // cuMemHostRegister: the caller's memory
};

struct Range {
  uint64_t bytes = 0;   // usable size (what the program asked for)
  uint64_t mapped = 0;  // size of the mapping (device: rounded to the granularity)
  RangeKind kind = RangeKind::kDevice;
  uint64_t ctx = 0;  // context handle it was charged to (device/kMapped)
  ContextId cid;
  uint64_t pool = 0;      // pool handle for pool allocations
  uint64_t physical = 0;  // kMapped: the physical handle
  unsigned flags = 0;     // kHost: cuMemHostAlloc flags
  bool managed = false;   // kDevice: cuMemAllocManaged (not charged to cgroup limits)
  bool graph = false;     // kDevice: a graph allocation's address (kept by its node)
};

// ---- the driver ----------------------------------------------------------------------

struct Driver {
  std::mutex mu;  // init, primary contexts, default pools, module maps, reservations
  std::atomic<bool> initialized{false};
  bool init_failed = false;                          // GUARDED_BY(mu): cuInit failed for good
  CUresult init_error = CUDA_ERROR_NOT_INITIALIZED;  // GUARDED_BY(mu): what it returns then
  std::unique_ptr<SimGpu> gpu;                       // set once, before `initialized`
  // The devices this process sees (CUDA_VISIBLE_DEVICES, sim/core/visible_devices.h):
  // a CUdevice is an index here. Set once, before `initialized`.
  std::vector<VisibleDevice> visible;

  uint64_t primary[kMaxDevices] = {};        // GUARDED_BY(mu): context handle or 0
  int primary_refs[kMaxDevices] = {};        // GUARDED_BY(mu)
  unsigned primary_flags[kMaxDevices] = {};  // GUARDED_BY(mu)
  uint64_t default_pool[kMaxDevices] = {};   // GUARDED_BY(mu)
  uint64_t current_pool[kMaxDevices] = {};   // GUARDED_BY(mu)
  uint64_t graph_pool[kMaxDevices] = {};     // GUARDED_BY(mu): the graphs' memory pool
  std::atomic<uint64_t> next_unique_id{1};

  std::map<uintptr_t, uint64_t> reservations;  // GUARDED_BY(mu): cuMemAddressReserve ranges

  // MPS: the thread percentage this process got as an MPS client of each
  // device (0: not a client there). Set when a context connects.
  std::atomic<uint32_t> mps_thread_percent[kMaxDevices] = {};
  // The SMs of its MPS v3 static SM partition, per device; 0: none.
  std::atomic<uint32_t> mps_sm_count[kMaxDevices] = {};

  std::mutex pools_mu;  // every Pool's reserve and usage (never held with `mu`)

  std::shared_mutex ranges_mu;
  std::map<uintptr_t, Range> ranges;  // GUARDED_BY(ranges_mu): base -> range

  HandleTable<Context, kMaxContexts, Tag::kContext> contexts;
  HandleTable<Stream, 8192, Tag::kStream> streams;
  HandleTable<Event, 16384, Tag::kEvent> events;
  HandleTable<Module, 2048, Tag::kModule> modules;
  HandleTable<Function, 8192, Tag::kFunction> functions;
  HandleTable<Graph, 2048, Tag::kGraph> graphs;
  HandleTable<GraphExec, 2048, Tag::kGraphExec> graph_execs;
  HandleTable<Pool, 256, Tag::kPool> pools;
  HandleTable<Array, 8192, Tag::kArray> arrays;
  HandleTable<Array, 1024, Tag::kMipmap> mipmaps;
  HandleTable<Physical, 8192, Tag::kPhysical> physicals;
};

// The process's driver; never destroyed (programs call the driver during exit).
Driver& D();

// ---- common checks (all return CUDA_SUCCESS or the error to return) --------------------

inline CUresult Ready() {
  return D().initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS
                                                         : CUDA_ERROR_NOT_INITIALIZED;
}
CUresult CheckDevice(CUdevice dev);  // Ready() and a valid ordinal
// The device ordinal `dev` names: its GPU (`device`) and MIG device (`lane`).
// REQUIRES: CheckDevice(dev) == CUDA_SUCCESS.
inline const VisibleDevice& Visible(CUdevice dev) { return D().visible[static_cast<size_t>(dev)]; }
// Its GPU's configuration.
inline const DeviceInfo& GpuInfo(CUdevice dev) { return D().gpu->device(Visible(dev).device); }
inline int VisibleCount() { return static_cast<int>(D().visible.size()); }

// Maps a SimGpu status to the CUDA error the real driver gives in that case.
CUresult FromStatus(const Status& s);

template <typename H>
uint64_t Raw(H h) {
  return reinterpret_cast<uint64_t>(h);
}
template <typename H>
H AsHandle(uint64_t v) {
  // The driver ABI's handles are opaque pointers; ours are tagged table indices.
  return reinterpret_cast<H>(v);  // NOLINT(performance-no-int-to-ptr): never dereferenced
}

// The host address behind a device pointer: the simulated device's memory is
// host memory this driver mapped, and CUdeviceptr is an integer by the driver
// ABI. The one place such an integer becomes a pointer again.
// The handle of node `index` of `graph`.
inline uint64_t GraphNodeHandle(uint64_t graph, uint32_t index) {
  return (uint64_t{index + 1} << 32) | (graph & 0xffffff00) | static_cast<uint8_t>(Tag::kGraphNode);
}

inline void* HostPtr(CUdeviceptr p) {
  return reinterpret_cast<void*>(p);  // NOLINT(performance-no-int-to-ptr): see above
}

// ---- the thread's context stack ----------------------------------------------------------

uint64_t CurrentHandle();  // top of the stack, 0 if empty
// The current context, or nullptr with *rc set (INVALID_CONTEXT).
Context* CurrentContext(CUresult* rc);
bool PushContext(uint64_t ctx);    // false when the stack is full
uint64_t PopContext();             // 0 when empty
void ReplaceTop(uint64_t ctx);     // cuCtxSetCurrent: replace (or push onto an empty stack)
void ForgetContext(uint64_t ctx);  // removes every occurrence from this thread's stack

// Where work for `stream` goes: its context and, for a created stream, the
// stream (nullptr for the legacy and per-thread default streams, which use the
// current context). Errors: INVALID_HANDLE (bad stream), INVALID_CONTEXT.
CUresult ResolveStream(CUstream stream, Context** ctx, Stream** s);

// ---- contexts and work -------------------------------------------------------------------

// Connects this process as an MPS client for `dev` if a control daemon
// listens in its CUDA_MPS_PIPE_DIRECTORY: *mps is set and *is_client true;
// no daemon: *is_client false (a plain context). Errors: the CUDA error the
// real driver gives (MPS_MAX_CLIENTS_REACHED, MPS_SERVER_NOT_READY,
// MPS_CONNECTION_FAILED for a malformed CUDA_MPS_* variable).
CUresult ConnectMps(CUdevice dev, MpsAttachment* mps, bool* is_client);

// Creates a context on `dev` (Ready and the device checked by the caller);
// an MPS client context when ConnectMps says so.
CUresult CreateContextOn(CUdevice dev, unsigned flags, bool primary, uint64_t* handle);
// Waits for the context's work, frees everything it owns and destroys it.
void DestroyContext(uint64_t handle);
// Waits until every op of `ctx` up to `seq` (0: its last) completed.
CUresult WaitContext(const Context& ctx, uint64_t seq = 0);

// Queues one kernel on `ctx` (or records it into a capturing stream's graph).
// The fast path: no allocation, no driver-wide lock.
CUresult EnqueueKernel(Context& ctx, Stream* stream, const Function& fn, uint64_t fn_handle,
                       const uint32_t grid[3], const uint32_t block[3], uint64_t spin_ns);

// ---- memory -------------------------------------------------------------------------------

// Host memory standing in for a device range of `bytes` (mapped rounded to
// the allocation granularity), recorded in the range table as `r` with its
// size and kind kDevice filled in; nullptr when it cannot be mapped (nothing
// recorded). Charges nothing.
void* MapDeviceRange(uint64_t bytes, Range r);
// Charges `bytes` to ctx, maps a backing and registers it as kind kDevice.
CUresult AllocateDevice(uint64_t ctx_handle, uint64_t bytes, uint64_t pool, CUdeviceptr* out,
                        bool managed = false);
// A stream-ordered allocation of `bytes` from `pool` for context `ctx_handle`:
// grows the pool's reserve first when it cannot hold it (charged to the
// pool's backing context), then maps a backing and registers it as kDevice.
CUresult AllocateFromPool(uint64_t ctx_handle, uint64_t bytes, uint64_t pool, CUdeviceptr* out);
// A new pool of `device` (its model from the simulator's parameters; at most
// `max_size` bytes reserved, 0: no maximum); 0 when the table is full.
uint64_t AddPool(int device, bool is_default, uint64_t max_size = 0);
// A synchronize (stream, event, context): every pool gives back what it holds
// above its release threshold.
void ReleasePoolsAtSync();
// Gives `bytes` of `pool`'s reserve back to the device. REQUIRES: pools_mu.
void ReleasePoolBacking(Pool& pool, uint64_t bytes);
// Frees a kDevice range starting at `ptr`; INVALID_VALUE if there is none.
CUresult FreeDevice(CUdeviceptr ptr);

// ---- graph memory (graph_memory.cc; docs/sim.md "Graph memory") ----
// Adds an allocation node of `bytes` on `device` to `graph` (the graph
// lock, Driver::mu, is taken here); its fixed address in *out.
CUresult AddGraphAlloc(uint64_t graph, int device, uint64_t bytes, CUdeviceptr* out);
// Adds a free node of `ptr` to `graph`: INVALID_VALUE unless `ptr` is an
// allocation of that graph not freed there yet.
CUresult AddGraphFree(uint64_t graph, CUdeviceptr ptr);
// Before exec `exec` runs (a launch or an upload) in context `ctx_handle`:
// maps its allocations' physical memory if it is not mapped (the graph
// pool grows when its free memory is short: CUDA_ERROR_OUT_OF_MEMORY when the
// device has no room, nothing launched). `launch`: its unfreed allocations
// become live (a relaunch while some are live is INVALID_VALUE unless
// instantiated with AUTO_FREE_ON_LAUNCH).
CUresult MapGraphExec(uint64_t exec, uint64_t ctx_handle, bool launch);
// A destroyed exec's mapping goes back to the graph pool (not the device).
void UnmapGraphExec(GraphExec& exec);
// cuMemFree/cuMemFreeAsync of a graph allocation at `ptr`: no longer live.
void FreeGraphAlloc(uintptr_t ptr);
// True when [p, p + n) lies inside one registered range (n == 0: p inside one).
bool InRegisteredRange(uintptr_t p, uint64_t n);
// True when p lies inside some registered range.
bool IsRegistered(uintptr_t p);

// The device context to charge device-wide allocations (cuMemCreate, pools)
// on `dev` to: the current context if it is on `dev`, else the primary one.
CUresult ContextForDevice(int dev, uint64_t* handle);

}  // namespace gpuslice::sim::driver
