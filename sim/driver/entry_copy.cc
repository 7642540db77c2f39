// Entry points: copies and sets, in every plain, _v2, Async, _ptds and _ptsz
// form. Device memory is host-visible (entry_memory.cc), so a copy is a real
// memmove once both sides are checked: a device side must lie inside memory
// the driver handed out (else CUDA_ERROR_INVALID_VALUE, as the driver says,
// instead of a crash); a host side must be non-null; a unified pointer is
// checked as device memory when it is some, else taken as host memory.
//
// Ordering: synchronous copies that involve host memory first wait for the
// context's queued kernels, as the hardware's do (a device-to-host copy after
// a kernel returns after the kernel). Async copies and sets happen at once:
// simulated kernels never touch memory, so nothing can observe the order.
// Arrays have no backing in the simulator: copies to or from them fail with
// CUDA_ERROR_NOT_SUPPORTED.
#include <algorithm>
#include <cstring>

#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

enum class Side { kHost, kDevice, kUnified };

bool SideOk(uintptr_t p, uint64_t n, Side side) {
  if (n == 0) return true;
  if (p == 0) return false;
  if (p + n < p) return false;  // wraps
  switch (side) {
    case Side::kHost:
      return true;
    case Side::kDevice:
      return InRegisteredRange(p, n);
    case Side::kUnified:
      return IsRegistered(p) ? InRegisteredRange(p, n) : true;
  }
  return false;
}

// Before a copy: the context is there, the stream valid, and a synchronous
// copy involving the host waits for queued work.
CUresult Prepare(bool async, CUstream stream, bool host_involved) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(async ? stream : nullptr, &ctx, &st); rc != CUDA_SUCCESS) {
    return rc;
  }
  if (!async && host_involved) return WaitContext(*ctx);
  return CUDA_SUCCESS;
}

CUresult Copy(uintptr_t dst, Side dside, uintptr_t src, Side sside, uint64_t n, bool async,
              CUstream stream) {
  const bool host = dside != Side::kDevice || sside != Side::kDevice;
  if (CUresult rc = Prepare(async, stream, host); rc != CUDA_SUCCESS) return rc;
  if (!SideOk(dst, n, dside) || !SideOk(src, n, sside)) return CUDA_ERROR_INVALID_VALUE;
  if (n > 0) memmove(HostPtr(dst), HostPtr(src), n);
  return CUDA_SUCCESS;
}

// One side of a 2D/3D copy: where it starts and how it is checked.
struct Pitched {
  uintptr_t base;
  Side side;
  uint64_t pitch;
  uint64_t height;  // rows per slice (3D)
};

