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

#include "gpuslice/group_segment.h"

namespace gpuslice {

// How far ahead of now a group may have admitted work (wall time): short
// enough that no 1 s window can hold much more than its share, long enough
// to keep a queue in front of the device for small kernels.
inline constexpr int64_t kPacerBurstNs = 20'000'000;

// The most a launch waiting for its budget sleeps past the time the budget
// admits it: about one time slice of the device, so that a group whose
// launches are rare and wait-sensitive (a latency group synchronising after
// each) is never late by half a 20 ms burst, while one wake-up of a paced
// batch group still admits a millisecond of small launches.
inline constexpr int64_t kMaxNapPastDueNs = 1'000'000;

// The longest one sleep of a launch waiting for its budget: a long wait
// (a budget run ahead on a charge since refined down, e.g. a bootstrap
// measurement charged at a small grant) is looked at again this often, so
// that the gate re-reads the charge and pulls the budget back (compute_gate.cc
// Admit) rather than sleeping out what the old charge said. Only waits this
// long wake more often; no launch is admitted earlier for it.
inline constexpr int64_t kMaxPacerNapNs = 100'000'000;

// How long a launch told to wait `wait_ns` (TryAdmit) sleeps with `burst_ns`:
// on until half the burst is free, so that one wake-up admits a batch of
// small launches, but at most kMaxNapPastDueNs past its due time, and at most
// kMaxPacerNapNs in all.
inline int64_t PacerNapNs(int64_t wait_ns, int64_t burst_ns) {
  return std::min(wait_ns + std::min(burst_ns / 2, kMaxNapPastDueNs), kMaxPacerNapNs);
}

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

// ---- a stream's queue beside a latency group ----

// Slack of the queue bound below: how late the gate sees a marker complete
// (it looks every ProgressWatch::kQueryPeriodNs) and a launch's own latency.
inline constexpr int64_t kQueueSlackNs = 1'000'000;

// While gpusliced's scheduler has set a device's burst (batch groups beside
// an active latency group: docs/scheduling.md "Scheduling"), a stream's queue in
// the driver is bounded in time, not only by the budget: a launch waits while
// the oldest unfinished marker on its stream (shm/progress_watch.h) was
// recorded more than this long ago. The budget alone does not bound it: a
// group admitted at its rate that the device serves more slowly (the latency
// group's kernels, and the context switches each of them costs, come first)
// queues the difference, tens of milliseconds over a turn, and the backlog
// watch, whose markers are each due relative to their predecessor, never
// finds one late. A deep queue is what a latency kernel waits behind after
// a turn passes (two batch contexts with work), and what a new turn's holder
// must wait out (ShareScheduler::TakeTurns holds it this long at least).
// `interval_ns`: one launch's paced interval; two launches may queue behind
// the burst, so that the device never runs dry for want of the next one.
inline int64_t QueueBoundNs(int64_t interval_ns, int64_t burst_ns) {
  return burst_ns + 2 * interval_ns + kQueueSlackNs;
}

// A device's burst as gpusliced's scheduler writes it: 0 when it does not
// schedule the group (the pacer's default applies, no queue bound), the
// pacer's default for a group it schedules, shorter for batch groups taking
// turns beside a latency group (ShareScheduler::kBatchBurstWithLatencyNs).
// Every scheduled group's queue is bounded: a paused group's work already in
// the driver runs on after the pause, and a group coming back from idle waits
// behind the others' queues, so neither may hold much more than what the
// pacer admits (docs/scheduling.md "Scheduling", paused). How:
//  - taking turns (a short burst): by age, the stream's oldest unfinished
//    marker no older than QueueBoundNs (below);
//  - otherwise: by lag (ProgressWatch::BehindBy), the oldest unfinished
//    marker recorded no more than QueueBoundNs before the newest completion
//    was seen. Age would hold back a group that waits for its turn on a
//    device that time-slices long (a 30 ms slice among four contexts: a
//    round of ~100 ms, which each context must have queued work for); lag
//    counts only a queue the device is serving and not catching up with (a
//    launch cost charged 10 % short under a 72 % grant queued 300 ms in 3 s:
//    bench/scheduler's pause case).
inline bool BoundsQueueByAge(int64_t scheduled_burst_ns) {
  return scheduled_burst_ns > 0 && scheduled_burst_ns < kPacerBurstNs;
}

// Raises `next_free` to at least `now_ns + ahead_ns`: while a launch waits
// for its stream's queue (QueueBoundNs), the budget it does not use is not
// banked, so that the wait does not end in a burst of launches that deepens
// the queue again. What the budget already holds beyond that is kept.
inline void RaiseBehind(std::atomic_ref<int64_t> next_free, int64_t now_ns, int64_t ahead_ns) {
  int64_t seen = next_free.load(std::memory_order_relaxed);
  while (seen < now_ns + ahead_ns &&
         !next_free.compare_exchange_weak(seen, now_ns + ahead_ns, std::memory_order_acq_rel)) {
  }
}

// ---- turns (gpusliced's batch groups, DESIGN.md section 4) ----

// How long before its turn a group may queue its first launches. The last
// holder's queue ends with its turn, and the device switches to a context
// with work as soon as that one runs dry: work queued a little early waits
// for it rather than the device idling while the next holder's thread wakes.
// Not beside a latency group (the gate then queues nothing early): while two
// batch contexts have work a latency kernel waits two slices.
inline constexpr int64_t kTurnLeadNs = 500'000;

// Which of a group's two plans (ComputeSchedule::Turns: the one in hand, and
// the next from its epoch) a launch at `now_ns` goes by: the next from its
// epoch, and from the lead into it too. A launch queued early under the plan
// in hand, for a turn of its that the next plan does not keep, would run
// into another group's turn (a group of 2 ms kernels queued 22 ms in the
// last 0.5 ms of a cycle, and the next holder's bracket measured all of it).
inline const TurnPlan& PlanAt(const TurnPlan& current, const TurnPlan& next, int64_t now_ns) {
  return next.epoch_ns != 0 && now_ns + kTurnLeadNs >= next.epoch_ns ? next : current;
}

// Where a launch stands under a turn plan (TurnPlan: period 0, no turns).
struct TurnVerdict {
  int64_t wait_ns = 0;   // 0: admit; else how long until the next turn opens
  bool started = true;   // the turn has begun (not in its lead)
  bool cut_off = false;  // its turn ends before it would complete, or it has none this cycle
};

// Whether a launch at `now_ns` charged `charge_ns`, on a stream with
// `ahead_ns` of work still queued before it, may go under `plan`: within
// its turn's window [start - lead, end), and only if it completes by the
// turn's end (now + ahead + charge <= end); a launch longer than the whole
// turn goes in the turn's first half when nothing is queued before it (its
// charge grew since the turn was planned: the scheduler gives long launches
// whole-launch turns). A plan whose turn is the whole cycle
// admits every launch. REQUIRES: lead_ns >= 0.
inline TurnVerdict TurnAt(const TurnPlan& plan, int64_t now_ns, int64_t ahead_ns, int64_t charge_ns,
                          int64_t lead_ns = kTurnLeadNs) {
  if (plan.period_ns <= 0 || plan.length_ns >= plan.period_ns) return {};
  const int64_t period = plan.period_ns;
  const int64_t length = std::max<int64_t>(1, plan.length_ns);
  // The cycle whose window [start - lead, start - lead + period) holds now.
  const int64_t since = now_ns + lead_ns - (plan.epoch_ns + plan.begin_ns);
  const int64_t cycle = since >= 0 ? since / period : -((-since + period - 1) / period);
  const int64_t start = plan.epoch_ns + plan.begin_ns + cycle * period;
  const int64_t end = start + length;
  TurnVerdict v{.wait_ns = 0, .started = now_ns >= start};
  if (length > 0 && now_ns < end &&
      (now_ns + std::max<int64_t>(0, ahead_ns) + charge_ns <= end ||
       (ahead_ns <= 0 && charge_ns >= length && now_ns < start + length / 2))) {
    return v;
  }
  v.wait_ns = std::max<int64_t>(1, start + period - lead_ns - now_ns);
  v.started = false;
  // Cut off: it came within its turn, or its turn this cycle is empty (held
  // over: the group has work the plan gave no room).
  v.cut_off = length == 0 || now_ns < end;
  return v;
}

// ---- the backlog watch's constants (shm/progress_watch.h) ----

// Slack of a first marker's allowance: other tenants' time slices and launch
// latency.
inline constexpr int64_t kBacklogSlackNs = 5'000'000;
// The longest a launch waits for its stream to drain (a stream that waits on
// the host, e.g. cuStreamWaitValue32, never drains by itself).
inline constexpr int64_t kBacklogMaxWaitNs = 2'000'000'000;

// The queue a correctly charged stream can hold, for launches paced at
// `interval_ns` of wall time each within `burst_ns` at `rate_bp`: the burst
// at its rate with half again for other tenants' time slices, two launches'
// intervals and the slack. A stream's first marker (the queue ahead of it
// unknown) is given this much more.
inline int64_t BacklogAllowanceNs(int64_t interval_ns, int64_t burst_ns, uint32_t rate_bp) {
  return burst_ns * rate_bp / 10000 * 3 / 2 + 2 * interval_ns + kBacklogSlackNs;
}

}  // namespace gpuslice
