// Launch pacing against a compute budget (DESIGN.md section 2): the
// arithmetic of DeviceCompute (include/gpuslice/group_segment.h), kept free of
// CUDA and shared memory so it is unit-tested on plain integers.
//
// The budget is one timestamp, `next_free_ns`: the time at which the group's
// device-time allowance is next free. Admitting a launch that is estimated to
// use `charge_ns` of device time under a limit of L% advances it by
// charge_ns x 100 / L of wall time, from now if it lags behind now (unused
// allowance is not banked beyond the burst tolerance). A launch is admitted
// while next_free_ns <= now + burst: the group may run up to `burst` of wall
// time ahead, so an asynchronous stream keeps a short queue and the device
// never idles for want of an admitted launch.
//
// Thread- and process-safe: the only shared state is the atomic timestamp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gpuslice {

// How far ahead of now a group may have admitted work (wall time): short
// enough that no 1 s window can hold much more than its share, long enough
// to keep a queue in front of the device for small kernels.
inline constexpr int64_t kPacerBurstNs = 20'000'000;

// Wall time one launch consumes: its device time stretched by the group's
// rate on the device, in basis points (1/100 %). REQUIRES: 1 <= rate_bp.
inline int64_t PacedIntervalBpNs(int64_t charge_ns, uint32_t rate_bp) {
  return charge_ns * 10000 / static_cast<int64_t>(rate_bp);
}

// The same for a rate in percent. REQUIRES: 1 <= limit_percent <= 100.
inline int64_t PacedIntervalNs(int64_t charge_ns, uint32_t limit_percent) {
  return PacedIntervalBpNs(charge_ns, limit_percent * 100);
}

// Charges `interval_ns` to the budget at `now_ns` whatever it holds (a
// launch measured after the fact).
inline void ChargeAfter(std::atomic_ref<int64_t> next_free, int64_t now_ns, int64_t interval_ns) {
  int64_t seen = next_free.load(std::memory_order_relaxed);
  while (!next_free.compare_exchange_weak(seen, std::max(seen, now_ns) + interval_ns,
                                          std::memory_order_acq_rel)) {
  }
}

// Admits one launch of `interval_ns` at `now_ns` if the budget allows:
// returns 0 and advances `next_free`; otherwise returns the nanoseconds to
// wait before trying again, and changes nothing.
inline int64_t TryAdmit(std::atomic_ref<int64_t> next_free, int64_t now_ns, int64_t interval_ns,
                        int64_t burst_ns = kPacerBurstNs) {
  int64_t seen = next_free.load(std::memory_order_relaxed);
  for (;;) {
    if (seen > now_ns + burst_ns) return seen - burst_ns - now_ns;
    const int64_t next = std::max(seen, now_ns) + interval_ns;
    if (next_free.compare_exchange_weak(seen, next, std::memory_order_acq_rel)) return 0;
  }
}

// Pulls `next_free` back to at most `max_ahead_ns` past `now_ns` (a budget
// that ran ahead at an older, lower rate: a grant since raised or cleared, a
// daemon gone). What the current rate still owes is kept; only the excess
// the old rate charged goes. Returns true if it pulled the budget back.
inline bool ClampAhead(std::atomic_ref<int64_t> next_free, int64_t now_ns, int64_t max_ahead_ns) {
  int64_t seen = next_free.load(std::memory_order_relaxed);
  while (seen > now_ns + max_ahead_ns) {
    if (next_free.compare_exchange_weak(seen, now_ns + max_ahead_ns, std::memory_order_acq_rel)) {
      return true;
    }
  }
  return false;
}

// ---- the backlog watch (one stream) ----
//
// The budget charges each launch its *estimated* device time. When the
// workload changes (kernels 100x longer, a graph of many kernels in place of
// one launch), the estimate is short until the group controller has seen the
// new workload, and the driver's queue (up to about a thousand launches)
// would fill with seconds of work that no later correction can take back.
// The watch bounds that queue without knowing the new cost: it puts a marker
// on the stream (an event: it completes when everything queued before it
// has run) and looks at it once the allowance has passed. A correctly
// charged stream never holds more than the burst's worth of work, so its
// marker has completed by then (BacklogAllowanceNs); a
// marker still pending means the queue holds more work than the charges
// say, and the next launch waits until the stream has drained (the launches
// queued after the marker are as wrongly charged). So a wrongly charged
// stream holds at most an allowance of launches in the driver's queue, and a
// steady one, however full it keeps its queue, never waits.

// Slack of the allowance: other tenants' time slices and launch latency.
inline constexpr int64_t kBacklogSlackNs = 5'000'000;
// The longest a launch waits for its marker (a stream that waits on the
// host, e.g. cuStreamWaitValue32, never drains by itself).
inline constexpr int64_t kBacklogMaxWaitNs = 2'000'000'000;

// How long a marker may stay pending, for launches paced at `interval_ns` of
// wall time each within `burst_ns` at `rate_bp`: the work a correctly
// charged stream can have queued (the burst at its rate) with half again for
// other tenants' time slices, two launches' intervals and the slack.
inline int64_t BacklogAllowanceNs(int64_t interval_ns, int64_t burst_ns, uint32_t rate_bp) {
  return burst_ns * rate_bp / 10000 * 3 / 2 + 2 * interval_ns + kBacklogSlackNs;
}

// The watch's state for one stream: when its marker was put (0: none
// pending). Lock-free; racing threads on one stream at worst look at the
// marker once more than needed.
class BacklogWatch {
 public:
  enum class Step {
    kNone,   // the launch goes; nothing to do
    kMark,   // put a marker on the stream, then Marked(now)
    kCheck,  // the marker is due: if it is pending, wait for the stream to drain;
             // then put a new marker
  };

  explicit BacklogWatch(std::atomic_ref<int64_t> marked_at) : marked_at_(marked_at) {}

  // What to do before a launch at `now_ns`.
  Step Next(int64_t now_ns, int64_t allowance_ns) const {
    const int64_t at = marked_at_.load(std::memory_order_relaxed);
    if (at == 0) return Step::kMark;
    return now_ns - at > allowance_ns ? Step::kCheck : Step::kNone;
  }
  // A marker was put at `now_ns`.
  void Marked(int64_t now_ns) { marked_at_.store(now_ns, std::memory_order_relaxed); }
  // No marker is pending (none could be put).
  void Clear() { marked_at_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic_ref<int64_t> marked_at_;
};

}  // namespace gpuslice
