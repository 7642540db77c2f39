// Entry points: every way a program gets device memory (DESIGN.md section 2
// lists what the limiter counts), host memory, and memory queries.
//
// Device memory is host memory (mmap, MAP_NORESERVE) so that copies work; the
// simulator only accounts for it. Virtual memory management (cuMemCreate and
// friends) uses a memfd per physical allocation so that one allocation can be
// mapped at several addresses, as on hardware.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "cuda_abi/array_format.h"
#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

CUresult AllocateCurrent(CUdeviceptr* dptr, uint64_t bytes, bool managed = false) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  return AllocateDevice(CurrentHandle(), bytes, 0, dptr, managed);
}

// The device's default pool, created on first use. REQUIRES: D().mu held.
uint64_t DefaultPoolLocked(int dev) {
  Driver& d = D();
  if (d.default_pool[dev] == 0) {
    d.default_pool[dev] = AddPool(dev, /*is_default=*/true);
    if (d.current_pool[dev] == 0) d.current_pool[dev] = d.default_pool[dev];
  }
  return d.default_pool[dev];
}

// A stream-ordered allocation from `pool`, or (pool 0) from the device's
// current pool, which is the default pool unless cuDeviceSetMemPool chose
// another. The default pool exists from the first allocation on, so its
// reserved/used attributes count every allocation made from it, whether or
// not it had been queried before (as on hardware, where the pool is created
// with the context).
CUresult AllocateOnStream(CUdeviceptr* dptr, uint64_t bytes, CUstream stream, uint64_t pool) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  const uint64_t ctx_handle = st != nullptr ? st->ctx : CurrentHandle();
  if (st != nullptr) {
    if (const uint64_t graph = st->capture_graph.load(std::memory_order_acquire); graph != 0) {
      // Captured: an allocation node of the capture graph (on the pool's device).
      int device = ctx->device;
      if (pool != 0) {
        if (const Pool* pl = D().pools.Get(pool)) device = pl->device;
      }
      return AddGraphAlloc(graph, device, bytes, dptr);
    }
  }
  if (pool == 0) {
    std::lock_guard lock(D().mu);
    DefaultPoolLocked(ctx->device);  // sets the current pool on first use
    pool = D().current_pool[ctx->device];
  }
  return AllocateFromPool(ctx_handle, bytes, pool, dptr);
}

CUresult FreeChecked(CUdeviceptr dptr) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == 0) return CUDA_SUCCESS;
  return FreeDevice(dptr);
}

// Host memory the driver hands out (page-locked on hardware): mapped here,
// registered so that copies and cuMemFreeHost recognise it, never accounted
// against a device.
CUresult AllocateHost(void** pp, size_t bytes, unsigned flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  if (bytes == 0) {
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Range r;
  r.bytes = bytes;
  r.mapped = mapped;
  r.kind = RangeKind::kHost;
  r.flags = flags;
  std::unique_lock lock(D().ranges_mu);
  D().ranges[reinterpret_cast<uintptr_t>(p)] = r;
  *pp = p;
  return CUDA_SUCCESS;
}

// Bytes of one array level; 0 when the descriptor is invalid.
uint64_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  const size_t element = cuda_abi::ArrayFormatBytes(d.Format);  // 0: not simulated
  if (element == 0 || d.Width == 0) return 0;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return 0;
  const uint64_t w = d.Width, h = std::max<size_t>(d.Height, 1), z = std::max<size_t>(d.Depth, 1);
  if (w > (1u << 20) || h > (1u << 20) || z > (1u << 20)) return 0;
  const uint64_t texels = w * h;
  if (texels > (uint64_t{1} << 40) / z) return 0;
  return texels * z * element * d.NumChannels;
}

