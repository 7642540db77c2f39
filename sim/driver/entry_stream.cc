// Entry points: streams and events.
//
// All streams of a context feed the context's one queue in the simulator, in
// submission order (the hardware runs them concurrently but a context's
// kernels still share its time slices, so the device's busy time is the same).
// A stream remembers the seq of its last op: synchronising it waits for that.
#include <algorithm>
#include <climits>

#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

CUresult CreateStream(CUstream* stream, unsigned flags, int priority) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (CurrentContext(&rc) == nullptr) return rc;
  Stream s;
  s.ctx = CurrentHandle();
  s.flags = flags;
  s.priority = std::clamp(priority, -5, 0);  // cuCtxGetStreamPriorityRange's range
  s.unique_id = D().next_unique_id.fetch_add(1);
  const uint64_t h = D().streams.Add(std::move(s));
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *stream = AsHandle<CUstream>(h);
  return CUDA_SUCCESS;
}

// The seq a synchronisation of `st` (nullptr: a default stream) waits for.
uint64_t StreamSeq(const Context& ctx, const Stream* st) {
  return st != nullptr ? st->last_seq.load(std::memory_order_relaxed) : D().gpu->LastSeq(ctx.id);
}

CUresult SyncStream(CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (st != nullptr && st->capture_graph.load() != 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const uint64_t seq = StreamSeq(*ctx, st);
  const CUresult rc = seq == 0 ? CUDA_SUCCESS : WaitContext(*ctx, seq);
  ReleasePoolsAtSync();  // pools give back what they hold above their release threshold
  return rc;
}

CUresult QueryStream(CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (st != nullptr && st->capture_graph.load() != 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const uint64_t seq = StreamSeq(*ctx, st);
  return seq == 0 || D().gpu->IsComplete(ctx->id, seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// Work queued on `stream` after this waits for `event`. Within one context
// the queue is already in order; an event of another context is waited for
// on the host (the simulator has no cross-context dependencies).
CUresult WaitEvent(CUstream stream, CUevent e, unsigned flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  const Event* ev = D().events.Get(Raw(e));
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->seq == 0 || ev->ctx == (st != nullptr ? st->ctx : CurrentHandle())) return CUDA_SUCCESS;
  const Context* other = D().contexts.Get(ev->ctx);
  return other == nullptr ? CUDA_SUCCESS : WaitContext(*other, ev->seq);
}

CUresult RecordEvent(CUevent e, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Event* ev = D().events.Get(Raw(e));
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (ev->ctx != (st != nullptr ? st->ctx : CurrentHandle())) return CUDA_ERROR_INVALID_HANDLE;
  if (st != nullptr && st->capture_graph.load() != 0) return CUDA_SUCCESS;  // not captured
  // A marker after the stream's work: with one queue per context, after all of it.
  auto seq = D().gpu->EnqueueEventRecord(ctx->id, ev->slot);
  if (!seq.ok()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  ev->seq = *seq;
  if (st != nullptr) st->last_seq.store(*seq, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

// The event's context, or nullptr when it is gone.
const Context* EventContext(const Event& ev) { return D().contexts.Get(ev.ctx); }

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

// ---- streams ---------------------------------------------------------------------------------

GS_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return CreateStream(stream, flags, 0);
}
GS_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return CreateStream(stream, flags, priority);
}

GS_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Stream s;
  if (!D().streams.Remove(Raw(stream), &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (uint64_t g = s.capture_graph.load(); g != 0) D().graphs.Remove(g);  // capture abandoned
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamDestroy(CUstream stream) { return cuStreamDestroy_v2(stream); }

GS_EXPORT CUresult cuStreamSynchronize(CUstream stream) { return SyncStream(stream); }
GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) { return SyncStream(stream); }
GS_EXPORT CUresult cuStreamQuery(CUstream stream) { return QueryStream(stream); }
GS_EXPORT CUresult cuStreamQuery_ptsz(CUstream stream) { return QueryStream(stream); }
GS_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return WaitEvent(stream, event, flags);
}
GS_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return WaitEvent(stream, event, flags);
}

GS_EXPORT CUresult cuStreamGetCtx(CUstream stream, CUcontext* pctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  *pctx = AsHandle<CUcontext>(st != nullptr ? st->ctx : CurrentHandle());
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream stream, CUcontext* pctx) {
  return cuStreamGetCtx(stream, pctx);
}

GS_EXPORT CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  *flags = st != nullptr ? st->flags : unsigned{CU_STREAM_DEFAULT};
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream stream, unsigned int* flags) {
  return cuStreamGetFlags(stream, flags);
}

GS_EXPORT CUresult cuStreamGetPriority(CUstream stream, int* priority) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  *priority = st != nullptr ? st->priority : 0;
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream stream, int* priority) {
  return cuStreamGetPriority(stream, priority);
}

GS_EXPORT CUresult cuStreamGetId(CUstream stream, unsigned long long* id) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  *id = st != nullptr ? st->unique_id : (stream == CU_STREAM_PER_THREAD ? 2 : 1);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamGetId_ptsz(CUstream stream, unsigned long long* id) {
  return cuStreamGetId(stream, id);
}

GS_EXPORT CUresult cuStreamGetDevice(CUstream stream, CUdevice* device) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  *device = ctx->device;
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream stream, CUdevice* device) {
  return cuStreamGetDevice(stream, device);
}

