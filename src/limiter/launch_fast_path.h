// LaunchFastPath: a kernel launch that nothing paces goes straight to the
// driver (DESIGN.md section 8: with no compute limit, launch throughput
// >= 99% of running without the limiter).
//
// The exported launch shims (shims/cuda_shims.cc: cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel and their _ptsz forms) ask
// Direct() before anything else. While no device of the process's group is
// paced (ComputeSchedule::ComputeLimitedMask() is 0: no compute limit, no grant
// below the whole device, not paused) it returns the driver's own entry
// point and the shim tail-calls it: one load of the word's address, one of
// the word, one of the driver table's address and one of the entry point; no
// TLS, no lock, no stream or context lookup, no driver call. Otherwise it
// returns nullptr and the launch takes its hook (ComputeGate::Paced), as it
// does until the gate is armed with the driver loaded (the word is then one
// that is never 0). A disarmed gate (a forked child that could not rejoin
// its group) publishes a word that is always 0.
//
// On the direct path no limiter code runs, so the reentrancy guard
// (reentrancy.h) is not set: a driver that called back into an exported name
// during such a launch would reach the hook as the program's own call.
//
// ComputeGate publishes (Set) under its own lock; readers are lock-free.
#pragma once

#include <atomic>
#include <cstdint>

#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {

class LaunchFastPath {
 public:
  // The driver's entry point `entry` if a launch needs no pacing now, else
  // nullptr (also when the driver lacks the entry point).
  template <typename Fn>
  static Fn Direct(Fn real::CudaTable::*entry) {
    uint32_t* word = word_.load(std::memory_order_acquire);
    if (std::atomic_ref<uint32_t>(*word).load(std::memory_order_acquire) != 0) return nullptr;
    return cuda_.load(std::memory_order_relaxed)->*entry;
  }

  // Launches are paced while `*limited_word` (a segment's compute_limited
  // word, alive for the process's life) is nonzero, through `cuda`'s entry
  // points when it is 0.
  static void Set(uint32_t* limited_word, const real::CudaTable* cuda) {
    cuda_.store(cuda, std::memory_order_relaxed);
    word_.store(limited_word, std::memory_order_release);
  }
  // Nothing is paced: through `cuda`'s entry points.
  static void SetUnpaced(const real::CudaTable* cuda) { Set(&zero_, cuda); }
  // Every launch takes its hook.
  static void SetThroughHooks() { word_.store(&never_zero_, std::memory_order_release); }

  // True once Set or SetUnpaced was called (and SetThroughHooks not since).
  static bool Published() { return word_.load(std::memory_order_acquire) != &never_zero_; }

 private:
  // Read through atomic_ref, never written.
  static constinit inline uint32_t never_zero_ = ~0u;
  static constinit inline uint32_t zero_ = 0;
  static constinit inline std::atomic<uint32_t*> word_{&never_zero_};
  // Set before word_ leaves never_zero_ (release), never reset.
  static constinit inline std::atomic<const real::CudaTable*> cuda_{nullptr};
};

}  // namespace gpuslice::limiter