CUresult CreateArray(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned levels, bool mipmapped,
                     uint64_t* handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  uint64_t bytes = 0;
  CUDA_ARRAY3D_DESCRIPTOR level = desc;
  for (unsigned i = 0; i < levels; ++i) {
    const uint64_t b = ArrayBytes(level);
    if (b == 0) return CUDA_ERROR_INVALID_VALUE;
    bytes += b;
    level.Width = std::max<size_t>(level.Width / 2, 1);
    if (level.Height > 0) level.Height = std::max<size_t>(level.Height / 2, 1);
    if (level.Depth > 0) level.Depth = std::max<size_t>(level.Depth / 2, 1);
  }
  if (Status s = D().gpu->Allocate(ctx->id, bytes); !s.ok()) return FromStatus(s);
  Array a;
  a.ctx = CurrentHandle();
  a.cid = ctx->id;
  a.bytes = bytes;
  a.desc = desc;
  a.levels = levels;
  *handle = mipmapped ? D().mipmaps.Add(std::move(a)) : D().arrays.Add(std::move(a));
  if (*handle == 0) {
    D().gpu->Free(ctx->id, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

template <typename Table>
CUresult DestroyArray(Table& table, uint64_t handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Array a;
  if (!table.Remove(handle, &a)) return CUDA_ERROR_INVALID_HANDLE;
  if (D().contexts.Get(a.ctx) != nullptr) D().gpu->Free(a.cid, a.bytes);
  return CUDA_SUCCESS;
}

// The physical allocation's accounting ends when its last reference goes.
void DropPhysicalRef(uint64_t handle) {
  Physical* p = D().physicals.Get(handle);
  if (p == nullptr) return;
  bool last;
  {
    std::lock_guard lock(D().mu);
    last = --p->refs == 0;
  }
  if (!last) return;
  Physical gone;
  if (!D().physicals.Remove(handle, &gone)) return;
  close(gone.fd);
  if (D().contexts.Get(gone.ctx) != nullptr) D().gpu->Free(gone.cid, gone.bytes);
}

bool ValidDeviceLocation(const CUmemLocation& loc) {
  return loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= 0 && loc.id < VisibleCount();
}

// The live pool `pool` names (not one destroyed with allocations outstanding).
Pool* PoolOf(CUmemoryPool pool) {
  Pool* p = D().pools.Get(Raw(pool));
  if (p == nullptr) return nullptr;
  std::lock_guard lock(D().pools_mu);
  return p->destroyed ? nullptr : p;
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

// ---- device allocations ----------------------------------------------------------------

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return AllocateCurrent(dptr, bytes);
}

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                      unsigned int element) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (element != 4 && element != 8 && element != 16) return CUDA_ERROR_INVALID_VALUE;
  if (width > (uint64_t{1} << 40) || height > (uint64_t{1} << 40) / width) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t p = (width + 511) / 512 * 512;  // rows aligned like the hardware's texture pitch
  CUresult rc = AllocateCurrent(dptr, uint64_t{p} * height);
  if (rc == CUDA_SUCCESS) *pitch = p;
  return rc;
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  }
  // Managed memory is not counted against the r615 cgroup limits (documented).
  return AllocateCurrent(dptr, bytes, /*managed=*/true);
}

GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocateOnStream(dptr, bytes, stream, 0);
}
GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocateOnStream(dptr, bytes, stream, 0);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                           CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (PoolOf(pool) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocateOnStream(dptr, bytes, stream, Raw(pool));
}
GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                CUstream stream) {
  return cuMemAllocFromPoolAsync(dptr, bytes, pool, stream);
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return FreeChecked(dptr); }

// Frees at once: the simulated kernels never touch memory, so there is no
// stream-ordered use to wait for.
GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (st != nullptr) {
    if (const uint64_t graph = st->capture_graph.load(std::memory_order_acquire); graph != 0) {
      return AddGraphFree(graph, dptr);  // captured: a free node
    }
  }
  return FreeChecked(dptr);
}
GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return cuMemFreeAsync(dptr, stream);
}

