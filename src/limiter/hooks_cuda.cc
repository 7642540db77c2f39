// The CUDA driver hooks (shims/cuda_hooks.inc): memory accounting around
// every allocation form, the group's view of memory, contexts, entry-point
// lookup, and launches.
//
// Allocation contract (DESIGN.md section 2): reserve in the group segment
// first, then call the driver, then roll back if the driver said no; over
// the limit the call returns CUDA_ERROR_OUT_OF_MEMORY and nothing else
// changes. Frees call the driver first and give the charge back only if the
// driver freed something the limiter had seen.
#include <algorithm>
#include <atomic>
#include <climits>
#include <vector>

#include "common/hot.h"
#include "common/log.h"
#include "cuda_abi/array_format.h"
#include "limiter/compute_gate.h"
#include "limiter/hooks.h"
#include "limiter/process_state.h"
#include "limiter/real/real_driver.h"
#include "limiter/symbols.h"

namespace gpuslice::limiter::hooks {
namespace {

using real::CallCuda;

// The driver's `name` (the state's table) called with the arguments.
#define GS_REAL(name, ...) \
  CallCuda(l.cuda(), &real::CudaTable::name, [&](auto fn) { return fn(__VA_ARGS__); })

// Runs `allocate` with `bytes` reserved on group device `device` first.
// On success the charge is tracked as `kind` under the id `id_of()` gives.
template <typename Allocate, typename IdOf>
CUresult Reserved(ProcessState& l, int device, uint64_t bytes, uintptr_t ctx, Resource kind,
                  Allocate&& allocate, IdOf&& id_of) {
  if (device < 0) return allocate();  // no usable context: the driver says why
  std::optional<Charge> charge = l.ledger().ReserveDevice(device, bytes);
  if (!charge) [[unlikely]] {
    // Pools may hold less than they were charged (a synchronize released it).
    charge = l.ReserveAfterPoolRefresh(device, bytes);
    if (!charge) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  charge->context = ctx;
  const CUresult rc = allocate();
  if (rc != CUDA_SUCCESS) {
    l.ledger().ReleaseReserved(*charge);
    return rc;
  }
  l.ledger().TrackReserved(kind, id_of(), *charge);
  return CUDA_SUCCESS;
}

// Gives back what `id` held, after the driver freed it.
CUresult Freed(ProcessState& l, CUresult rc, Resource kind, uint64_t id) {
  if (rc == CUDA_SUCCESS) l.ledger().UntrackAndRelease(kind, id);
  return rc;
}

// A freed device pointer: its own charge back, or, for memory of a pool
// (charged by the pool's reserve, not per pointer), the pools' charges
// settled again.
CUresult FreedPointer(ProcessState& l, CUresult rc, CUdeviceptr ptr) {
  if (rc == CUDA_SUCCESS) {
    if (!l.ledger().UntrackAndRelease(Resource::kPointer, ptr)) [[unlikely]] {
      l.PoolMemoryFreed(ptr);
    }
  }
  return rc;
}

// Refuses a legacy 32-bit allocation entry point: the limiter cannot account
// for it faithfully, and no program built after CUDA 3.2 calls it.
CUresult Legacy(const char* name) {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    GS_LOG(kWarn, "limiter", "%s (legacy 32-bit API) refused: CUDA_ERROR_NOT_SUPPORTED", name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Bytes of an array (all `levels` of a mipmapped one) before alignment: the
// estimate reserved ahead of the driver call.
uint64_t ArrayBytes(CUDA_ARRAY3D_DESCRIPTOR d, unsigned levels) {
  uint64_t total = 0;
  for (unsigned i = 0; i < std::max(levels, 1u); ++i) {
    const uint64_t texels =
        uint64_t{d.Width} * std::max<size_t>(d.Height, 1) * std::max<size_t>(d.Depth, 1);
    // Formats the table does not size count 16 bytes a channel: an upper bound.
    const size_t sized = cuda_abi::ArrayFormatBytes(d.Format);
    const uint64_t element = sized != 0 ? sized : 16;
    total += texels * element * std::max(d.NumChannels, 1u);
    d.Width = std::max<size_t>(d.Width / 2, 1);
    if (d.Height > 0) d.Height = std::max<size_t>(d.Height / 2, 1);
    if (d.Depth > 0) d.Depth = std::max<size_t>(d.Depth / 2, 1);
  }
  return total;
}

// Adjusts the charge of a created array to the driver's own figure, when the
// driver can tell (cuArrayGetMemoryRequirements, CUDA 11.6+).
template <typename Query, typename Handle>
void TrueUpArray(ProcessState& l, Resource kind, Handle handle, Query query) {
  if (query == nullptr) return;
  CUdevice dev = -1;
  if (l.cuda().cuCtxGetDevice == nullptr || l.cuda().cuCtxGetDevice(&dev) != CUDA_SUCCESS) return;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  if (query(&req, handle, dev) != CUDA_SUCCESS || req.size == 0) return;
  l.ledger().Settle(kind, reinterpret_cast<uint64_t>(handle), l.Rounded(req.size));
}

// Creates an array through `create` (the real call) with its estimated size
// reserved first, then settles on the driver's figure.
CUresult CreateArray(ProcessState& l, CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& desc,
                     auto&& create) {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr) return create();
  uintptr_t ctx = 0;
  const int device = l.CurrentGroupDevice(&ctx);
  const CUresult rc = Reserved(l, device, l.Rounded(ArrayBytes(desc, 1)), ctx, Resource::kArray,
                               create, [&] { return reinterpret_cast<uint64_t>(*handle); });
  if (rc == CUDA_SUCCESS && device >= 0) {
    TrueUpArray(l, Resource::kArray, *handle, l.cuda().cuArrayGetMemoryRequirements);
  }
  return rc;
}

CUresult DestroyContext(ProcessState& l, CUcontext ctx, auto&& destroy) {
  const CUresult rc = destroy();
  if (rc == CUDA_SUCCESS) {
    l.ForgetContexts();
    Freed(l, rc, Resource::kContext, reinterpret_cast<uint64_t>(ctx));
    l.ledger().ReleaseContext(reinterpret_cast<uintptr_t>(ctx));
    l.PoolMemoryFreed();  // pool memory may have gone with it
    l.graph_memory().RefreshAll();
  }
  return rc;
}

// Creates a context with its estimated reservation charged first, then
// settles on the driver's count; a context the group has no room for is
// destroyed again and refused.
CUresult CreateContext(ProcessState& l, CUcontext* pctx, CUdevice dev, auto&& create) {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return create();
  const int device = l.GroupDevice(dev);
  const CUresult rc = Reserved(l, device, l.contexts().Estimate(device), 0, Resource::kContext,
                               create, [&] { return reinterpret_cast<uint64_t>(*pctx); });
  if (rc != CUDA_SUCCESS || device < 0 ||
      l.contexts().SettleContext(reinterpret_cast<uint64_t>(*pctx))) {
    return rc;
  }
  CUcontext ctx = *pctx;
  DestroyContext(l, ctx, [&] { return GS_REAL(cuCtxDestroy_v2, ctx); });
  *pctx = nullptr;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult ReleasePrimary(ProcessState& l, CUdevice dev, bool reset, auto&& release) {
  const CUresult rc = release();
  if (rc == CUDA_SUCCESS) {
    l.ForgetContexts();
    l.ledger().PrimaryRelease(l.GroupDevice(dev), reset);
    l.PoolMemoryFreed();
    l.graph_memory().RefreshAll();
  }
  return rc;
}

// The driver version from which CUmemPoolProps::maxSize bounds a pool.
constexpr int kPoolMaxSizeVersion = 12020;

// PoolCharges' block probe (pool_charges.h): a pool of the limiter's own on
// CUDA device `ordinal` that may reserve at most `span` bytes is asked for one
// byte on `stream`; what it reserved is its block. Everything is given back
// before it returns (freed, `stream` synchronized, the pool destroyed).
// kUnknown where it cannot be done: a driver without maxSize, a stream being
// captured (the allocation would become a graph node), any other error.
BlockProbe ProbePoolBlock(const ProcessState& l, CUdevice ordinal, CUstream stream, uint64_t span) {
  const real::CudaTable& cu = l.cuda();
  if (ordinal < 0 || cu.cuDriverGetVersion == nullptr || cu.cuMemPoolCreate == nullptr ||
      cu.cuMemAllocFromPoolAsync == nullptr || cu.cuMemFreeAsync == nullptr ||
      cu.cuMemPoolDestroy == nullptr || cu.cuMemPoolGetAttribute == nullptr ||
      cu.cuStreamSynchronize == nullptr) {
    return {};
  }
  int version = 0;
  if (cu.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < kPoolMaxSizeVersion) return {};
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu.cuStreamIsCapturing == nullptr ||
      cu.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return {};
  }
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = ordinal;
  props.maxSize = span;
  CUmemoryPool pool = nullptr;
  if (cu.cuMemPoolCreate(&pool, &props) != CUDA_SUCCESS) return {};
  BlockProbe found;
  CUdeviceptr ptr = 0;
  const CUresult rc = cu.cuMemAllocFromPoolAsync(&ptr, 1, pool, stream);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    found.kind = BlockProbe::kLarger;
  } else if (rc == CUDA_SUCCESS) {
    cuuint64_t reserved = 0;
    if (cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) ==
            CUDA_SUCCESS &&
        reserved > 0) {
      found = BlockProbe{BlockProbe::kBlock, reserved};
    }
    cu.cuMemFreeAsync(ptr, stream);
    cu.cuStreamSynchronize(stream);
  }
  cu.cuMemPoolDestroy(pool);
  return found;
}

// A stream-ordered allocation from `pool` (nullptr: the current pool of the
// stream's device). A pool is charged its reserve (pool_charges.h); where the
// driver cannot report a pool's usage, each allocation is charged instead.
// `per_thread`: a null stream is the per-thread default stream (_ptsz).
CUresult AllocateOnStream(ProcessState& l, CUdeviceptr* dptr, size_t bytes, CUstream stream,
                          CUmemoryPool pool, bool per_thread, auto&& allocate) {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytes == 0) return allocate();
  if (l.captures().Capturing(stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream,
                             l.cuda().cuStreamIsCapturing)) {
    // An allocation node of the capture graph, not memory: its graph's
    // memory is charged when an exec of it runs (graph_memory_charges.h).
    return allocate();
  }
  int device = -1;
  if (pool == nullptr) {
    const CUdevice ordinal = l.StreamOrdinal(stream);
    const auto current = l.cuda().cuDeviceGetMemPool;
    if (ordinal >= 0 && current != nullptr && current(&pool, ordinal) != CUDA_SUCCESS) {
      pool = nullptr;
    }
    device = pool != nullptr ? l.PoolGroupDevice(pool, stream) : l.GroupDevice(ordinal);
  } else {
    device = l.PoolGroupDevice(pool, stream);
    if (device < 0) return allocate();  // memory the group does not count (a host pool)
  }
  if (pool != nullptr && device >= 0) {
    const CUstream sync = stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
    std::optional<CUresult> rc = l.pools().Allocate(
        reinterpret_cast<uint64_t>(pool), device, bytes, allocate,
        [&] {
          // Undo: free it and wait until the pool has it back.
          GS_REAL(cuMemFreeAsync, *dptr, sync);
          GS_REAL(cuStreamSynchronize, sync);
        },
        [&] { return uint64_t{*dptr}; },
        [&](uint64_t span) { return ProbePoolBlock(l, l.Ordinal(device), sync, span); });
    if (rc) {
      if (*rc == CUDA_SUCCESS) l.WatchPools();
      return *rc;
    }
  }
  // Stream-ordered memory outlives its context: tracked with context 0.
  return Reserved(l, device, l.Rounded(bytes), 0, Resource::kPointer, allocate,
                  [&] { return uint64_t{*dptr}; });
}

// After `graph` was instantiated as *exec (rc the instantiation's result):
// what its allocation nodes need, read from the driver (their bytes rounded
// to the granularity, on the first one's device), goes to the graph memory
// charges. Nodes of child graphs are not walked.
CUresult Instantiated(ProcessState& l, CUresult rc, CUgraphExec* exec, CUgraph graph) {
  if (rc != CUDA_SUCCESS || exec == nullptr || *exec == nullptr) return rc;
  const real::CudaTable& cu = l.cuda();
  if (l.EnsureAttached() != CUDA_SUCCESS || cu.cuGraphGetNodes == nullptr ||
      cu.cuGraphNodeGetType == nullptr || cu.cuGraphMemAllocNodeGetParams == nullptr) {
    return rc;
  }
  size_t count = 0;
  if (cu.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return rc;
  std::vector<CUgraphNode> nodes(count);
  if (cu.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return rc;
  uint64_t bytes = 0;
  int ordinal = -1;
  for (size_t i = 0; i < std::min(count, nodes.size()); ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (cu.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS ||
        type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      continue;
    }
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (cu.cuGraphMemAllocNodeGetParams(nodes[i], &params) != CUDA_SUCCESS) continue;
    bytes += l.Rounded(params.bytesize);
    if (ordinal < 0) ordinal = params.poolProps.location.id;
  }
  l.graph_memory().Instantiated(reinterpret_cast<uint64_t>(*exec), ordinal, l.GroupDevice(ordinal),
                                bytes);
  return rc;
}

// cuGraphInstantiateWithParams through `instantiate(params)` (the real
// call). With CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD the driver would map the
// graph's memory inside the call, before its allocation nodes are known: the
// flag is taken off, and the exec uploaded after, charged as any upload;
// an upload refused (no room) destroys the exec and fails the call.
CUresult InstantiateWithParams(ProcessState& l, CUgraphExec* exec, CUgraph graph,
                               CUDA_GRAPH_INSTANTIATE_PARAMS* params, auto&& instantiate) {
  if (params == nullptr || (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) == 0) {
    return Instantiated(l, instantiate(params), exec, graph);
  }
  CUDA_GRAPH_INSTANTIATE_PARAMS plain = *params;
  plain.flags &= ~static_cast<cuuint64_t>(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
  CUresult rc = Instantiated(l, instantiate(&plain), exec, graph);
  params->hErrNode_out = plain.hErrNode_out;
  params->result_out = plain.result_out;
  if (rc != CUDA_SUCCESS || exec == nullptr) return rc;
  const CUgraphExec made = *exec;
  rc = l.graph_memory().Run(reinterpret_cast<uint64_t>(made),
                            [&] { return GS_REAL(cuGraphUpload, made, params->hUploadStream); });
  if (rc != CUDA_SUCCESS) {
    if (GS_REAL(cuGraphExecDestroy, made) == CUDA_SUCCESS) {
      l.graph_memory().Destroyed(reinterpret_cast<uint64_t>(made));
    }
    *exec = nullptr;
    params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  }
  return rc;
}

// Replaces a real entry point handed out by cuGetProcAddress with its shim.
void SubstituteShim(const char* symbol, void** pfn) {
  if (pfn == nullptr || *pfn == nullptr) return;
  if (void* shim = CudaShimForReal(*pfn)) {
    *pfn = shim;
    return;
  }
  if (IsCudaShim(*pfn)) return;  // the driver looked the name up with dlsym: ours already
  if (symbol != nullptr && CudaShim(symbol) != nullptr) {
    // The driver answered with a variant the limiter does not know (a newer
    // driver): say so once; the call is not limited.
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      GS_LOG(kWarn, "limiter", "cuGetProcAddress(%s) returned an entry point not interposed",
             symbol);
    }
  }
}

}  // namespace

// ---- initialisation and lookup ----

CUresult cuInit(ProcessState& l, unsigned int Flags) noexcept {
  if (l.failed_closed()) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult rc = GS_REAL(cuInit, Flags); rc != CUDA_SUCCESS) return rc;
  const CUresult rc = l.EnsureAttached();
  // A process attached through NVML first (EnsureAttached had nothing to do)
  // becomes a tenant now that it uses CUDA.
  if (rc == CUDA_SUCCESS) l.StartRegistration();
  return rc;
}

CUresult cuGetProcAddress(ProcessState& l, const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags) noexcept {
  const CUresult rc = GS_REAL(cuGetProcAddress, symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS) SubstituteShim(symbol, pfn);
  return rc;
}

CUresult cuGetProcAddress_v2(ProcessState& l, const char* symbol, void** pfn, int cudaVersion,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) noexcept {
  const CUresult rc = GS_REAL(cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS) SubstituteShim(symbol, pfn);
  return rc;
}

// ---- the group's view of memory ----

CUresult cuDeviceTotalMem_v2(ProcessState& l, size_t* bytes, CUdevice dev) noexcept {
  const CUresult rc = GS_REAL(cuDeviceTotalMem_v2, bytes, dev);
  if (rc != CUDA_SUCCESS) return rc;
  if (l.EnsureAttached() != CUDA_SUCCESS) return rc;
  const int device = l.GroupDevice(dev);
  if (l.HasMemoryLimit(device)) *bytes = std::min<uint64_t>(*bytes, l.MemoryLimit(device));
  return rc;
}

CUresult cuDeviceTotalMem(ProcessState& l, unsigned int* bytes, CUdevice dev) noexcept {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  const CUresult rc = cuDeviceTotalMem_v2(l, &total, dev);
  if (rc == CUDA_SUCCESS) *bytes = static_cast<unsigned>(std::min<size_t>(total, UINT_MAX));
  return rc;
}

CUresult cuMemGetInfo_v2(ProcessState& l, size_t* free, size_t* total) noexcept {
  const CUresult rc = GS_REAL(cuMemGetInfo_v2, free, total);
  if (rc != CUDA_SUCCESS) return rc;
  if (l.EnsureAttached() != CUDA_SUCCESS) return rc;
  const int device = l.CurrentGroupDevice();
  if (!l.HasMemoryLimit(device)) return rc;
  l.PoolMemoryFreed();  // the pools' charges as the driver holds them now
  const uint64_t limit = std::min<uint64_t>(l.MemoryLimit(device), *total);
  const uint64_t used = l.MemoryUsed(device);
  *total = limit;
  // Never more than the device really has free.
  *free = std::min<uint64_t>(*free, limit > used ? limit - used : 0);
  return rc;
}

CUresult cuMemGetInfo(ProcessState& l, unsigned int* free, unsigned int* total) noexcept {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t f = 0, t = 0;
  const CUresult rc = cuMemGetInfo_v2(l, &f, &t);
  if (rc == CUDA_SUCCESS) {
    *free = static_cast<unsigned>(std::min<size_t>(f, UINT_MAX));
    *total = static_cast<unsigned>(std::min<size_t>(t, UINT_MAX));
  }
  return rc;
}

// ---- context switches ----

namespace {

// Returns `rc` after a call that may have changed this thread's current
// context: the cached device of the current context is forgotten.
CUresult Switched(CUresult rc) {
  ProcessState::ForgetCurrentContext();
  return rc;
}

}  // namespace

CUresult cuCtxSetCurrent(ProcessState& l, CUcontext ctx) noexcept {
  return Switched(GS_REAL(cuCtxSetCurrent, ctx));
}
CUresult cuCtxPushCurrent(ProcessState& l, CUcontext ctx) noexcept {
  return Switched(GS_REAL(cuCtxPushCurrent, ctx));
}
CUresult cuCtxPushCurrent_v2(ProcessState& l, CUcontext ctx) noexcept {
  return Switched(GS_REAL(cuCtxPushCurrent_v2, ctx));
}
CUresult cuCtxPopCurrent(ProcessState& l, CUcontext* pctx) noexcept {
  return Switched(GS_REAL(cuCtxPopCurrent, pctx));
}
CUresult cuCtxPopCurrent_v2(ProcessState& l, CUcontext* pctx) noexcept {
  return Switched(GS_REAL(cuCtxPopCurrent_v2, pctx));
}

// ---- contexts (a created context becomes current) ----

CUresult cuCtxCreate(ProcessState& l, CUcontext* pctx, unsigned int flags, CUdevice dev) noexcept {
  return Switched(
      CreateContext(l, pctx, dev, [&] { return GS_REAL(cuCtxCreate, pctx, flags, dev); }));
}
CUresult cuCtxCreate_v2(ProcessState& l, CUcontext* pctx, unsigned int flags,
                        CUdevice dev) noexcept {
  return Switched(
      CreateContext(l, pctx, dev, [&] { return GS_REAL(cuCtxCreate_v2, pctx, flags, dev); }));
}
CUresult cuCtxCreate_v3(ProcessState& l, CUcontext* pctx, CUexecAffinityParam* paramsArray,
                        int numParams, unsigned int flags, CUdevice dev) noexcept {
  return Switched(CreateContext(l, pctx, dev, [&] {
    return GS_REAL(cuCtxCreate_v3, pctx, paramsArray, numParams, flags, dev);
  }));
}
CUresult cuCtxCreate_v4(ProcessState& l, CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                        unsigned int flags, CUdevice dev) noexcept {
  return Switched(CreateContext(
      l, pctx, dev, [&] { return GS_REAL(cuCtxCreate_v4, pctx, ctxCreateParams, flags, dev); }));
}
CUresult cuCtxDestroy(ProcessState& l, CUcontext ctx) noexcept {
  return DestroyContext(l, ctx, [&] { return GS_REAL(cuCtxDestroy, ctx); });
}
CUresult cuCtxDestroy_v2(ProcessState& l, CUcontext ctx) noexcept {
  return DestroyContext(l, ctx, [&] { return GS_REAL(cuCtxDestroy_v2, ctx); });
}

CUresult cuDevicePrimaryCtxRetain(ProcessState& l, CUcontext* pctx, CUdevice dev) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  const int device = l.GroupDevice(dev);
  if (pctx == nullptr || device < 0) return GS_REAL(cuDevicePrimaryCtxRetain, pctx, dev);
  std::optional<Charge> charge;
  if (l.ledger().PrimaryNeedsCharge(device)) {
    charge = l.ledger().Reserve(device, l.contexts().Estimate(device));
    if (!charge) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult rc = GS_REAL(cuDevicePrimaryCtxRetain, pctx, dev);
  if (rc != CUDA_SUCCESS) {
    if (charge) l.ledger().Release(*charge);
    return rc;
  }
  if (l.ledger().PrimaryRetainDone(device, reinterpret_cast<uintptr_t>(*pctx), charge) &&
      !l.contexts().SettlePrimary(device)) {
    // No room for the context as the driver counts it: undo this retain.
    ReleasePrimary(l, dev, false, [&] { return GS_REAL(cuDevicePrimaryCtxRelease_v2, dev); });
    *pctx = nullptr;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return rc;
}
CUresult cuDevicePrimaryCtxRelease(ProcessState& l, CUdevice dev) noexcept {
  return ReleasePrimary(l, dev, false, [&] { return GS_REAL(cuDevicePrimaryCtxRelease, dev); });
}
CUresult cuDevicePrimaryCtxRelease_v2(ProcessState& l, CUdevice dev) noexcept {
  return ReleasePrimary(l, dev, false, [&] { return GS_REAL(cuDevicePrimaryCtxRelease_v2, dev); });
}
CUresult cuDevicePrimaryCtxReset(ProcessState& l, CUdevice dev) noexcept {
  return ReleasePrimary(l, dev, true, [&] { return GS_REAL(cuDevicePrimaryCtxReset, dev); });
}
CUresult cuDevicePrimaryCtxReset_v2(ProcessState& l, CUdevice dev) noexcept {
  return ReleasePrimary(l, dev, true, [&] { return GS_REAL(cuDevicePrimaryCtxReset_v2, dev); });
}

// ---- allocations ----

CUresult cuMemAlloc(ProcessState& /*l*/, CUdeviceptr_v1*, unsigned int) noexcept {
  return Legacy("cuMemAlloc");
}
CUresult cuMemAllocPitch(ProcessState& /*l*/, CUdeviceptr_v1*, unsigned int*, unsigned int,
                         unsigned int, unsigned int) noexcept {
  return Legacy("cuMemAllocPitch");
}
CUresult cuArrayCreate(ProcessState& /*l*/, CUarray*, const CUDA_ARRAY_DESCRIPTOR_v1*) noexcept {
  return Legacy("cuArrayCreate");
}
CUresult cuArray3DCreate(ProcessState& /*l*/, CUarray*,
                         const CUDA_ARRAY3D_DESCRIPTOR_v1*) noexcept {
  return Legacy("cuArray3DCreate");
}

// The first function of this file's .text.hot, page-aligned so the hot
// section (a little over a page) starts on a page and spans two, not three.
__attribute__((aligned(4096))) GS_HOT CUresult cuMemAlloc_v2(ProcessState& l, CUdeviceptr* dptr,
                                                             size_t bytesize) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  auto allocate = [&] { return GS_REAL(cuMemAlloc_v2, dptr, bytesize); };
  if (dptr == nullptr || bytesize == 0) return allocate();
  uintptr_t ctx = 0;
  const int device = l.CurrentGroupDevice(&ctx);
  return Reserved(l, device, l.Rounded(bytesize), ctx, Resource::kPointer, allocate,
                  [&] { return uint64_t{*dptr}; });
}

CUresult cuMemAllocPitch_v2(ProcessState& l, CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                            size_t Height, unsigned int ElementSizeBytes) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  auto allocate = [&] {
    return GS_REAL(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  };
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      WidthInBytes > (uint64_t{1} << 40) || Height > (uint64_t{1} << 40)) {
    return allocate();
  }
  uintptr_t ctx = 0;
  const int device = l.CurrentGroupDevice(&ctx);
  // Reserve for rows padded to 512 bytes (the widest pitch alignment), then
  // settle on the pitch the driver chose.
  const uint64_t estimate = l.Rounded((WidthInBytes + 511) / 512 * 512 * Height);
  const CUresult rc = Reserved(l, device, estimate, ctx, Resource::kPointer, allocate,
                               [&] { return uint64_t{*dptr}; });
  if (rc == CUDA_SUCCESS && device >= 0) {
    l.ledger().Settle(Resource::kPointer, *dptr, l.Rounded(uint64_t{*pPitch} * Height));
  }
  return rc;
}

