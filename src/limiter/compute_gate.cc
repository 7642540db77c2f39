#include "limiter/compute_gate.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <ctime>
#include <type_traits>

#include "common/clock.h"
#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {
namespace {

// A paused launch looks at the segment again at least this often (resuming
// wakes it at once; this only bounds a missed wake-up).
constexpr int64_t kPausedRecheckNs = 100'000'000;

// The stream handle the driver means: stream 0 of a _ptsz entry point is the
// calling thread's default stream.
CUstream Effective(CUstream stream, bool per_thread) {
  return stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
}

// Waits while the group is paused, and until the budget of `dev` admits a
// launch estimated at `charge_ns` of device time (0: only until earlier
// charges are paid). Before each sleep for the budget it calls
// `before_nap()`, which may wait itself (the backlog watch) and returns the
// longest the sleep may last. False if the device is no longer paced (limit
// and grant lifted meanwhile). A charge refreshed from the budget meanwhile
// gets `floor` (a drain's measurement: ChargeFloor).
// While paused it calls `follow_queue()`, which looks at the
// stream's markers (the queue drains meanwhile: its launches are counted as
// they complete) and returns the longest the wait may sleep before looking
// again.
template <typename BeforeNap, typename FollowQueue>
bool Admit(const GroupSegment& segment, int dev, ComputeBudget budget, int64_t charge_ns,
           const ChargeFloor& floor, BeforeNap&& before_nap, FollowQueue&& follow_queue) {
  int64_t waiting_since = 0;
  int64_t now = 0;
  bool paced = true;
  // A wait is published as it starts (the scheduler sees a member stuck in a
  // long wait as held back, not idle) and counted as it ends.
  auto begin_wait = [&] {
    if (waiting_since != 0) return;
    waiting_since = now;
    budget.BeginWait();
  };
  for (;;) {
    const uint32_t seen = segment.ChangeWord();
    now = MonotonicNs();
    if (segment.schedule().Paused()) {
      // Resuming bumps the change word, which ends this wait at once.
      begin_wait();
      segment.WaitForChange(seen, std::min(kPausedRecheckNs, follow_queue()));
      continue;
    }
    // Gpusliced gave the device turns meanwhile: the caller admits by them.
    if (segment.schedule().TurnAt(dev, now).period_ns > 0) {
      paced = false;
      break;
    }
    const uint32_t rate_bp = segment.schedule().PacedRateBp(dev);
    if (rate_bp >= kFullGrantBp) {
      paced = false;
      break;
    }
    const int64_t burst = segment.schedule().BurstOrDefault(dev);
    const int64_t interval = PacedIntervalBpNs(charge_ns, rate_bp);
    // At the current rate the budget is never more than the burst and one
    // launch of any member ahead of now: anything beyond was charged at an
    // older, lower rate (a scheduler's small grant, cleared when gpusliced
    // stops), and waiting it out would stall the program for as long as that
    // rate said. (The members' charges are read only on that rare path.) A
    // bootstrap probe (charge_ns 0) clamps too, by the members' measured
    // charges: otherwise a probe after one admitted at a tiny grant waited
    // out that grant's whole charge. A member's measurement (a launch's wall
    // time beside other contexts) stops counting once its charge is known
    // (MaxMemberCharge), and a long wait naps at most kMaxPacerNapNs, so
    // that a budget run ahead on a measurement charged at a small grant is
    // pulled back soon after the charge is refined (issue 13's stall).
    if (budget.AheadBy(now) > burst + interval) {
      const int64_t known = std::max(charge_ns, segment.usage().MaxMemberCharge(dev));
      if (known > 0) budget.ClampAhead(now, burst + PacedIntervalBpNs(known, rate_bp));
    }
    const int64_t wait = budget.TryAdmit(now, interval, burst);
    if (wait == 0) break;
    begin_wait();
    // Sleep on until half the burst is free, so that one wake-up admits a
    // batch of small launches rather than one (nothing is lost: the budget
    // still runs ahead of now when this thread wakes), but never more than
    // about a slice past the time it is due (PacerNapNs).
    segment.WaitForChange(seen, std::min(PacerNapNs(wait, burst), before_nap()));
    // The controller may have refined the estimate while this thread slept.
    if (const int64_t fresh = budget.charge_ns(); fresh > 0) {
      charge_ns = floor.Apply(MonotonicNs(), fresh);
    }
  }
  if (waiting_since != 0) {
    budget.CountWait(now - waiting_since);
    budget.EndWait();
  }
  return paced;
}

// Runs the launch alone on its stream and waits for it: the wall time is an
// upper bound of the launch's device time (other tenants' slices can only add
// to it). The stream is drained first, so that work queued before the device
// was paced (a group that just got a grant) is not taken for this launch's.
// It is charged to the budget afterwards and kept as the bootstrap estimate.
CUresult Probe(const GroupSegment& segment, int dev, ComputeBudget budget, CUstream stream,
               CUresult (*call)(void*), void* launch) {
  const real::CudaTable& cu = real::Cuda();
  const bool can_sync = cu.cuStreamSynchronize != nullptr;
  // An earlier launch's error stays with the stream for the program to see.
  if (can_sync) cu.cuStreamSynchronize(stream);
  const int64_t start = MonotonicNs();
  const CUresult rc = call(launch);
  if (rc != CUDA_SUCCESS) return rc;
  budget.CountLaunch();
  if (!can_sync || cu.cuStreamSynchronize(stream) != CUDA_SUCCESS) {
    return rc;  // the launch's own error, if any, surfaces at the program's next sync
  }
  const int64_t measured = std::max<int64_t>(1, MonotonicNs() - start);
  budget.RecordProbe(measured);
  if (const uint32_t rate_bp = segment.schedule().PacedRateBp(dev); rate_bp < kFullGrantBp) {
    budget.ChargeAfter(start, PacedIntervalBpNs(measured, rate_bp));
  }
  return rc;
}

// While a stream has markers pending, a thread waiting for its budget
// wakes at least this often to look at them (a marker is due within
// milliseconds of the work ahead of it).
constexpr int64_t kWatchNapNs = 1'000'000;

// What the watch asks of the driver about `b`'s markers: whether one has
// completed, and how long after one another two did (the GPU's clock).
struct MarkerEvents {
  const real::CudaTable& cu;
  StreamBacklog& b;
  bool operator()(int i) const {
    return b.markers[i] == nullptr || cu.cuEventQuery(b.markers[i]) != CUDA_ERROR_NOT_READY;
  }
  int64_t operator()(int from, int to) const {
    float ms = 0;
    if (cu.cuEventElapsedTime == nullptr || b.markers[from] == nullptr ||
        b.markers[to] == nullptr ||
        cu.cuEventElapsedTime(&ms, b.markers[from], b.markers[to]) != CUDA_SUCCESS) {
      return -1;
    }
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }
};

// Drops the markers of `b` that have completed, counting their launches as
// complete and what they measured (StreamBacklog::Confirm). Returns the
// markers still pending. REQUIRES: the lock held.
int FollowMarkersLocked(StreamBacklog& b) {
  const real::CudaTable& cu = real::Cuda();
  if (cu.cuEventQuery == nullptr) return 0;
  const MarkerEvents events{cu, b};
  const int pending = b.watch.Poll(MonotonicNs(), events, events);
  b.Confirm();
  return pending;
}

int FollowMarkers(StreamBacklog& b) {
  b.Lock();
  const int pending = FollowMarkersLocked(b);
  b.Unlock();
  return pending;
}

// Records a marker behind the launches of `b` that have none yet (before a
// wait: they are then seen complete, and the stream seen idle, while the
// thread waits). REQUIRES: the lock held.
void FlushMarkerLocked(CUstream stream, StreamBacklog& b) {
  const real::CudaTable& cu = real::Cuda();
  const int i = b.watch.FlushIndex();
  if (i < 0 || cu.cuEventRecord == nullptr) return;
  CUevent& ev = b.markers[i];
  if (ev == nullptr && cu.cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ev = nullptr;
  if (ev != nullptr && cu.cuEventRecord(ev, stream) == CUDA_SUCCESS) b.watch.Marked(MonotonicNs());
}

// Waits (polling: the driver has no wait with a timeout) until `stream` has
// drained, the device is no longer paced, or kBacklogMaxWaitNs pass. Its
// markers are followed meanwhile: the launches of a backlog are counted as
// they complete, not in one lump when the drain ends.
void Drain(const GroupSegment& segment, int dev, CUstream stream, StreamBacklog& b) {
  const real::CudaTable& cu = real::Cuda();
  int64_t now = MonotonicNs();
  const int64_t deadline = now + kBacklogMaxWaitNs;
  int64_t nap_ns = 100'000;
  while (cu.cuStreamQuery(stream) == CUDA_ERROR_NOT_READY && now < deadline &&
         segment.schedule().PacedRateBp(dev) < kFullGrantBp) {
    const timespec ts{0, nap_ns};
    nanosleep(&ts, nullptr);
    nap_ns = std::min<int64_t>(nap_ns * 2, 2'000'000);
    FollowMarkers(b);
    now = MonotonicNs();
  }
}

// Before a launch on `stream` charged `charge_ns`: the backlog watch
// (shm/progress_watch.h). If a marker missed its deadline, waits for the
// stream to drain: every launch queued behind it is as wrongly charged; what
// the drain measured per launch is then the member's charge floor on the
// device (`floor`).
// While the scheduler has set the device's burst (gpusliced schedules the
// group), also waits while the stream's queue is deeper than QueueBoundNs
// (shm/launch_pacer.h, BoundsQueueByAge: its oldest unfinished marker older
// than that for a batch group beside a latency group, else recorded that long
// before the newest completion), looking every ProgressWatch::kQueryPeriodNs,
// at most kBacklogMaxWaitNs.
// Under turns (`turns`) the turn bounds the queue instead: only the backlog
// verdict applies.
// Returns the longest a wait for the budget may sleep before looking again.
int64_t WatchBacklog(const GroupSegment& segment, int dev, ComputeBudget budget, CUstream stream,
                     StreamBacklog& b, int64_t charge_ns, ChargeFloor& floor, bool turns = false) {
  constexpr int64_t kNoCap = INT64_MAX / 4;
  const uint32_t rate_bp = segment.schedule().PacedRateBp(dev);
  const real::CudaTable& cu = real::Cuda();
  if (rate_bp >= kFullGrantBp || cu.cuEventQuery == nullptr || cu.cuStreamQuery == nullptr) {
    return kNoCap;
  }
  const int64_t burst = segment.schedule().BurstOrDefault(dev);
  // The queue ahead of a first marker is unknown: what a correctly charged
  // stream can hold.
  const int64_t unknown_ahead =
      BacklogAllowanceNs(PacedIntervalBpNs(charge_ns, rate_bp), burst, rate_bp);
  const int64_t interval = PacedIntervalBpNs(charge_ns, rate_bp);
  const int64_t queue_bound = QueueBoundNs(interval, burst);
  const int64_t since = MonotonicNs();
  for (;;) {
    const int64_t now = MonotonicNs();
    b.Lock();
    const MarkerEvents events{cu, b};
    const ProgressWatch::Verdict verdict =
        b.watch.Check(now, unknown_ahead, rate_bp, events, events);
    b.Confirm();
    if (verdict == ProgressWatch::Verdict::kBacklog) b.watch.DrainBegan(now);
    const int pending = b.watch.pending();
    // A scheduled group's queue is bounded (shm/launch_pacer.h): by age while
    // taking turns beside a latency group, else by how far behind the device
    // serves it.
    const bool by_age = BoundsQueueByAge(segment.schedule().ComputeBurst(dev));
    const bool deep =
        by_age ? b.watch.PendingSince(now - queue_bound) : b.watch.BehindBy(queue_bound);
    b.Unlock();
    if (verdict == ProgressWatch::Verdict::kBacklog) {
      Drain(segment, dev, stream, b);
      b.Lock();
      const int64_t drained = MonotonicNs();
      b.watch.Drained(drained);
      floor.Measured(drained, b.watch.TakeDrainedCost(), charge_ns, rate_bp,
                     /*scheduled=*/segment.schedule().ComputeBurst(dev) > 0);
      b.Confirm();
      b.Unlock();
      return kNoCap;
    }
    if (turns || !deep || segment.schedule().ComputeBurst(dev) <= 0 ||
        now - since >= kBacklogMaxWaitNs) {
      return pending > 0 ? kWatchNapNs : kNoCap;
    }
    // What the budget would bank meanwhile would end the wait in a burst
    // (a turn's queue stays shallow). Not so when behind: a group waiting
    // while the device drains its queue in its own time slice may use the
    // rest of the slice once drained.
    if (by_age) budget.RaiseBehind(now, burst - interval);
    const timespec ts{0, ProgressWatch::kQueryPeriodNs};
    nanosleep(&ts, nullptr);
  }
}

// Before a launch on `stream`: whether the stream's newest marker is still
// pending (so that the interval the launch opens measures: the stream had
// work throughout, shm/progress_watch.h). Asks the driver only for the first
// launch since a marker. REQUIRES: the lock held.
bool NewestPendingLocked(const StreamBacklog& b) {
  const real::CudaTable& cu = real::Cuda();
  if (!b.watch.FirstSinceMark()) return false;
  const int newest = b.watch.newest();
  return newest >= 0 && b.markers[newest] != nullptr &&
         cu.cuEventQuery(b.markers[newest]) == CUDA_ERROR_NOT_READY;
}

// After a launch on `stream` charged `charge_ns`: counts it queued (until a
// marker behind it is seen complete) and puts a marker behind it when one is
// due, at most every `mark_period_ns` (creating the ring index's event in
// the current context on first use). `newest_pending`: NewestPendingLocked
// as the launch was queued; `alone`: the group holds the device (its turn),
// so that what its markers time is its own (else it only bounds it). A marker the driver refuses
// carries the charge to the next; the launches it would have followed are counted complete at once.
void MarkAfter(CUstream stream, StreamBacklog& b, ComputeBudget budget, int64_t charge_ns,
               bool newest_pending, int64_t mark_period_ns, bool alone) {
  const real::CudaTable& cu = real::Cuda();
  if (cu.cuEventCreate == nullptr || cu.cuEventRecord == nullptr || cu.cuEventQuery == nullptr) {
    return;  // no markers: counted when admitted
  }
  b.Lock();
  if (b.member != &budget.member()) {
    b.watch.ForgetLaunches();  // counted in another slot (a forked child's watch)
    b.device = &budget.device();
    b.member = &budget.member();
  }
  budget.Queued(1);
  const int64_t now = MonotonicNs();
  if (const int i = b.watch.Launched(now, charge_ns, newest_pending, mark_period_ns, alone);
      i >= 0) {
    CUevent& ev = b.markers[i];
    if (ev == nullptr && cu.cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ev = nullptr;
    if (ev != nullptr && cu.cuEventRecord(ev, stream) == CUDA_SUCCESS) {
      b.watch.Marked(now);
    } else {
      // No marker will follow these launches: counted as admitted, rather
      // than queued for as long as the driver refuses markers.
      b.watch.ConfirmUnmarked();
      b.Confirm();
    }
  }
  b.Unlock();
}

// ---- turns (a batch group under gpusliced, DESIGN.md section 4) ----

// While the scheduler bounds a stream's queue (SetQueueBound: batch groups
// beside a latency group), a stream that drains to let the device switch
// sleeps until about when its queue runs dry, then looks this often.
constexpr int64_t kRefillPollNs = 20'000;

// Waits until the group's turn on `dev` admits a launch charged `charge_ns`
// on `stream` (shm/launch_pacer.h TurnAt: within its turn, completing by its
// end; a turn that is the whole cycle, while the stream holds more than the
// burst), and, where the scheduler bounds the stream's queue, until a stream
// that reached the bound
// has drained (the device then switches to a latency group's context that
// has work). Marks the wait in the member's slot, as
// every gate wait is. Returns false, admitting nothing, if the device no
// longer has turns (the rate paces it again); `started` gets whether the
// turn had begun (not in its lead).
bool AdmitInTurn(const GroupSegment& segment, int dev, ComputeBudget budget, CUstream stream,
                 StreamBacklog& b, int64_t charge_ns, bool* started) {
  int64_t waiting_since = 0;
  bool cut_off = false;  // counted once per launch, whatever it waited for first
  auto end_wait = [&](int64_t now) {
    if (waiting_since == 0) return;
    budget.CountWait(now - waiting_since);
    budget.EndWait();
  };
  for (;;) {
    const uint32_t seen = segment.ChangeWord();
    const int64_t now = MonotonicNs();
    int64_t nap = 0;
    if (segment.schedule().Paused()) {
      nap = kPausedRecheckNs;
    } else {
      const auto [current, next] = segment.schedule().Turns(dev);
      const TurnPlan& plan = PlanAt(current, next, now);
      const bool switched = &plan == &next;
      if (plan.period_ns <= 0) {
        end_wait(now);
        return false;
      }
      b.Lock();
      FollowMarkersLocked(b);
      const uint64_t queued = b.watch.queued();
      const int64_t ahead = static_cast<int64_t>(queued) * charge_ns;
      const int64_t bound = segment.schedule().QueueBound(dev);
      if (bound <= 0 || queued == 0) b.refill = false;
      // A launch longer than the bound goes alone (its bracket measures it):
      // begun on a fresh slice, a kernel shorter than the slice is not
      // preempted, and the device switches once it ends.
      if (bound > 0 && queued > 0 && ahead + charge_ns > bound) b.refill = true;
      // A turn that is the whole cycle has no end to bound the queue: the
      // burst does (two launches at least, so that the device never waits for
      // the next one).
      const bool whole = plan.length_ns >= plan.period_ns;
      const int64_t burst = std::max(segment.schedule().BurstOrDefault(dev), 2 * charge_ns);
      if (b.refill) {
        FlushMarkerLocked(stream, b);
        // Until about when the queue runs dry, then a short look again.
        nap = std::max(kRefillPollNs, ahead - kRefillPollNs);
      } else if (whole && queued > 0 && ahead + charge_ns > burst) {
        FlushMarkerLocked(stream, b);
        nap = std::min(kWatchNapNs, std::max(kRefillPollNs, ahead + charge_ns - burst));
      } else {
        // A launch that is long for its turn (or not measured yet) goes at
        // the turn's start, not in its lead: its interval then measures
        // (BracketIfIdle), and the lead would hide little of it. Beside a
        // latency group (a queue bound) none goes early: two batch contexts
        // with work would make a latency kernel wait two slices.
        const bool long_launch = charge_ns == 0 || 4 * charge_ns > plan.length_ns;
        const int64_t lead = long_launch || bound > 0 ? 0 : kTurnLeadNs;
        const TurnVerdict v = TurnAt(plan, now, ahead, charge_ns, lead);
        if (v.wait_ns == 0) {
          *started = v.started;
          b.Unlock();
          end_wait(now);
          return true;
        }
        FlushMarkerLocked(stream, b);
        if (v.cut_off && !cut_off) {
          budget.CountCutOff();
          cut_off = true;
        }
        nap = v.wait_ns;
        // A plan that starts meanwhile may open a turn sooner.
        if (!switched && next.epoch_ns != 0) {
          nap = std::min(nap, std::max<int64_t>(1, next.epoch_ns - lead - now));
        }
        if (b.watch.pending() > 0) nap = std::min(nap, kWatchNapNs);
      }
      b.Unlock();
    }
    if (waiting_since == 0) {
      waiting_since = now;
      budget.BeginWait();
    }
    if (b.refill) {
      const timespec ts{0, std::min<int64_t>(nap, 100'000'000)};
      nanosleep(&ts, nullptr);
    } else {
      segment.WaitForChange(seen, std::min(nap, kPausedRecheckNs));
    }
  }
}

// Before a launch on an idle stream: a start marker brackets it (shm/
// progress_watch.h OpenBracket), so that its device time is measured even
// when the program waits for each launch or a turn holds one launch.
// `alone`: the group holds the device (its turn has begun, so the last
// holder's work has ended with its turn): the bracket measures; else (a
// group paced by its rate beside others) it bounds from above.
void BracketIfIdle(CUstream stream, StreamBacklog& b, bool alone) {
  const real::CudaTable& cu = real::Cuda();
  if (cu.cuEventRecord == nullptr) return;
  b.Lock();
  FollowMarkersLocked(b);
  if (const int i = b.watch.BracketIndex(); i >= 0) {
    CUevent& ev = b.markers[i];
    if (ev == nullptr && cu.cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ev = nullptr;
    if (ev != nullptr && cu.cuEventRecord(ev, stream) == CUDA_SUCCESS) {
      b.watch.BracketMarked(MonotonicNs(), alone);
    }
  }
  b.Unlock();
}

// Whether a launch in its turn (`started`: the turn has begun) holds the
// device alone: not beside a latency group (whose kernel may come between a
// bracket's start and its launch), except for a launch longer than the queue
// bound there (or not measured yet), which never queues behind another and
// is bracketed still (the latency kernels that preempt it count with it).
bool AloneInTurn(const GroupSegment& segment, int dev, int64_t charge_ns, bool started) {
  const int64_t bound = segment.schedule().QueueBound(dev);
  return started && (bound <= 0 || charge_ns == 0 || charge_ns > bound);
}

// Makes a watched launch (charged `charge_ns`) and marks it: queued before
// counted, so that the controller never counts it complete early. Where the
// scheduler bounds the stream's queue (`queue_bound_ns` > 0) markers come
// more often, so that the short runs between the stream's drains still hold
// measured intervals. `in_turn`: in the group's turn (its intervals are its
// own).
CUresult LaunchWatched(CUstream stream, StreamBacklog& b, ComputeBudget budget, int64_t charge_ns,
                       CUresult (*call)(void*), void* launch, int64_t queue_bound_ns,
                       bool in_turn) {
  b.Lock();
  const bool newest_pending = NewestPendingLocked(b);
  b.Unlock();
  const CUresult rc = call(launch);
  if (rc == CUDA_SUCCESS) {
    const int64_t period = queue_bound_ns > 0
                               ? std::min(ProgressWatch::kMarkPeriodNs, queue_bound_ns / 4)
                               : ProgressWatch::kMarkPeriodNs;
    MarkAfter(stream, b, budget, charge_ns, newest_pending, period, in_turn);
    budget.CountLaunch();
  }
  return rc;
}

}  // namespace

void ComputeGate::PublishLocked() {
  const real::CudaTable* cuda = real::CudaIfLoaded();
  GroupSegment* segment = segment_.load(std::memory_order_acquire);
  if (cuda == nullptr || (segment == nullptr && !disarmed_)) {
    LaunchFastPath::SetThroughHooks();
  } else if (segment == nullptr) {
    LaunchFastPath::SetUnpaced(cuda);
  } else {
    LaunchFastPath::Set(segment->schedule().ComputeLimitedWord(), cuda);
  }
}

CUresult ComputeGate::PacedSlow(CUstream stream, bool per_thread, Trampoline call, void* launch) {
  GroupSegment* segment = segment_.load(std::memory_order_acquire);
  stream = Effective(stream, per_thread);
  // Captured work runs (and is charged) when its graph is launched.
  const StreamCaptures* captures = captures_.load(std::memory_order_acquire);
  if (captures != nullptr && captures->Capturing(stream, real::Cuda().cuStreamIsCapturing)) {
    return call(launch);
  }
  StreamBacklog* backlog = nullptr;
  const int dev = streams_.Resolve(stream, &backlog);
  if (dev < 0 || (segment->schedule().ComputeLimitedMask() & (1u << dev)) == 0) return call(launch);
  Ledger* ledger = ledger_.load(std::memory_order_acquire);
  const int slot = ledger != nullptr ? ledger->JoinedSlot() : -1;
  if (slot < 0) return call(launch);  // not a member (no slot left): nothing to charge to
  ComputeBudget budget = segment->usage().Budget(dev, slot);

  // Until the controller has an estimate of this member's launches, its
  // first launches are measured. After a drain, at least what it measured.
  ChargeFloor& floor = floors_[dev];
  const auto own_charge = [&] {
    const int64_t c = budget.charge_ns();
    return c > 0 ? floor.Apply(MonotonicNs(), c) : 0;
  };
  int64_t charge = own_charge();
  bool probe = false;
  if (charge == 0) {
    probe = budget.TakeProbe(kBootstrapProbes);
    charge = probe ? 0 : budget.probe_ns();
  }
  const bool watched = !probe && charge > 0;
  // A batch group under gpusliced takes turns: its turn is its rate.
  if (segment->schedule().TurnAt(dev, MonotonicNs()).period_ns > 0) {
    bool started = false;
    const int64_t fit = probe ? budget.probe_ns() : charge;
    if (watched) WatchBacklog(*segment, dev, budget, stream, *backlog, charge, floor, true);
    if (AdmitInTurn(*segment, dev, budget, stream, *backlog, fit, &started)) {
      if (probe) return Probe(*segment, dev, budget, stream, call, launch);
      if (AloneInTurn(*segment, dev, charge, started)) BracketIfIdle(stream, *backlog, true);
      return LaunchWatched(stream, *backlog, budget, charge, call, launch,
                           segment->schedule().QueueBound(dev),
                           /*in_turn=*/true);
    }
    // No turns any more: the rate paces it, below.
  }
  if (watched) {
    WatchBacklog(*segment, dev, budget, stream, *backlog, charge, floor);
    // A drain just now measured the launches' cost.
    if (const int64_t fresh = own_charge(); fresh > 0) charge = fresh;
  }
  const auto before_nap = [&] {
    return watched ? WatchBacklog(*segment, dev, budget, stream, *backlog, charge, floor)
                   : INT64_MAX / 4;
  };
  // While paused, the stream's queue drains: its markers are followed (the
  // controller counts launches as they complete).
  const auto follow_queue = [&] {
    return watched && FollowMarkers(*backlog) > 0 ? kWatchNapNs : INT64_MAX / 4;
  };
  if (!Admit(*segment, dev, budget, charge, floor, before_nap, follow_queue)) {
    // No longer paced, or turns since: a launch under turns waits for them.
    if (segment->schedule().TurnAt(dev, MonotonicNs()).period_ns > 0) {
      return PacedSlow(stream, per_thread, call, launch);
    }
    return call(launch);
  }
  if (probe) return Probe(*segment, dev, budget, stream, call, launch);
  // Under gpusliced (it set the burst) a group paced by its rate beside
  // others brackets launches on an idle stream: its launches' time bounds
  // their cost from above (a latency group's, each waited for).
  if (watched && segment->schedule().ComputeBurst(dev) > 0) BracketIfIdle(stream, *backlog, false);
  if (!watched) {
    const CUresult rc = call(launch);
    if (rc == CUDA_SUCCESS) budget.CountLaunch();
    return rc;
  }
  return LaunchWatched(stream, *backlog, budget, charge, call, launch, /*queue_bound_ns=*/0,
                       /*in_turn=*/false);
}

}  // namespace gpuslice::limiter