CUresult SideOf(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array,
                Pitched* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      out->base = reinterpret_cast<uintptr_t>(host);
      out->side = Side::kHost;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
      out->base = static_cast<uintptr_t>(device);
      out->side = Side::kDevice;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      out->base = static_cast<uintptr_t>(device);
      out->side = Side::kUnified;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
      return array == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Copies `depth` slices of `height` rows of `width` bytes between two pitched
// layouts, after checking each side's whole extent.
CUresult CopyPitched(const Pitched& dst, uint64_t dst_offset, const Pitched& src,
                     uint64_t src_offset, uint64_t width, uint64_t height, uint64_t depth,
                     bool async, CUstream stream) {
  const bool host = dst.side != Side::kDevice || src.side != Side::kDevice;
  if (CUresult rc = Prepare(async, stream, host); rc != CUDA_SUCCESS) return rc;
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  const uint64_t kMax = uint64_t{1} << 46;
  if (width > kMax || height > kMax || depth > kMax) return CUDA_ERROR_INVALID_VALUE;
  for (const Pitched* p : {&dst, &src}) {
    if ((height > 1 || depth > 1) && p->pitch < width) return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && p->height < height) return CUDA_ERROR_INVALID_VALUE;
    if (p->pitch > kMax || p->height > kMax) return CUDA_ERROR_INVALID_VALUE;
  }
  auto extent = [&](const Pitched& p) {
    return (depth - 1) * p.pitch * p.height + (height - 1) * p.pitch + width;
  };
  if (!SideOk(dst.base + dst_offset, extent(dst), dst.side) ||
      !SideOk(src.base + src_offset, extent(src), src.side)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (uint64_t z = 0; z < depth; ++z) {
    for (uint64_t y = 0; y < height; ++y) {
      memmove(HostPtr(dst.base + dst_offset + z * dst.pitch * dst.height + y * dst.pitch),
              HostPtr(src.base + src_offset + z * src.pitch * src.height + y * src.pitch), width);
    }
  }
  return CUDA_SUCCESS;
}

CUresult Copy2D(const CUDA_MEMCPY2D* c, bool async, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Pitched dst{}, src{};
  if (CUresult rc = SideOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, &dst);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  if (CUresult rc = SideOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, &src);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  dst.pitch = c->dstPitch;
  src.pitch = c->srcPitch;
  dst.height = src.height = c->Height;
  return CopyPitched(dst, uint64_t{c->dstY} * c->dstPitch + c->dstXInBytes, src,
                     uint64_t{c->srcY} * c->srcPitch + c->srcXInBytes, c->WidthInBytes, c->Height,
                     1, async, stream);
}

CUresult Copy3D(const CUDA_MEMCPY3D* c, bool async, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (c == nullptr || c->reserved0 != nullptr || c->reserved1 != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Pitched dst{}, src{};
  if (CUresult rc = SideOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, &dst);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  if (CUresult rc = SideOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, &src);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  dst.pitch = c->dstPitch;
  src.pitch = c->srcPitch;
  dst.height = std::max<uint64_t>(c->dstHeight, c->Depth > 1 ? 0 : c->Height);
  src.height = std::max<uint64_t>(c->srcHeight, c->Depth > 1 ? 0 : c->Height);
  if (dst.height > uint64_t{1} << 40 || src.height > uint64_t{1} << 40) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t dst_offset =
      (uint64_t{c->dstZ} * dst.height + c->dstY) * c->dstPitch + c->dstXInBytes;
  const uint64_t src_offset =
      (uint64_t{c->srcZ} * src.height + c->srcY) * c->srcPitch + c->srcXInBytes;
  return CopyPitched(dst, dst_offset, src, src_offset, c->WidthInBytes, c->Height, c->Depth, async,
                     stream);
}

CUresult CopyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                  bool async, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().contexts.Get(Raw(dst_ctx)) == nullptr || D().contexts.Get(Raw(src_ctx)) == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return Copy(dst, Side::kDevice, src, Side::kDevice, n, async, stream);
}

// Sets `height` rows of `width` elements of T, `pitch` bytes apart.
template <typename T>
CUresult Set2D(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height, bool async,
               CUstream stream) {
  if (CUresult rc = Prepare(async, stream, false); rc != CUDA_SUCCESS) return rc;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0 || (height > 1 && pitch % sizeof(T) != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t kMax = uint64_t{1} << 46;
  if (width > kMax || height > kMax || pitch > kMax) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t row = uint64_t{width} * sizeof(T);
  if (height > 1 && pitch < row) return CUDA_ERROR_INVALID_VALUE;
  if (!SideOk(dst, (height - 1) * uint64_t{pitch} + row, Side::kUnified) || !IsRegistered(dst)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t y = 0; y < height; ++y) {
    T* p = static_cast<T*>(HostPtr(dst + y * pitch));
    if constexpr (sizeof(T) == 1) {
      memset(p, value, width);
    } else {
      std::fill_n(p, width, value);
    }
  }
  return CUDA_SUCCESS;
}

template <typename T>
CUresult Set(CUdeviceptr dst, T value, size_t n, bool async, CUstream stream) {
  return Set2D<T>(dst, n * sizeof(T), value, n, 1, async, stream);
}

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
uintptr_t Addr(CUdeviceptr p) { return static_cast<uintptr_t>(p); }

constexpr bool kSync = false;
constexpr bool kAsync = true;
constexpr Side H = Side::kHost;
constexpr Side Dv = Side::kDevice;
constexpr Side U = Side::kUnified;

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

// ---- linear copies ------------------------------------------------------------------------

#define GS_COPY_SYNC(name, dst_t, dst_side, src_t, src_side)                  \
  GS_EXPORT CUresult name(dst_t dst, src_t src, size_t n) {                   \
    return Copy(Addr(dst), dst_side, Addr(src), src_side, n, kSync, nullptr); \
  }
#define GS_COPY_ASYNC(name, dst_t, dst_side, src_t, src_side)                 \
  GS_EXPORT CUresult name(dst_t dst, src_t src, size_t n, CUstream stream) {  \
    return Copy(Addr(dst), dst_side, Addr(src), src_side, n, kAsync, stream); \
  }

GS_COPY_SYNC(cuMemcpy, CUdeviceptr, U, CUdeviceptr, U)
GS_COPY_SYNC(cuMemcpy_ptds, CUdeviceptr, U, CUdeviceptr, U)
GS_COPY_SYNC(cuMemcpyHtoD_v2, CUdeviceptr, Dv, const void*, H)
GS_COPY_SYNC(cuMemcpyHtoD_v2_ptds, CUdeviceptr, Dv, const void*, H)
GS_COPY_SYNC(cuMemcpyDtoH_v2, void*, H, CUdeviceptr, Dv)
GS_COPY_SYNC(cuMemcpyDtoH_v2_ptds, void*, H, CUdeviceptr, Dv)
GS_COPY_SYNC(cuMemcpyDtoD_v2, CUdeviceptr, Dv, CUdeviceptr, Dv)
GS_COPY_SYNC(cuMemcpyDtoD_v2_ptds, CUdeviceptr, Dv, CUdeviceptr, Dv)
GS_COPY_ASYNC(cuMemcpyAsync, CUdeviceptr, U, CUdeviceptr, U)
GS_COPY_ASYNC(cuMemcpyAsync_ptsz, CUdeviceptr, U, CUdeviceptr, U)
GS_COPY_ASYNC(cuMemcpyHtoDAsync_v2, CUdeviceptr, Dv, const void*, H)
GS_COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, Dv, const void*, H)
GS_COPY_ASYNC(cuMemcpyDtoHAsync_v2, void*, H, CUdeviceptr, Dv)
GS_COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, void*, H, CUdeviceptr, Dv)
GS_COPY_ASYNC(cuMemcpyDtoDAsync_v2, CUdeviceptr, Dv, CUdeviceptr, Dv)
GS_COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, Dv, CUdeviceptr, Dv)