CUresult cuMemAllocManaged(ProcessState& l, CUdeviceptr* dptr, size_t bytesize,
                           unsigned int flags) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  auto allocate = [&] { return GS_REAL(cuMemAllocManaged, dptr, bytesize, flags); };
  if (dptr == nullptr || bytesize == 0) return allocate();
  uintptr_t ctx = 0;
  const int device = l.CurrentGroupDevice(&ctx);
  return Reserved(l, device, l.Rounded(bytesize), ctx, Resource::kPointer, allocate,
                  [&] { return uint64_t{*dptr}; });
}

CUresult cuMemAllocAsync(ProcessState& l, CUdeviceptr* dptr, size_t bytesize,
                         CUstream hStream) noexcept {
  return AllocateOnStream(l, dptr, bytesize, hStream, nullptr, false,
                          [&] { return GS_REAL(cuMemAllocAsync, dptr, bytesize, hStream); });
}
CUresult cuMemAllocAsync_ptsz(ProcessState& l, CUdeviceptr* dptr, size_t bytesize,
                              CUstream hStream) noexcept {
  return AllocateOnStream(l, dptr, bytesize, hStream, nullptr, true,
                          [&] { return GS_REAL(cuMemAllocAsync_ptsz, dptr, bytesize, hStream); });
}
CUresult cuMemAllocFromPoolAsync(ProcessState& l, CUdeviceptr* dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream hStream) noexcept {
  if (pool == nullptr) return GS_REAL(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
  return AllocateOnStream(l, dptr, bytesize, hStream, pool, false, [&] {
    return GS_REAL(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
  });
}
CUresult cuMemAllocFromPoolAsync_ptsz(ProcessState& l, CUdeviceptr* dptr, size_t bytesize,
                                      CUmemoryPool pool, CUstream hStream) noexcept {
  if (pool == nullptr) return GS_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
  return AllocateOnStream(l, dptr, bytesize, hStream, pool, true, [&] {
    return GS_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
  });
}

// ---- stream-ordered memory pools (pool_charges.h) ----

CUresult cuMemPoolCreate(ProcessState& l, CUmemoryPool* pool,
                         const CUmemPoolProps* poolProps) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  const CUresult rc = GS_REAL(cuMemPoolCreate, pool, poolProps);
  if (rc == CUDA_SUCCESS && pool != nullptr && poolProps != nullptr) {
    const bool device = poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    l.pools().Add(reinterpret_cast<uint64_t>(*pool),
                  device ? l.GroupDevice(poolProps->location.id) : -1);
  }
  return rc;
}
CUresult cuMemPoolDestroy(ProcessState& l, CUmemoryPool pool) noexcept {
  return l.pools().Destroy(reinterpret_cast<uint64_t>(pool),
                           [&] { return GS_REAL(cuMemPoolDestroy, pool); });
}
CUresult cuMemPoolTrimTo(ProcessState& l, CUmemoryPool pool, size_t minBytesToKeep) noexcept {
  const CUresult rc = GS_REAL(cuMemPoolTrimTo, pool, minBytesToKeep);
  if (rc == CUDA_SUCCESS) l.pools().Refresh(reinterpret_cast<uint64_t>(pool));
  return rc;
}

CUresult cuMemCreate(ProcessState& l, CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  auto create = [&] { return GS_REAL(cuMemCreate, handle, size, prop, flags); };
  if (handle == nullptr || prop == nullptr || size == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return create();  // host memory, or the driver's own validation
  }
  // Physical memory outlives contexts: tracked with context 0.
  return Reserved(l, l.GroupDevice(prop->location.id), l.Rounded(size), 0, Resource::kVmmHandle,
                  create, [&] { return uint64_t{*handle}; });
}

CUresult cuArrayCreate_v2(ProcessState& l, CUarray* pHandle,
                          const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) noexcept {
  if (pAllocateArray == nullptr) return GS_REAL(cuArrayCreate_v2, pHandle, pAllocateArray);
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = pAllocateArray->Width;
  desc.Height = pAllocateArray->Height;
  desc.Format = pAllocateArray->Format;
  desc.NumChannels = pAllocateArray->NumChannels;
  return CreateArray(l, pHandle, desc,
                     [&] { return GS_REAL(cuArrayCreate_v2, pHandle, pAllocateArray); });
}

CUresult cuArray3DCreate_v2(ProcessState& l, CUarray* pHandle,
                            const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) noexcept {
  if (pAllocateArray == nullptr) return GS_REAL(cuArray3DCreate_v2, pHandle, pAllocateArray);
  return CreateArray(l, pHandle, *pAllocateArray,
                     [&] { return GS_REAL(cuArray3DCreate_v2, pHandle, pAllocateArray); });
}

CUresult cuMipmappedArrayCreate(ProcessState& l, CUmipmappedArray* pHandle,
                                const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                unsigned int numMipmapLevels) noexcept {
  if (CUresult rc = l.EnsureAttached(); rc != CUDA_SUCCESS) return rc;
  auto create = [&] {
    return GS_REAL(cuMipmappedArrayCreate, pHandle, pMipmappedArrayDesc, numMipmapLevels);
  };
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0) {
    return create();
  }
  uintptr_t ctx = 0;
  const int device = l.CurrentGroupDevice(&ctx);
  const uint64_t bytes = l.Rounded(ArrayBytes(*pMipmappedArrayDesc, numMipmapLevels));
  const CUresult rc = Reserved(l, device, bytes, ctx, Resource::kMipmappedArray, create,
                               [&] { return reinterpret_cast<uint64_t>(*pHandle); });
  if (rc == CUDA_SUCCESS && device >= 0) {
    TrueUpArray(l, Resource::kMipmappedArray, *pHandle,
                l.cuda().cuMipmappedArrayGetMemoryRequirements);
  }
  return rc;
}

