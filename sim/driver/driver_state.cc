#include "sim/driver/driver_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "sim/mps/client.h"

namespace gpuslice::sim::driver {

Driver& D() {
  static auto* driver = new Driver;
  return *driver;
}

CUresult CheckDevice(CUdevice dev) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  return dev >= 0 && dev < VisibleCount() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult FromStatus(const Status& s) {
  if (IsMpsClientTerminated(s)) return CUDA_ERROR_MPS_CLIENT_TERMINATED;
  switch (s.code()) {
    case StatusCode::kOk:
      return CUDA_SUCCESS;
    case StatusCode::kResourceExhausted:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case StatusCode::kFailedPrecondition:
      return CUDA_ERROR_DEVICE_UNAVAILABLE;
    case StatusCode::kInvalidArgument:
      return CUDA_ERROR_INVALID_VALUE;
    case StatusCode::kNotFound:
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

// ---- context stack ---------------------------------------------------------------------

namespace {
constexpr int kStackDepth = 128;
// Trivially destructible so that no TLS destructor runs at thread exit.
thread_local uint64_t t_stack[kStackDepth];
thread_local int t_depth = 0;
}  // namespace

uint64_t CurrentHandle() { return t_depth > 0 ? t_stack[t_depth - 1] : 0; }

Context* CurrentContext(CUresult* rc) {
  Context* ctx = D().contexts.Get(CurrentHandle());
  if (ctx == nullptr) *rc = CUDA_ERROR_INVALID_CONTEXT;
  return ctx;
}

bool PushContext(uint64_t ctx) {
  if (t_depth == kStackDepth) return false;
  t_stack[t_depth++] = ctx;
  return true;
}

uint64_t PopContext() { return t_depth > 0 ? t_stack[--t_depth] : 0; }

void ReplaceTop(uint64_t ctx) {
  if (t_depth == 0) {
    t_stack[t_depth++] = ctx;
  } else {
    t_stack[t_depth - 1] = ctx;
  }
}

void ForgetContext(uint64_t ctx) {
  int out = 0;
  for (int i = 0; i < t_depth; ++i) {
    if (t_stack[i] != ctx) t_stack[out++] = t_stack[i];
  }
  t_depth = out;
}

CUresult ResolveStream(CUstream stream, Context** ctx, Stream** s) {
  const uint64_t raw = Raw(stream);
  *s = nullptr;
  if (raw == 0 || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    CUresult rc = CUDA_SUCCESS;
    *ctx = CurrentContext(&rc);
    return rc;
  }
  Stream* st = D().streams.Get(raw);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *ctx = D().contexts.Get(st->ctx);
  if (*ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;  // its context was destroyed
  *s = st;
  return CUDA_SUCCESS;
}

// ---- contexts ---------------------------------------------------------------------------

CUresult ConnectMps(CUdevice dev, MpsAttachment* mps, bool* is_client) {
  *is_client = false;
  auto env = mps::ClientEnvironmentFromEnv();
  if (!env.ok()) {
    GS_LOG(kError, "sim-driver", "%s", env.status().message().c_str());
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  auto attachment = mps::ConnectClient(*env, Visible(dev).device);
  if (!attachment.ok()) {
    switch (attachment.status().code()) {
      case StatusCode::kNotFound:  // no daemon: a plain context, as the real driver
        return CUDA_SUCCESS;
      case StatusCode::kResourceExhausted:
        return CUDA_ERROR_MPS_MAX_CLIENTS_REACHED;
      default:
        GS_LOG(kWarn, "sim-driver", "MPS: %s", attachment.status().message().c_str());
        return CUDA_ERROR_MPS_SERVER_NOT_READY;
    }
  }
  *mps = *attachment;
  *is_client = true;
  D().mps_sm_count[dev].store(attachment->sm_count, std::memory_order_relaxed);
  D().mps_thread_percent[dev].store(attachment->thread_percent, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult CreateContextOn(CUdevice dev, unsigned flags, bool primary, uint64_t* handle) {
  MpsAttachment mps;
  bool is_client = false;
  if (CUresult rc = ConnectMps(dev, &mps, &is_client); rc != CUDA_SUCCESS) return rc;
  auto id = D().gpu->CreateContext(Visible(dev).device, primary ? uint32_t{kContextPrimary} : 0u,
                                   is_client ? &mps : nullptr, Visible(dev).lane);
  if (!id.ok()) {
    GS_LOG(kInfo, "sim-driver", "context on device %d: %s", dev, id.status().message().c_str());
    return FromStatus(id.status());
  }
  Context ctx;
  ctx.id = *id;
  ctx.device = dev;
  ctx.flags = flags;
  ctx.primary = primary;
  ctx.unique_id = D().next_unique_id.fetch_add(1);
  ctx.thread_percent = is_client ? mps.thread_percent : 100;
  ctx.limits[CU_LIMIT_STACK_SIZE] = 1024;
  ctx.limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  ctx.limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  ctx.limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
  ctx.limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  ctx.limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
  *handle = D().contexts.Add(std::move(ctx));
  if (*handle == 0) {
    (void)D().gpu->DestroyContext(*id);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

CUresult WaitContext(const Context& ctx, uint64_t seq) {
  if (seq == 0) seq = D().gpu->LastSeq(ctx.id);
  Status s = D().gpu->Wait(ctx.id, seq);  // seq 0: only checks the context
  if (IsMpsClientTerminated(s)) return CUDA_ERROR_MPS_CLIENT_TERMINATED;
  return s.ok() ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

void DestroyContext(uint64_t handle) {
  Driver& d = D();
  Context ctx;
  if (!d.contexts.Remove(handle, &ctx)) return;
  (void)WaitContext(ctx);
  // Device memory, mappings and globals it owns.
  {
    std::unique_lock lock(d.ranges_mu);
    for (auto it = d.ranges.begin(); it != d.ranges.end();) {
      const bool owned = it->second.ctx == handle && (it->second.kind == RangeKind::kDevice ||
                                                      it->second.kind == RangeKind::kGlobal);
      if (!owned) {
        ++it;
        continue;
      }
      munmap(HostPtr(it->first), it->second.mapped);
      it = d.ranges.erase(it);
    }
  }
  for (uint64_t s : d.streams.Find([&](const Stream& st) { return st.ctx == handle; })) {
    d.streams.Remove(s);
  }
  for (uint64_t e : d.events.Find([&](const Event& ev) { return ev.ctx == handle; })) {
    d.events.Remove(e);
  }
  for (uint64_t a : d.arrays.Find([&](const Array& ar) { return ar.ctx == handle; })) {
    d.arrays.Remove(a);
  }
  for (uint64_t a : d.mipmaps.Find([&](const Array& ar) { return ar.ctx == handle; })) {
    d.mipmaps.Remove(a);
  }
  // Physical memory charged to it stays addressable (its mappings belong to
  // the program) but is no longer accounted: the simulator frees the
  // context's memory as a whole.
  for (uint64_t p : d.physicals.Find([&](const Physical& ph) { return ph.ctx == handle; })) {
    if (Physical* ph = d.physicals.Get(p)) ph->ctx = 0;
  }
  // Pools whose reserve it held lose it with the context's memory.
  {
    std::lock_guard lock(d.pools_mu);
    for (uint64_t h : d.pools.Find([&](const Pool& pl) { return pl.backing_ctx == handle; })) {
      if (Pool* pl = d.pools.Get(h)) {
        pl->model.ReleaseAll();
        pl->backing_ctx = 0;
      }
    }
  }
  (void)d.gpu->DestroyContext(ctx.id);
  ForgetContext(handle);
}

// ---- launches ------------------------------------------------------------------------------

CUresult EnqueueKernel(Context& ctx, Stream* stream, const Function& fn, uint64_t fn_handle,
                       const uint32_t grid[3], const uint32_t block[3], uint64_t spin_ns) {
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  const DeviceInfo& info = GpuInfo(ctx.device);
  if (threads == 0 || threads > info.max_threads_per_block || block[2] > 64) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream != nullptr) {
    if (uint64_t g = stream->capture_graph.load(std::memory_order_acquire); g != 0) {
      Graph* graph = D().graphs.Get(g);
      if (graph == nullptr) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      KernelNode node;
      node.function = fn_handle;
      std::copy_n(grid, 3, node.grid);
      std::copy_n(block, 3, node.block);
      node.spin_ns = spin_ns;
      std::lock_guard lock(D().mu);  // graphs are edited under the driver lock
      graph->kernels.push_back(node);
      ++graph->nodes;
      graph->types.push_back(CU_GRAPH_NODE_TYPE_KERNEL);
      return CUDA_SUCCESS;
    }
  }
  const uint64_t blocks = uint64_t{grid[0]} * grid[1] * grid[2];
  // On a MIG device, its SMs.
  const VisibleDevice& on = Visible(ctx.device);
  const int64_t duration =
      D().gpu->KernelDurationNs(on.device, fn.name, blocks, static_cast<uint32_t>(threads), spin_ns,
                                ctx.thread_percent, on.lane > 0 ? on.sm_count : 0);
  auto seq = D().gpu->EnqueueKernel(ctx.id, duration);
  if (!seq.ok()) {
    return IsMpsClientTerminated(seq.status()) ? CUDA_ERROR_MPS_CLIENT_TERMINATED
                                               : CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  if (stream != nullptr) stream->last_seq.store(*seq, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

// ---- memory ----------------------------------------------------------------------------------

void* MapDeviceRange(uint64_t bytes, Range r) {
  Driver& d = D();
  const uint64_t rounded = d.gpu->RoundToGranularity(bytes);
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  r.bytes = bytes;
  r.mapped = rounded;
  r.kind = RangeKind::kDevice;
  std::unique_lock lock(d.ranges_mu);
  d.ranges[reinterpret_cast<uintptr_t>(p)] = r;
  return p;
}

CUresult AllocateDevice(uint64_t ctx_handle, uint64_t bytes, uint64_t pool, CUdeviceptr* out,
                        bool managed) {
  Driver& d = D();
  Context* ctx = d.contexts.Get(ctx_handle);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const ContextId cid = ctx->id;
  if (Status s = d.gpu->Allocate(cid, bytes, managed); !s.ok()) return FromStatus(s);
  Range r;
  r.ctx = ctx_handle;
  r.cid = cid;
  r.pool = pool;
  r.managed = managed;
  void* p = MapDeviceRange(bytes, r);
  if (p == nullptr) {
    d.gpu->Free(cid, bytes, managed);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

uint64_t AddPool(int device, bool is_default, uint64_t max_size) {
  const SimParams& params = D().gpu->params();
  const uint64_t granules = std::max<uint32_t>(params.pool_block_granules, 1);
  Pool p;
  p.device = device;
  p.is_default = is_default;
  p.model = PoolModel(params.granularity, granules * params.granularity);
  p.model.set_max_size(max_size);
  return D().pools.Add(std::move(p));
}

void ReleasePoolBacking(Pool& pool, uint64_t bytes) {
  if (bytes == 0 || pool.backing_ctx == 0) return;
  if (D().contexts.Get(pool.backing_ctx) != nullptr) D().gpu->Free(pool.backing_cid, bytes);
}

CUresult AllocateFromPool(uint64_t ctx_handle, uint64_t bytes, uint64_t pool, CUdeviceptr* out) {
  Driver& d = D();
  Context* ctx = d.contexts.Get(ctx_handle);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(d.pools_mu);
    Pool* pl = d.pools.Get(pool);
    if (pl == nullptr || pl->destroyed) return CUDA_ERROR_INVALID_VALUE;
    const uint64_t growth = pl->model.GrowthFor(bytes);
    if (!pl->model.Fits(growth)) return CUDA_ERROR_OUT_OF_MEMORY;  // past the pool's maxSize
    if (growth > 0) {
      if (pl->backing_ctx == 0 || d.contexts.Get(pl->backing_ctx) == nullptr) {
        pl->backing_ctx = ctx_handle;  // the first context that grows it holds its reserve
        pl->backing_cid = ctx->id;
      }
      if (Status s = d.gpu->Allocate(pl->backing_cid, growth); !s.ok()) return FromStatus(s);
    }
    pl->model.Allocated(bytes, growth);
  }
  Range r;
  r.ctx = ctx_handle;
  r.cid = ctx->id;
  r.pool = pool;
  void* p = MapDeviceRange(bytes, r);
  if (p == nullptr) {
    std::lock_guard lock(d.pools_mu);
    if (Pool* pl = d.pools.Get(pool)) pl->model.Freed(bytes);  // the reserve stays, as freed
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

void ReleasePoolsAtSync() {
  Driver& d = D();
  const std::vector<uint64_t> pools = d.pools.Find([](const Pool&) { return true; });
  std::lock_guard lock(d.pools_mu);
  for (uint64_t h : pools) {
    if (Pool* pl = d.pools.Get(h)) ReleasePoolBacking(*pl, pl->model.ReleaseAtSync());
  }
}

CUresult FreeDevice(CUdeviceptr ptr) {
  Driver& d = D();
  Range r;
  {
    std::unique_lock lock(d.ranges_mu);
    auto it = d.ranges.find(static_cast<uintptr_t>(ptr));
    if (it == d.ranges.end() || it->second.kind != RangeKind::kDevice) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    r = it->second;
    // A graph allocation's address stays its node's: only its use ends.
    if (!r.graph) d.ranges.erase(it);
  }
  if (r.graph) {
    FreeGraphAlloc(static_cast<uintptr_t>(ptr));
    return CUDA_SUCCESS;
  }
  munmap(HostPtr(ptr), r.mapped);
  if (r.pool == 0) {
    if (d.contexts.Get(r.ctx) != nullptr) d.gpu->Free(r.cid, r.bytes, r.managed);
    return CUDA_SUCCESS;
  }
  // A pool's allocation: its memory stays in the pool's reserve. A pool
  // destroyed with allocations outstanding goes with its last one.
  bool gone = false;
  {
    std::lock_guard lock(d.pools_mu);
    Pool* pl = d.pools.Get(r.pool);
    if (pl == nullptr) return CUDA_SUCCESS;
    pl->model.Freed(r.bytes);
    if (pl->destroyed && pl->model.used() == 0) {
      ReleasePoolBacking(*pl, pl->model.ReleaseAll());
      gone = true;
    }
  }
  if (gone) d.pools.Remove(r.pool);
  return CUDA_SUCCESS;
}

namespace {
// The range containing p, or ranges.end(). REQUIRES: ranges_mu held.
std::map<uintptr_t, Range>::const_iterator Containing(uintptr_t p) {
  const auto& ranges = D().ranges;
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return ranges.end();
  --it;
  return p - it->first < std::max<uint64_t>(it->second.bytes, 1) ? it : ranges.end();
}
}  // namespace

bool InRegisteredRange(uintptr_t p, uint64_t n) {
  std::shared_lock lock(D().ranges_mu);
  auto it = Containing(p);
  if (it == D().ranges.end()) return false;
  return n <= it->second.bytes - (p - it->first);
}

bool IsRegistered(uintptr_t p) {
  std::shared_lock lock(D().ranges_mu);
  return Containing(p) != D().ranges.end();
}

CUresult ContextForDevice(int dev, uint64_t* handle) {
  Driver& d = D();
  const uint64_t cur = CurrentHandle();
  if (Context* c = d.contexts.Get(cur); c != nullptr && c->device == dev) {
    *handle = cur;
    return CUDA_SUCCESS;
  }
  std::lock_guard lock(d.mu);
  if (d.contexts.Get(d.primary[dev]) != nullptr) {
    *handle = d.primary[dev];
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace gpuslice::sim::driver