GS_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  std::shared_lock lock(D().ranges_mu);
  auto it = D().ranges.upper_bound(static_cast<uintptr_t>(dptr));
  if (it == D().ranges.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr - it->first >= it->second.bytes) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.bytes;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (free_bytes == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  uint64_t f = 0, t = 0;
  D().gpu->MemoryInfo(Visible(ctx->device).device, &f, &t, Visible(ctx->device).lane);
  *free_bytes = f;
  *total = t;
  return CUDA_SUCCESS;
}

// ---- host memory -----------------------------------------------------------------------

GS_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return AllocateHost(pp, bytes, 0); }

GS_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  constexpr unsigned kKnown =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((flags & ~kKnown) != 0) return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  return AllocateHost(pp, bytes, flags);
}

GS_EXPORT CUresult cuMemFreeHost(void* p) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (p == nullptr) return CUDA_SUCCESS;
  Range r;
  {
    std::unique_lock lock(D().ranges_mu);
    auto it = D().ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == D().ranges.end() || it->second.kind != RangeKind::kHost) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    r = it->second;
    D().ranges.erase(it);
  }
  munmap(p, r.mapped);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!IsRegistered(reinterpret_cast<uintptr_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(D().ranges_mu);
  auto it = D().ranges.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == D().ranges.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (it->second.kind != RangeKind::kHost && it->second.kind != RangeKind::kRegistered) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reinterpret_cast<uintptr_t>(p) - it->first >= it->second.bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *flags = it->second.flags;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  const auto base = reinterpret_cast<uintptr_t>(p);
  std::unique_lock lock(D().ranges_mu);
  auto it = D().ranges.lower_bound(base);
  if ((it != D().ranges.end() && it->first < base + bytes) ||
      (it != D().ranges.begin() && std::prev(it)->first + std::prev(it)->second.bytes > base)) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  Range r;
  r.bytes = bytes;
  r.mapped = 0;
  r.kind = RangeKind::kRegistered;
  r.flags = flags;
  D().ranges[base] = r;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemHostUnregister(void* p) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  std::unique_lock lock(D().ranges_mu);
  auto it = D().ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == D().ranges.end() || it->second.kind != RangeKind::kRegistered) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  D().ranges.erase(it);
  return CUDA_SUCCESS;
}

// ---- virtual memory management --------------------------------------------------------