// ---- frees ----

GS_HOT CUresult cuMemFree_v2(ProcessState& l, CUdeviceptr dptr) noexcept {
  return FreedPointer(l, GS_REAL(cuMemFree_v2, dptr), dptr);
}
CUresult cuMemFreeAsync(ProcessState& l, CUdeviceptr dptr, CUstream hStream) noexcept {
  return FreedPointer(l, GS_REAL(cuMemFreeAsync, dptr, hStream), dptr);
}
CUresult cuMemFreeAsync_ptsz(ProcessState& l, CUdeviceptr dptr, CUstream hStream) noexcept {
  return FreedPointer(l, GS_REAL(cuMemFreeAsync_ptsz, dptr, hStream), dptr);
}
CUresult cuMemRelease(ProcessState& l, CUmemGenericAllocationHandle handle) noexcept {
  return Freed(l, GS_REAL(cuMemRelease, handle), Resource::kVmmHandle, handle);
}
CUresult cuArrayDestroy(ProcessState& l, CUarray hArray) noexcept {
  return Freed(l, GS_REAL(cuArrayDestroy, hArray), Resource::kArray,
               reinterpret_cast<uint64_t>(hArray));
}
CUresult cuMipmappedArrayDestroy(ProcessState& l, CUmipmappedArray hMipmappedArray) noexcept {
  return Freed(l, GS_REAL(cuMipmappedArrayDestroy, hMipmappedArray), Resource::kMipmappedArray,
               reinterpret_cast<uint64_t>(hMipmappedArray));
}

