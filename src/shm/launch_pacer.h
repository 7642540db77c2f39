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

// ---- the backlog watch (one stream) ----
//
// The budget charges each launch its *estimated* device time. When the
// workload changes (kernels 100x longer, a graph of many kernels in place of
// one launch), the estimate is short until the group controller has seen the
// new workload, and the driver's queue (up to about a thousand launches)
// would fill with seconds of work that no later correction can take back.
// The watch bounds that queue without knowing the new cost. It follows each
// stream's busy period (from the first launch after the stream was last seen
// empty) and the device time charged for the launches of that period. A
// period longer than the allowance (what a correctly charged stream needs to
// run empty again: the burst it may be ahead, two launches' paced intervals
// and a little slack for other tenants' time slices) whose launches were
// charged less than half its length cannot be explained by the charges: the
// launches cost more than they were charged, and the stream must drain
// before it gets another launch. A steady workload never waits for it (a
// queue kept full on purpose was charged at least its length); a wrongly
// charged one holds at most an allowance of launches in the driver's queue.

// Slack of the allowance: other tenants' time slices and launch latency.
inline constexpr int64_t kBacklogSlackNs = 5'000'000;
// The longest a launch waits for its stream to drain (a stream that waits on
// the host, e.g. cuStreamWaitValue32, never drains by itself).
inline constexpr int64_t kBacklogMaxWaitNs = 2'000'000'000;

// How long a stream may stay busy without draining, for launches paced at
// `interval_ns` of wall time each within `burst_ns`.
inline int64_t BacklogAllowanceNs(int64_t interval_ns, int64_t burst_ns) {
  return burst_ns + 2 * interval_ns + kBacklogSlackNs;
}

// The watch's state for one stream (two fields of the caller's):
// `busy_since`, when the stream's current busy period began (0: no launch
// yet), and `charged`, the device time charged to its launches since.
// Lock-free; racing threads on one stream at worst check once more than needed.
class BacklogWatch {
 public:
  BacklogWatch(std::atomic_ref<int64_t> busy_since, std::atomic_ref<int64_t> charged)
      : busy_since_(busy_since), charged_(charged) {}

  // True if, before a launch at `now_ns`, the stream must be seen empty: its
  // busy period is longer than `allowance_ns` and its launches were charged
  // less than half of it. Otherwise the launch may go (and, if it starts a
  // busy period, `now_ns` is its beginning).
  bool Overdue(int64_t now_ns, int64_t allowance_ns) {
    const int64_t since = busy_since_.load(std::memory_order_relaxed);
    if (since == 0) {
      Drained(now_ns);
      return false;
    }
    const int64_t busy = now_ns - since;
    return busy > allowance_ns && 2 * charged_.load(std::memory_order_relaxed) < busy;
  }
  // A launch charged `charge_ns` of device time was admitted.
  void Charged(int64_t charge_ns) { charged_.fetch_add(charge_ns, std::memory_order_relaxed); }
  // The stream was seen empty (or waited for) at `now_ns`: a launch now
  // begins a new busy period.
  void Drained(int64_t now_ns) {
    busy_since_.store(now_ns, std::memory_order_relaxed);
    charged_.store(0, std::memory_order_relaxed);
  }

 private:
  std::atomic_ref<int64_t> busy_since_;
  std::atomic_ref<int64_t> charged_;
};

}  // namespace gpuslice