// ---- events ------------------------------------------------------------------------------------

GS_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if ((flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  if (ctx == nullptr) return rc;
  auto slot = D().gpu->AllocateEventSlot(ctx->id);
  if (!slot.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  Event ev;
  ev.ctx = CurrentHandle();
  ev.flags = flags;
  ev.slot = *slot;
  const uint64_t h = D().events.Add(std::move(ev));
  if (h == 0) {
    D().gpu->FreeEventSlot(ctx->id, *slot);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *event = AsHandle<CUevent>(h);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  return RecordEvent(event, stream);
}
GS_EXPORT CUresult cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return RecordEvent(event, stream);
}
GS_EXPORT CUresult cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  if (flags != CU_EVENT_RECORD_DEFAULT && flags != CU_EVENT_RECORD_EXTERNAL) {
    return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  }
  return RecordEvent(event, stream);
}
GS_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned int flags) {
  return cuEventRecordWithFlags(event, stream, flags);
}

GS_EXPORT CUresult cuEventQuery(CUevent event) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Event* ev = D().events.Get(Raw(event));
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const Context* ctx = EventContext(*ev);
  if (ev->seq == 0 || ctx == nullptr) return CUDA_SUCCESS;
  return D().gpu->IsComplete(ctx->id, ev->seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GS_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Event* ev = D().events.Get(Raw(event));
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const Context* ctx = EventContext(*ev);
  const CUresult rc = ev->seq == 0 || ctx == nullptr ? CUDA_SUCCESS : WaitContext(*ctx, ev->seq);
  ReleasePoolsAtSync();
  return rc;
}

GS_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Event* a = D().events.Get(Raw(start));
  const Event* b = D().events.Get(Raw(end));
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (a->seq == 0 || b->seq == 0) return CUDA_ERROR_INVALID_HANDLE;
  const Context* ca = EventContext(*a);
  const Context* cb = EventContext(*b);
  if (ca == nullptr || cb == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int64_t ta = 0, tb = 0;
  if (!D().gpu->EventTime(ca->id, a->slot, a->seq, &ta) ||
      !D().gpu->EventTime(cb->id, b->slot, b->seq, &tb)) {
    return CUDA_ERROR_NOT_READY;
  }
  *ms = static_cast<float>(static_cast<double>(tb - ta) / 1e6);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

GS_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Event ev;
  if (!D().events.Remove(Raw(event), &ev)) return CUDA_ERROR_INVALID_HANDLE;
  if (const Context* ctx = D().contexts.Get(ev.ctx)) D().gpu->FreeEventSlot(ctx->id, ev.slot);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }
