// StreamCaptures: whether a stream is being captured into a graph, asked of
// the driver only while the process has a capture open.
//
// Work captured into a graph does not run when it is queued: a captured
// launch is not paced (its graph is, when launched), and a captured
// stream-ordered allocation is a node of the graph, not memory (charged when
// an exec of the graph runs, graph_memory_charges.h). Asking the driver
// (cuStreamIsCapturing) on every paced launch and every stream-ordered
// allocation costs a driver call each; instead the capture hooks
// (cuStreamBeginCapture*, cuStreamBeginCaptureToGraph*, cuStreamEndCapture*)
// keep a count of the process's open captures, and the driver is asked only
// while it is nonzero.
//
// A BeginCapture the driver accepted adds one. An EndCapture takes one off
// only if its stream was capturing before the call (active or invalidated)
// and is not after it: one the driver refused (from the wrong thread, on a
// stream not capturing) changes nothing, and one that ended an invalidated
// capture (an error) still ends it. The count never goes below zero. The
// capture modes (global, thread-local, relaxed) decide which other calls the
// driver refuses meanwhile, not what is captured, so one count serves them
// all. Where the count can be wrong it is high (a capture whose stream or
// context was destroyed before EndCapture; two threads ending the same
// capture at once): the driver is then asked, as it always was before.
//
// The legacy default stream (null, CU_STREAM_LEGACY) cannot be captured and
// is never asked about (asking about it while another stream of its context
// captures is an error).
//
// Thread-safe, lock-free.
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda_abi/cuda_driver_api.h"

namespace gpuslice::limiter {

class StreamCaptures {
 public:
  // cuStreamIsCapturing's type.
  using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);

  constexpr StreamCaptures() = default;

  // True if `stream` (the handle the driver means: a _ptsz call's null
  // stream already CU_STREAM_PER_THREAD) is being captured, by
  // `is_capturing` (the driver's cuStreamIsCapturing; null: never), which
  // is called only while a capture is open.
  bool Capturing(CUstream stream, IsCapturingFn is_capturing) const {
    if (open_.load(std::memory_order_acquire) == 0) [[likely]]
      return false;
    return Ask(stream, is_capturing);
  }

  // Runs `begin` (the real BeginCapture) and counts the capture if the
  // driver accepted it.
  template <typename Call>
  CUresult Begin(Call&& begin) {
    const CUresult rc = begin();
    if (rc == CUDA_SUCCESS) open_.fetch_add(1, std::memory_order_acq_rel);
    return rc;
  }

  // Runs `end` (the real EndCapture of `stream`, as Capturing() takes it)
  // and takes the capture off the count if it ended one.
  template <typename Call>
  CUresult End(CUstream stream, IsCapturingFn is_capturing, Call&& end) {
    const bool before = Ask(stream, is_capturing);
    const CUresult rc = end();
    if (before && !Ask(stream, is_capturing)) Closed();
    return rc;
  }

  // The captures open, as counted.
  int64_t open() const { return open_.load(std::memory_order_acquire); }

  // Forgets every capture (a forked child: the parent's captures are not its own).
  void Reset() { open_.store(0, std::memory_order_release); }

 private:
  static bool Ask(CUstream stream, IsCapturingFn is_capturing) {
    if (stream == nullptr || stream == CU_STREAM_LEGACY || is_capturing == nullptr) return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  void Closed() {
    int64_t open = open_.load(std::memory_order_acquire);
    while (open > 0 && !open_.compare_exchange_weak(open, open - 1, std::memory_order_acq_rel)) {
    }
  }

  std::atomic<int64_t> open_{0};
};

}  // namespace gpuslice::limiter
