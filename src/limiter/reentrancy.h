// A thread-local reentrancy guard (heaptrack's idea): set while a hook runs
// on this thread, so a call that comes back into an exported name from inside
// the limiter (or from the driver) is passed straight to the real library.
//
// initial-exec TLS: no allocation or lock on first access from any thread.
#pragma once

namespace gpuslice::limiter {

class ReentrancyGuard {
 public:
  ReentrancyGuard() : reentered_(depth_ > 0) { ++depth_; }
  ~ReentrancyGuard() { --depth_; }
  ReentrancyGuard(const ReentrancyGuard&) = delete;
  ReentrancyGuard& operator=(const ReentrancyGuard&) = delete;

  // True if another hook was already running on this thread.
  bool reentered() const { return reentered_; }

 private:
  static inline thread_local int depth_ __attribute__((tls_model("initial-exec"))) = 0;
  const bool reentered_;
};

}  // namespace gpuslice::limiter