// ---- launches: paced by the group's compute budget (compute_gate.h) ----

#define GS_PACED(stream, per_thread, name, ...) \
  l.compute_gate().Paced(stream, per_thread, [&] { return GS_REAL(name, __VA_ARGS__); })

CUresult cuLaunchKernel(ProcessState& l, CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra) noexcept {
  return GS_PACED(hStream, false, cuLaunchKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX,
                  blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}
CUresult cuLaunchKernel_ptsz(ProcessState& l, CUfunction f, unsigned int gridDimX,
                             unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
                             unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                             void** extra) noexcept {
  return GS_PACED(hStream, true, cuLaunchKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX,
                  blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}
CUresult cuLaunchKernelEx(ProcessState& l, const CUlaunchConfig* config, CUfunction f,
                          void** kernelParams, void** extra) noexcept {
  return GS_PACED(config != nullptr ? config->hStream : nullptr, false, cuLaunchKernelEx, config, f,
                  kernelParams, extra);
}
CUresult cuLaunchKernelEx_ptsz(ProcessState& l, const CUlaunchConfig* config, CUfunction f,
                               void** kernelParams, void** extra) noexcept {
  return GS_PACED(config != nullptr ? config->hStream : nullptr, true, cuLaunchKernelEx_ptsz,
                  config, f, kernelParams, extra);
}
CUresult cuLaunchCooperativeKernel(ProcessState& l, CUfunction f, unsigned int gridDimX,
                                   unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY,
                                   unsigned int blockDimZ, unsigned int sharedMemBytes,
                                   CUstream hStream, void** kernelParams) noexcept {
  return GS_PACED(hStream, false, cuLaunchCooperativeKernel, f, gridDimX, gridDimY, gridDimZ,
                  blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
}
CUresult cuLaunchCooperativeKernel_ptsz(ProcessState& l, CUfunction f, unsigned int gridDimX,
                                        unsigned int gridDimY, unsigned int gridDimZ,
                                        unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes,
                                        CUstream hStream, void** kernelParams) noexcept {
  return GS_PACED(hStream, true, cuLaunchCooperativeKernel_ptsz, f, gridDimX, gridDimY, gridDimZ,
                  blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
}
// A graph launch: paced, then its graph memory charged (graph_memory_charges.h).
CUresult cuGraphLaunch(ProcessState& l, CUgraphExec hGraphExec, CUstream hStream) noexcept {
  return l.compute_gate().Paced(hStream, false, [&] {
    return l.graph_memory().Run(reinterpret_cast<uint64_t>(hGraphExec),
                                [&] { return GS_REAL(cuGraphLaunch, hGraphExec, hStream); });
  });
}
CUresult cuGraphLaunch_ptsz(ProcessState& l, CUgraphExec hGraphExec, CUstream hStream) noexcept {
  return l.compute_gate().Paced(hStream, true, [&] {
    return l.graph_memory().Run(reinterpret_cast<uint64_t>(hGraphExec),
                                [&] { return GS_REAL(cuGraphLaunch_ptsz, hGraphExec, hStream); });
  });
}

#undef GS_PACED

// ---- graph memory (graph_memory_charges.h) ----

CUresult cuGraphInstantiate(ProcessState& l, CUgraphExec* phGraphExec, CUgraph hGraph,
                            CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) noexcept {
  return Instantiated(
      l, GS_REAL(cuGraphInstantiate, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
      phGraphExec, hGraph);
}
CUresult cuGraphInstantiate_v2(ProcessState& l, CUgraphExec* phGraphExec, CUgraph hGraph,
                               CUgraphNode* phErrorNode, char* logBuffer,
                               size_t bufferSize) noexcept {
  return Instantiated(
      l, GS_REAL(cuGraphInstantiate_v2, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
      phGraphExec, hGraph);
}
CUresult cuGraphInstantiateWithFlags(ProcessState& l, CUgraphExec* phGraphExec, CUgraph hGraph,
                                     unsigned long long flags) noexcept {
  return Instantiated(l, GS_REAL(cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags),
                      phGraphExec, hGraph);
}
CUresult cuGraphInstantiateWithParams(ProcessState& l, CUgraphExec* phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) noexcept {
  return InstantiateWithParams(l, phGraphExec, hGraph, instantiateParams, [&](auto* params) {
    return GS_REAL(cuGraphInstantiateWithParams, phGraphExec, hGraph, params);
  });
}
CUresult cuGraphInstantiateWithParams_ptsz(
    ProcessState& l, CUgraphExec* phGraphExec, CUgraph hGraph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) noexcept {
  return InstantiateWithParams(l, phGraphExec, hGraph, instantiateParams, [&](auto* params) {
    return GS_REAL(cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph, params);
  });
}
// An upload maps the graph's memory as its first launch would.
CUresult cuGraphUpload(ProcessState& l, CUgraphExec hGraphExec, CUstream hStream) noexcept {
  return l.graph_memory().Run(reinterpret_cast<uint64_t>(hGraphExec),
                              [&] { return GS_REAL(cuGraphUpload, hGraphExec, hStream); });
}
CUresult cuGraphUpload_ptsz(ProcessState& l, CUgraphExec hGraphExec, CUstream hStream) noexcept {
  return l.graph_memory().Run(reinterpret_cast<uint64_t>(hGraphExec),
                              [&] { return GS_REAL(cuGraphUpload_ptsz, hGraphExec, hStream); });
}
CUresult cuGraphExecDestroy(ProcessState& l, CUgraphExec hGraphExec) noexcept {
  const CUresult rc = GS_REAL(cuGraphExecDestroy, hGraphExec);
  if (rc == CUDA_SUCCESS) {
    l.graph_memory().Destroyed(reinterpret_cast<uint64_t>(hGraphExec));
  }
  return rc;
}
CUresult cuDeviceGraphMemTrim(ProcessState& l, CUdevice device) noexcept {
  const CUresult rc = GS_REAL(cuDeviceGraphMemTrim, device);
  if (rc == CUDA_SUCCESS) l.graph_memory().Trimmed(device);
  return rc;
}

// ---- streams: a destroyed stream's handle may come back for another device ----

CUresult cuStreamDestroy(ProcessState& l, CUstream hStream) noexcept {
  l.compute_gate().ForgetStream(hStream);
  return GS_REAL(cuStreamDestroy, hStream);
}
CUresult cuStreamDestroy_v2(ProcessState& l, CUstream hStream) noexcept {
  l.compute_gate().ForgetStream(hStream);
  return GS_REAL(cuStreamDestroy_v2, hStream);
}

// ---- stream capture: the open captures counted (stream_captures.h) ----

namespace {

// The stream handle the driver means: stream 0 of a _ptsz entry point is the
// calling thread's default stream.
CUstream Effective(CUstream stream, bool per_thread) {
  return stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
}

CUresult EndCapture(ProcessState& l, CUstream stream, bool per_thread, auto&& end) {
  return l.captures().End(Effective(stream, per_thread), l.cuda().cuStreamIsCapturing, end);
}

}  // namespace

#define GS_BEGIN_CAPTURE(name, ...) l.captures().Begin([&] { return GS_REAL(name, __VA_ARGS__); })

CUresult cuStreamBeginCapture(ProcessState& l, CUstream hStream) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCapture, hStream);
}
CUresult cuStreamBeginCapture_ptsz(ProcessState& l, CUstream hStream) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCapture_ptsz, hStream);
}
CUresult cuStreamBeginCapture_v2(ProcessState& l, CUstream hStream,
                                 CUstreamCaptureMode mode) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCapture_v2, hStream, mode);
}
CUresult cuStreamBeginCapture_v2_ptsz(ProcessState& l, CUstream hStream,
                                      CUstreamCaptureMode mode) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz, hStream, mode);
}
CUresult cuStreamBeginCaptureToGraph(ProcessState& l, CUstream hStream, CUgraph hGraph,
                                     const CUgraphNode* dependencies,
                                     const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph, hStream, hGraph, dependencies,
                          dependencyData, numDependencies, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(ProcessState& l, CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependencyData,
                                          size_t numDependencies,
                                          CUstreamCaptureMode mode) noexcept {
  return GS_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph_ptsz, hStream, hGraph, dependencies,
                          dependencyData, numDependencies, mode);
}

#undef GS_BEGIN_CAPTURE

CUresult cuStreamEndCapture(ProcessState& l, CUstream hStream, CUgraph* phGraph) noexcept {
  return EndCapture(l, hStream, false,
                    [&] { return GS_REAL(cuStreamEndCapture, hStream, phGraph); });
}
CUresult cuStreamEndCapture_ptsz(ProcessState& l, CUstream hStream, CUgraph* phGraph) noexcept {
  return EndCapture(l, hStream, true,
                    [&] { return GS_REAL(cuStreamEndCapture_ptsz, hStream, phGraph); });
}

}  // namespace gpuslice::limiter::hooks
