// ComputeGate: the launch path's half of compute limits (DESIGN.md section 2).
//
// One per process, owned by the process's state (Limiter) and armed with the
// group's segment and the CUDA ordinal -> group device map once attached.
// Every launch hook (kernels, Ex, cooperative, graphs, and their _ptsz forms)
// runs its real launch through Paced(). When no device of the group has a
// compute limit that costs one load of the armed segment, one load from it
// and a branch. Otherwise the launch:
//  1. finds its device through the cached resolver (StreamDevices: no driver
//     call for a stream seen before);
//  2. waits for its stream to drain if one of the stream's markers missed
//     its deadline (the backlog watch, shm/progress_watch.h): after a
//     workload change the charge is short until the controller relearns it,
//     and this keeps the driver's queue from filling with seconds of work
//     meanwhile (bounded wait, kBacklogMaxWaitNs); after the launch it puts
//     a marker on the stream when one is due;
//     (after a drain, until the controller has relearned the cost, each
//     launch is charged at least what the drain measured per launch:
//     ChargeFloor, shm/progress_watch.h);
//  3. waits until the group's budget on its device admits it
//     (ComputeBudget: the budget advances by the launch's estimated device
//     time stretched by the limit), sleeping on the segment's futex, never
//     polling (while markers are pending it wakes every millisecond to look
//     at them); a limit change wakes it at once.
// Each launch is charged its own member's cost (SlotCompute: the group
// controller learns every member's device time per launch from that
// member's NVML samples), so members whose kernels differ a hundredfold are
// each charged what theirs cost. Until the controller has an estimate for
// this member, its first launches are measured by synchronising their
// stream (an upper bound of their device time, so a member starts under its
// limit, never over, even when it joins a group whose other members' kernels
// are much shorter).
//
// Work captured into a graph is not charged when captured but when the graph
// is launched. Nothing is logged per launch.
//
// A paused group's launches wait, as do those on a device the scheduler holds
// (another batch group's turn beside a latency group); every wait is marked
// in the member's slot while it lasts, so that the scheduler sees it.
//
// Thread-safe; waits only the calling thread. Never waits forever: a paused
// or held group rechecks, a drain wait ends after kBacklogMaxWaitNs.
#pragma once

#include <array>
#include <atomic>
#include <type_traits>
#include <vector>

#include "common/thread_annotations.h"
#include "cuda_abi/cuda_driver_api.h"
#include "limiter/launch_fast_path.h"
#include "limiter/ledger.h"
#include "limiter/stream_captures.h"
#include "limiter/stream_devices.h"
#include "shm/group_segment.h"
#include "shm/progress_watch.h"

namespace gpuslice::limiter {

class ComputeGate {
 public:
  // Launches made while no estimate exists that are measured (per device and
  // group) before the gate relies on the smallest measurement.
  static constexpr uint32_t kBootstrapProbes = 3;

  constexpr ComputeGate() = default;

  // Starts pacing for `segment` (alive for the process's life), whose device
  // for CUDA ordinal i is ordinal_to_device[i] (-1: none); `ledger` (bound
  // to it, alive as long) holds the process's slot, where its launches are
  // counted and its own charge is read; `captures` (alive as long) tells
  // which streams are being captured.
  // Publishes the segment's word to the launch fast path
  // (launch_fast_path.h) once the driver is loaded.
  void Arm(GroupSegment* segment, const std::vector<int>& ordinal_to_device, Ledger* ledger,
           const StreamCaptures* captures) {
    streams_.SetOrdinals(ordinal_to_device);
    ledger_.store(ledger, std::memory_order_release);
    captures_.store(captures, std::memory_order_release);
    MutexLock lock(publish_mu_);
    disarmed_ = false;
    segment_.store(segment, std::memory_order_release);
    PublishLocked();
  }
  // Stops pacing (a forked child that could not rejoin its group).
  void Disarm() {
    MutexLock lock(publish_mu_);
    disarmed_ = true;
    segment_.store(nullptr, std::memory_order_release);
    PublishLocked();
  }
  // Around fork (the child's first launch may publish).
  void LockForFork() ACQUIRE(publish_mu_) { publish_mu_.Lock(); }
  void UnlockForFork() RELEASE(publish_mu_) { publish_mu_.Unlock(); }

  // True if launches on some device of the group are paced (a limit, a
  // grant, or the group is paused).
  bool Active() const {
    const GroupSegment* s = segment_.load(std::memory_order_acquire);
    return s != nullptr && s->schedule().ComputeLimitedMask() != 0;
  }

  // Runs `launch` (a real launch on `stream`; `per_thread`: a _ptsz entry
  // point, whose stream 0 is the per-thread default stream) once the budget
  // of the stream's device admits it.
  template <typename Launch>
  CUresult Paced(CUstream stream, bool per_thread, Launch&& launch) {
    GroupSegment* s = segment_.load(std::memory_order_acquire);
    if (s == nullptr || s->schedule().ComputeLimitedMask() == 0) [[likely]] {
      // Armed before the driver was loaded: the fast path opens once it is.
      if (s != nullptr && !LaunchFastPath::Published()) [[unlikely]]
        PublishFastPath();
      return launch();
    }
    return PacedSlow(stream, per_thread, &Invoke<Launch>, &launch);
  }

  // `stream` is being destroyed: its handle may come back for another device.
  void ForgetStream(CUstream stream) { streams_.Forget(stream); }

 private:
  using Trampoline = CUresult (*)(void*);
  template <typename Launch>
  static CUresult Invoke(void* launch) {
    return (*static_cast<std::remove_reference_t<Launch>*>(launch))();
  }
  CUresult PacedSlow(CUstream stream, bool per_thread, Trampoline call, void* launch);
  void PublishFastPath() {
    MutexLock lock(publish_mu_);
    PublishLocked();
  }
  // Sets the launch fast path from segment_ and disarmed_.
  void PublishLocked() REQUIRES(publish_mu_);

  Mutex publish_mu_;  // serialises Arm, Disarm and the publishing of the fast path
  bool disarmed_ GUARDED_BY(publish_mu_) = false;
  std::atomic<GroupSegment*> segment_{nullptr};
  std::atomic<Ledger*> ledger_{nullptr};
  std::atomic<const StreamCaptures*> captures_{nullptr};
  StreamDevices streams_;
  // This member's charge floor on each device after a drain.
  std::array<ChargeFloor, kGroupMaxDevices> floors_{};
};

}  // namespace gpuslice::limiter
