// Time sources. Everything that schedules or measures takes a Clock so tests
// can drive it with simulated time (SimulatedClock).
#pragma once

#include <cstdint>
#include <ctime>

namespace gpuslice {

// Nanoseconds of CLOCK_MONOTONIC: the one time base shared by every process on
// a machine (the simulator, the limiter and the daemon all use it).
inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Wall-clock nanoseconds since the Unix epoch (for timestamps people read).
inline int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowNs() const = 0;
};

class MonotonicClock final : public Clock {
 public:
  int64_t NowNs() const override { return MonotonicNs(); }
};

// CLOCK_REALTIME: NVML's sample timestamps, and instants that must mean the
// same after a reboot (a lease's expiry in the daemon's durable records), since
// the monotonic clock starts again with the machine. It can jump (NTP, an
// operator).
class RealtimeClock final : public Clock {
 public:
  int64_t NowNs() const override { return RealtimeNs(); }
};

// A clock that moves only when told to. Not thread-safe.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(int64_t start_ns = 0) : now_(start_ns) {}
  int64_t NowNs() const override { return now_; }
  void Advance(int64_t ns) { now_ += ns; }
  void Set(int64_t ns) { now_ = ns; }

 private:
  int64_t now_;
};

}  // namespace gpuslice
