// Entry points: contexts (created and primary) and the thread's context stack.
#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

// cuCtxCreate flags: a scheduling policy (0, SPIN, YIELD or BLOCKING_SYNC)
// plus independent bits.
bool ValidContextFlags(unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return false;
  const unsigned sched = flags & CU_CTX_SCHED_MASK;
  return sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
         sched == CU_CTX_SCHED_BLOCKING_SYNC;
}

CUresult CreateAndPush(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr || !ValidContextFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  uint64_t h = 0;
  if (CUresult rc = CreateContextOn(dev, flags, false, &h); rc != CUDA_SUCCESS) return rc;
  if (!PushContext(h)) {
    DestroyContext(h);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pctx = AsHandle<CUcontext>(h);
  return CUDA_SUCCESS;
}

// `c`, or the current context when c is null.
Context* ContextOrCurrent(CUcontext c, CUresult* rc) {
  if (c == nullptr) return CurrentContext(rc);
  Context* ctx = D().contexts.Get(Raw(c));
  if (ctx == nullptr) *rc = CUDA_ERROR_INVALID_CONTEXT;
  return ctx;
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateAndPush(pctx, flags, dev);
}
GS_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateAndPush(pctx, flags, dev);
}
// Execution affinity (SM partitions) is not simulated: none may be asked for.
GS_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int numParams,
                                  unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (numParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return CreateAndPush(pctx, flags, dev);
}
GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  if (params != nullptr) {
    if (params->numExecAffinityParams < 0) return CUDA_ERROR_INVALID_VALUE;
    if (params->numExecAffinityParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (params->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CreateAndPush(pctx, flags, dev);
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = D().contexts.Get(Raw(c));
  if (ctx == nullptr || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  DestroyContext(Raw(c));
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuCtxDestroy(CUcontext c) { return cuCtxDestroy_v2(c); }

GS_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (c == nullptr) {
    PopContext();
    return CUDA_SUCCESS;
  }
  if (D().contexts.Get(Raw(c)) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  ReplaceTop(Raw(c));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = AsHandle<CUcontext>(CurrentHandle());
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().contexts.Get(Raw(c)) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return PushContext(Raw(c)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
GS_EXPORT CUresult cuCtxPushCurrent(CUcontext c) { return cuCtxPushCurrent_v2(c); }

GS_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const uint64_t top = PopContext();
  if (top == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = AsHandle<CUcontext>(top);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

GS_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = ContextOrCurrent(c, &rc);
  if (ctx == nullptr) return rc;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSynchronize() {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  rc = WaitContext(*ctx);
  ReleasePoolsAtSync();  // pools give back what they hold above their release threshold
  return rc;
}

GS_EXPORT CUresult cuCtxSynchronize_v2(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = ContextOrCurrent(c, &rc);
  if (ctx == nullptr) return rc;
  rc = WaitContext(*ctx);
  ReleasePoolsAtSync();
  return rc;
}

GS_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!ValidContextFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  ctx->flags = flags;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetApiVersion(CUcontext c, unsigned int* version) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (ContextOrCurrent(c, &rc) == nullptr) return rc;
  *version = 3020;  // every context since the _v2 API reports this
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetId(CUcontext c, unsigned long long* id) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = ContextOrCurrent(c, &rc);
  if (ctx == nullptr) return rc;
  *id = ctx->unique_id;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (limit < 0 || limit >= kLimitCount) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  *value = ctx->limits[limit];
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (limit < 0 || limit >= kLimitCount) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  ctx->limits[limit] = value;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  *config = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = CUDA_SUCCESS;
  return CurrentContext(&rc) == nullptr ? rc : CUDA_SUCCESS;
}

// ---- primary contexts -------------------------------------------------------------------

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (d.contexts.Get(d.primary[dev]) == nullptr) {
    uint64_t h = 0;
    if (CUresult rc = CreateContextOn(dev, d.primary_flags[dev], true, &h); rc != CUDA_SUCCESS) {
      return rc;
    }
    d.primary[dev] = h;
    d.primary_refs[dev] = 0;
  }
  ++d.primary_refs[dev];
  *pctx = AsHandle<CUcontext>(d.primary[dev]);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  Driver& d = D();
  uint64_t gone = 0;
  {
    std::lock_guard lock(d.mu);
    if (d.primary_refs[dev] == 0 || d.contexts.Get(d.primary[dev]) == nullptr) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--d.primary_refs[dev] == 0) std::swap(gone, d.primary[dev]);
  }
  if (gone != 0) DestroyContext(gone);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  Driver& d = D();
  uint64_t gone = 0;
  {
    std::lock_guard lock(d.mu);
    d.primary_refs[dev] = 0;
    d.primary_flags[dev] = 0;
    std::swap(gone, d.primary[dev]);
  }
  if (gone != 0) DestroyContext(gone);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

GS_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  *flags = d.primary_flags[dev];
  *active = d.contexts.Get(d.primary[dev]) != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (!ValidContextFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  d.primary_flags[dev] = flags;
  if (Context* ctx = d.contexts.Get(d.primary[dev])) ctx->flags = flags;
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
