// ComputeGate: the launch path's half of compute limits (DESIGN.md section 2).
//
// Every launch hook (kernels, Ex, cooperative, graphs, and their _ptsz forms)
// runs its real launch through Paced(). When no device of the group has a
// compute limit that costs one load from the segment and a branch. Otherwise
// the launch waits until the group's budget on its device admits it
// (shm/launch_pacer.h, ComputeBudget: the budget advances by the launch's estimated device
// time stretched by the limit), sleeping on the segment's futex, never
// polling; a limit change wakes it at once. Until the group controller has an
// estimate of a launch's device time, the first launches are measured by
// synchronising their stream (an upper bound of their device time, so the
// group starts under its limit, never over).
//
// Work captured into a graph is not charged when captured but when the graph
// is launched. Nothing is logged per launch.
//
// Thread-safe; waits only the calling thread.
#pragma once

#include <atomic>

#include "cuda_abi/cuda_driver_api.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

class ComputeGate {
 public:
  // Launches made while no estimate exists that are measured (per device and
  // group) before the gate relies on the smallest measurement.
  static constexpr uint32_t kBootstrapProbes = 3;

  // Starts pacing for `segment` (the limiter's, alive for the process's life).
  static void Arm(GroupSegment* segment) { segment_.store(segment, std::memory_order_release); }

  // True if launches on some device of the group are paced (a limit, a
  // grant, or the group is paused).
  static bool Active() {
    const GroupSegment* s = segment_.load(std::memory_order_acquire);
    return s != nullptr && s->ComputeLimitedMask() != 0;
  }

  // Runs `launch` (a real launch on `stream`; `per_thread`: a _ptsz entry
  // point, whose stream 0 is the per-thread default stream) once the budget
  // of the stream's device admits it.
  template <typename Launch>
  static CUresult Paced(CUstream stream, bool per_thread, Launch&& launch) {
    if (!Active()) [[likely]] {
      return launch();
    }
    return PacedSlow(stream, per_thread, &Invoke<Launch>, &launch);
  }

 private:
  using Trampoline = CUresult (*)(void*);
  template <typename Launch>
  static CUresult Invoke(void* launch) {
    return (*static_cast<std::remove_reference_t<Launch>*>(launch))();
  }
  static CUresult PacedSlow(CUstream stream, bool per_thread, Trampoline call, void* launch);

  static inline std::atomic<GroupSegment*> segment_{nullptr};
};

}  // namespace gpuslice::limiter