GS_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                 const CUmemAllocationProp* prop,
                                                 CUmemAllocationGranularity_flags option) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !ValidDeviceLocation(prop->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = D().gpu->params().granularity;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                               const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !ValidDeviceLocation(prop->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (size % D().gpu->params().granularity != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t ctx_handle = 0;
  if (CUresult rc = ContextForDevice(prop->location.id, &ctx_handle); rc != CUDA_SUCCESS) {
    return rc;
  }
  Context* ctx = D().contexts.Get(ctx_handle);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (gpuslice::Status s = D().gpu->Allocate(ctx->id, size); !s.ok()) return FromStatus(s);
  const int fd = memfd_create("gpuslice-sim-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    D().gpu->Free(ctx->id, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Physical p;
  p.ctx = ctx_handle;
  p.cid = ctx->id;
  p.device = prop->location.id;
  p.bytes = size;
  p.fd = fd;
  p.refs = 1;
  p.prop = *prop;
  const uint64_t h = D().physicals.Add(std::move(p));
  if (h == 0) {
    close(fd);
    D().gpu->Free(ctx->id, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = h;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().physicals.Get(handle) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  DropPhysicalRef(handle);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                          CUmemGenericAllocationHandle handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Physical* p = D().physicals.Get(handle);
  if (prop == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = p->prop;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                       CUdeviceptr addr, unsigned long long flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const uint64_t g = D().gpu->params().granularity;
  if (ptr == nullptr || size == 0 || size % g != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = g;
  if ((alignment & (alignment - 1)) != 0 || alignment > (uint64_t{1} << 40)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  (void)addr;  // a hint; the simulator places reservations where mmap does
  // Over-reserve, then trim to an aligned window.
  const size_t span = size + alignment;
  void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + size;
  if (start + span > end) munmap(HostPtr(end), start + span - end);
  std::lock_guard lock(D().mu);
  D().reservations[aligned] = size;
  *ptr = aligned;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  {
    std::lock_guard lock(D().mu);
    auto it = D().reservations.find(static_cast<uintptr_t>(ptr));
    if (it == D().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    D().reservations.erase(it);
  }
  {
    // Mappings still inside are dropped with it (the driver requires them
    // unmapped first; being lenient here cannot leak accounting).
    std::vector<uint64_t> physicals;
    {
      std::unique_lock lock(D().ranges_mu);
      auto it = D().ranges.lower_bound(static_cast<uintptr_t>(ptr));
      while (it != D().ranges.end() && it->first < ptr + size) {
        if (it->second.kind == RangeKind::kMapped) physicals.push_back(it->second.physical);
        it = it->second.kind == RangeKind::kMapped ? D().ranges.erase(it) : std::next(it);
      }
    }
    for (uint64_t p : physicals) DropPhysicalRef(p);
  }
  munmap(HostPtr(ptr), size);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Physical* p = D().physicals.Get(handle);
  if (p == nullptr || flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t g = D().gpu->params().granularity;
  if (offset % g != 0 || size % g != 0 || ptr % g != 0 || offset > p->bytes ||
      size > p->bytes - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    std::lock_guard lock(D().mu);
    auto it = D().reservations.upper_bound(static_cast<uintptr_t>(ptr));
    if (it == D().reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (ptr < it->first || ptr + size > it->first + it->second) return CUDA_ERROR_INVALID_VALUE;
  }
  std::unique_lock lock(D().ranges_mu);
  auto next = D().ranges.lower_bound(static_cast<uintptr_t>(ptr));
  if (next != D().ranges.end() && next->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (next != D().ranges.begin() && std::prev(next)->first + std::prev(next)->second.bytes > ptr) {
    return CUDA_ERROR_ALREADY_MAPPED;
  }
  void* m = mmap(HostPtr(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd,
                 static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Range r;
  r.bytes = size;
  r.mapped = size;
  r.kind = RangeKind::kMapped;
  r.ctx = p->ctx;
  r.cid = p->cid;
  r.physical = handle;
  D().ranges[static_cast<uintptr_t>(ptr)] = r;
  {
    std::lock_guard dl(D().mu);
    ++p->refs;
  }
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> physicals;
  {
    std::unique_lock lock(D().ranges_mu);
    auto it = D().ranges.lower_bound(static_cast<uintptr_t>(ptr));
    if (it == D().ranges.end() || it->first != ptr || it->second.kind != RangeKind::kMapped) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    while (it != D().ranges.end() && it->first < ptr + size &&
           it->second.kind == RangeKind::kMapped) {
      physicals.push_back(it->second.physical);
      it = D().ranges.erase(it);
    }
    // Back to reserved-but-inaccessible address space. Should that fail, the
    // pages stay mapped until cuMemAddressFree unmaps the reservation; they are
    // out of the range table already, so no driver call reaches them.
    (void)mmap(HostPtr(ptr), size, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  }
  for (uint64_t p : physicals) DropPhysicalRef(p);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                  size_t count) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (!ValidDeviceLocation(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
  }
  // Mappings are readable and writable from creation; only check the range.
  auto p = static_cast<uintptr_t>(ptr);
  const uintptr_t end = p + size;
  std::shared_lock lock(D().ranges_mu);
  while (p < end) {
    auto it = D().ranges.find(p);
    if (it == D().ranges.end() || it->second.kind != RangeKind::kMapped) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    p += it->second.bytes;
  }
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t physical = 0;
  {
    std::shared_lock lock(D().ranges_mu);
    auto it = D().ranges.find(reinterpret_cast<uintptr_t>(addr));
    if (it == D().ranges.end() || it->second.kind != RangeKind::kMapped) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    physical = it->second.physical;
  }
  Physical* p = D().physicals.Get(physical);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  ++p->refs;
  *handle = physical;
  return CUDA_SUCCESS;
}

// ---- arrays -----------------------------------------------------------------------------

GS_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = desc->Width;
  d3.Height = desc->Height;
  d3.Format = desc->Format;
  d3.NumChannels = desc->NumChannels;
  uint64_t h = 0;
  CUresult rc = CreateArray(d3, 1, false, &h);
  if (rc == CUDA_SUCCESS) *handle = AsHandle<CUarray>(h);
  return rc;
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t h = 0;
  CUresult rc = CreateArray(*desc, 1, false, &h);
  if (rc == CUDA_SUCCESS) *handle = AsHandle<CUarray>(h);
  return rc;
}

GS_EXPORT CUresult cuArrayDestroy(CUarray handle) { return DestroyArray(D().arrays, Raw(handle)); }

GS_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* desc, CUarray handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Array* a = D().arrays.Get(Raw(handle));
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  desc->Width = a->desc.Width;
  desc->Height = a->desc.Height;
  desc->Format = a->desc.Format;
  desc->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Array* a = D().arrays.Get(Raw(handle));
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *desc = a->desc;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                          const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                          unsigned int levels) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr || desc == nullptr || levels == 0 || levels > 32) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t h = 0;
  CUresult rc = CreateArray(*desc, levels, true, &h);
  if (rc == CUDA_SUCCESS) *handle = AsHandle<CUmipmappedArray>(h);
  return rc;
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  return DestroyArray(D().mipmaps, Raw(handle));
}

// ---- memory pools (sim/core/pool_model.h; docs/sim.md "Memory pools") -------------------

GS_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  const uint64_t h = DefaultPoolLocked(dev);
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = AsHandle<CUmemoryPool>(h);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  DefaultPoolLocked(dev);
  if (D().current_pool[dev] == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = AsHandle<CUmemoryPool>(D().current_pool[dev]);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  Pool* p = PoolOf(pool);
  if (p == nullptr || p->device != dev) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  D().current_pool[dev] = Raw(pool);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || !ValidDeviceLocation(props->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t h = AddPool(props->location.id, /*is_default=*/false, props->maxSize);
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = AsHandle<CUmemoryPool>(h);
  return CUDA_SUCCESS;
}

// As documented: a pool with allocations outstanding is released once the
// last of them is freed (FreeDevice); its handle is invalid at once.
GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Pool* p = PoolOf(pool);
  if (p == nullptr || p->is_default) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(D().mu);
    if (D().current_pool[p->device] == Raw(pool)) {
      D().current_pool[p->device] = D().default_pool[p->device];
    }
  }
  bool outstanding;
  {
    std::lock_guard lock(D().pools_mu);
    outstanding = p->model.used() > 0;
    if (outstanding) {
      p->destroyed = true;
    } else {
      ReleasePoolBacking(*p, p->model.ReleaseAll());
    }
  }
  if (!outstanding) D().pools.Remove(Raw(pool));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Pool* p = PoolOf(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().pools_mu);
  ReleasePoolBacking(*p, p->model.TrimTo(min_bytes_to_keep));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Pool* p = PoolOf(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().pools_mu);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->model.set_release_threshold(*static_cast<cuuint64_t*>(value));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // Only 0 is accepted: it resets the watermark to the current value.
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        p->model.ResetReservedHigh();
      } else {
        p->model.ResetUsedHigh();
      }
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

GS_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Pool* p = PoolOf(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().pools_mu);
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = p->model.release_threshold();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = p->model.reserved();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *out = p->model.reserved_high();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = p->model.used();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *out = p->model.used_high();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
