// StreamDevices: which device of the group a launch's stream belongs to,
// cached, and each stream's backlog watch (shm/progress_watch.h).
//
// Asking the driver costs one call where it has cuStreamGetDevice (r570+)
// and four otherwise (the stream's context, made current for the question);
// a paced launch asks once per stream: the answer is kept in a small
// direct-mapped table of kEntries streams (bounded memory, no allocation; a
// stream that collides with another is asked again). A destroyed stream is
// forgotten (Forget, from cuStreamDestroy), since the driver may reuse its
// handle for a stream of another device. The default streams (0, legacy,
// per-thread) belong to the current context's device (one call each time)
// and keep their watch per thread; a thread's markers are destroyed when the
// thread exits.
//
// Thread-safe, lock-free: a lookup that races with a replacement of its
// entry sees either the old stream (and misses) or the new one whole.
#pragma once

#include <sched.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "cuda_abi/cuda_driver_api.h"
#include "shm/group_segment.h"
#include "shm/progress_watch.h"

namespace gpuslice::limiter {

// A stream's backlog watch: the watch and the marker event of each of its
// ring indices (created on first use, timed; null: none), and the budget whose
// member counts the stream's launches still queued (SlotCompute::queued; set
// by the launch that first counts one, null before). The threads launching on
// one stream take `lock` around every use of them (a spin lock: the holder
// never waits on anything while holding it).
struct StreamBacklog {
  std::atomic_flag lock;
  ProgressWatch watch;
  std::array<CUevent, ProgressWatch::kMarkers> markers{};
  DeviceCompute* device = nullptr;
  SlotCompute* member = nullptr;
  // Under turns (compute_gate.cc): the stream reached the scheduler's queue
  // bound and drains before more is admitted.
  bool refill = false;

  // Takes the launches the watch confirmed (seen complete) off the member's
  // queued count, and adds what its markers measured to the member's
  // (SlotCompute::busy_ns, bound_ns). REQUIRES: the lock held.
  void Confirm() {
    const uint64_t n = watch.TakeConfirmed();
    const ProgressWatch::Taken measured = watch.TakeBusy();
    if (member == nullptr) return;
    ComputeBudget budget(*device, *member);
    if (n > 0) budget.Completed(n);
    budget.AddBusy(measured.exact.ns, measured.exact.launches);
    budget.AddBound(measured.bound.ns, measured.bound.launches);
    if (measured.bound.launches > 0) budget.SetBoundFloor(watch.BoundFloorNs());
  }

  void Lock() {
    while (lock.test_and_set(std::memory_order_acquire)) sched_yield();
  }
  void Unlock() { lock.clear(std::memory_order_release); }
};

class StreamDevices {
 public:
  static constexpr int kEntries = 64;
  static constexpr int kMaxOrdinals = 64;

  constexpr StreamDevices() = default;

  // The group device of each CUDA ordinal (-1: not in the group). Called
  // before launches are paced (and again in a forked child); forgets every
  // stream and its watch (REQUIRES: no launch in flight).
  void SetOrdinals(const std::vector<int>& ordinal_to_device);

  // The group device of `stream` (the handle the driver means: per-thread
  // streams already resolved), or -1; `backlog` gets the stream's backlog
  // watch state (never null when a device is returned).
  int Resolve(CUstream stream, StreamBacklog** backlog);

  // Drops `stream` from the cache (it is being destroyed).
  void Forget(CUstream stream);

 private:
  struct Entry {
    std::atomic<uintptr_t> stream{0};  // 0: empty
    std::atomic<int32_t> device{-1};
    StreamBacklog backlog;
  };
  static bool IsDefault(uintptr_t raw);
  int GroupDevice(CUdevice ordinal) const;
  // The driver's answer for a non-default stream; -1 if it has none.
  int Ask(CUstream stream) const;

  std::array<std::atomic<int8_t>, kMaxOrdinals> ordinals_{};
  std::atomic<int> ordinal_count_{0};
  std::array<Entry, kEntries> entries_{};
};

}  // namespace gpuslice::limiter