#undef GS_COPY_SYNC
#undef GS_COPY_ASYNC

GS_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                CUcontext src_ctx, size_t n) {
  return CopyPeer(dst, dst_ctx, src, src_ctx, n, kSync, nullptr);
}
GS_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                     CUcontext src_ctx, size_t n) {
  return CopyPeer(dst, dst_ctx, src, src_ctx, n, kSync, nullptr);
}
GS_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                     CUcontext src_ctx, size_t n, CUstream stream) {
  return CopyPeer(dst, dst_ctx, src, src_ctx, n, kAsync, stream);
}
GS_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                          CUcontext src_ctx, size_t n, CUstream stream) {
  return CopyPeer(dst, dst_ctx, src, src_ctx, n, kAsync, stream);
}

// ---- 2D and 3D copies -----------------------------------------------------------------------

GS_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return Copy2D(c, kSync, nullptr); }
GS_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) { return Copy2D(c, kSync, nullptr); }
GS_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) {
  return Copy2D(c, kSync, nullptr);
}
GS_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) {
  return Copy2D(c, kSync, nullptr);
}
GS_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  return Copy2D(c, kAsync, s);
}
GS_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream s) {
  return Copy2D(c, kAsync, s);
}
GS_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) { return Copy3D(c, kSync, nullptr); }
GS_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* c) { return Copy3D(c, kSync, nullptr); }
GS_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) {
  return Copy3D(c, kAsync, s);
}
GS_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* c, CUstream s) {
  return Copy3D(c, kAsync, s);
}

// ---- sets ------------------------------------------------------------------------------------

#define GS_SET(name, T)                                         \
  GS_EXPORT CUresult name(CUdeviceptr dst, T value, size_t n) { \
    return Set<T>(dst, value, n, kSync, nullptr);               \
  }
#define GS_SET_ASYNC(name, T)                                                    \
  GS_EXPORT CUresult name(CUdeviceptr dst, T value, size_t n, CUstream stream) { \
    return Set<T>(dst, value, n, kAsync, stream);                                \
  }
#define GS_SET2D(name, T)                                                                        \
  GS_EXPORT CUresult name(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height) { \
    return Set2D<T>(dst, pitch, value, width, height, kSync, nullptr);                           \
  }
#define GS_SET2D_ASYNC(name, T)                                                                \
  GS_EXPORT CUresult name(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height, \
                          CUstream stream) {                                                   \
    return Set2D<T>(dst, pitch, value, width, height, kAsync, stream);                         \
  }

GS_SET(cuMemsetD8_v2, unsigned char)
GS_SET(cuMemsetD8_v2_ptds, unsigned char)
GS_SET(cuMemsetD16_v2, unsigned short)
GS_SET(cuMemsetD16_v2_ptds, unsigned short)
GS_SET(cuMemsetD32_v2, unsigned int)
GS_SET(cuMemsetD32_v2_ptds, unsigned int)
GS_SET_ASYNC(cuMemsetD8Async, unsigned char)
GS_SET_ASYNC(cuMemsetD8Async_ptsz, unsigned char)
GS_SET_ASYNC(cuMemsetD16Async, unsigned short)
GS_SET_ASYNC(cuMemsetD16Async_ptsz, unsigned short)
GS_SET_ASYNC(cuMemsetD32Async, unsigned int)
GS_SET_ASYNC(cuMemsetD32Async_ptsz, unsigned int)
GS_SET2D(cuMemsetD2D8_v2, unsigned char)
GS_SET2D(cuMemsetD2D8_v2_ptds, unsigned char)
GS_SET2D(cuMemsetD2D16_v2, unsigned short)
GS_SET2D(cuMemsetD2D16_v2_ptds, unsigned short)
GS_SET2D(cuMemsetD2D32_v2, unsigned int)
GS_SET2D(cuMemsetD2D32_v2_ptds, unsigned int)
GS_SET2D_ASYNC(cuMemsetD2D8Async, unsigned char)
GS_SET2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char)
GS_SET2D_ASYNC(cuMemsetD2D16Async, unsigned short)
GS_SET2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short)
GS_SET2D_ASYNC(cuMemsetD2D32Async, unsigned int)
GS_SET2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int)

#undef GS_SET
#undef GS_SET_ASYNC
#undef GS_SET2D
#undef GS_SET2D_ASYNC
