// ProgressWatch: one stream's markers and the deadline each must meet
// (DESIGN.md section 2, compute limits; docs/compute.md "Backlog watch").
//
// The budget charges a launch its *estimated* device time. When kernels
// become much longer with nothing in the launch to tell (same function, same
// grid), the estimate is short until the controller has seen NVML windows of
// the new workload (a sixth of a second at best), and meanwhile launches are
// admitted at the old charge. Under a 70 % cap a stream keeps about 14 ms of
// the old work queued, so about 50 launches of the new kind are admitted
// before the first of them even starts: that part no observation can stop.
// What the watch bounds is what comes after: it puts a marker (an event) on
// the stream every kMarkPeriodNs of launches, remembers what the launches
// between two markers were charged, and expects each marker to complete at
// most twice that charge plus kSlackNs after the later of its predecessor's
// completion (as first seen) and its own recording; at low rates the charge
// stretched by the group's rate (x 5/4) where that is more: other tenants'
// time slices can hold the device while the marker's work waits, and a group
// paced at rate r gets at least about r of the device while it has work
// (four tenants' 20 ms kernels sliced round-robin take four times their
// length). The work
// behind a marker cannot start before its predecessor has completed, so
// this holds for every correctly charged stream whatever its queue depth; a
// marker that misses it proves the launches behind it cost more than they
// were charged, typically within a couple of milliseconds of the first long
// kernel's start. The caller then drains the stream (every launch queued
// since is as wrongly charged) before the next launch.
//
// The first marker after a Reset has an unknown queue ahead of it (work
// launched before the watch began): it gets `unknown_ahead_ns` more.
//
// Launches seen complete (issues 13 and 14): the watch also counts the
// launches behind each marker, so it knows which of them the GPU has run.
// The group controller learns a launch's cost by dividing busy time by
// launches over the same spans, and the busy time arrives as the GPU runs
// them, up to a second after they were admitted (a backlog after a workload
// change; a queue draining while the scheduler holds the group). So the launch
// path publishes how many of its launches are still queued (admitted, not yet
// seen complete: SlotCompute::queued) and the controller counts a launch when
// it is seen complete. confirmed() counts the launches whose marker completed
// (Check, Poll) or whose stream drained (Drained) since the last
// TakeConfirmed(); outstanding() those not yet confirmed.
//
// What a drain measures (issue 14): the launches it waited for ran one after
// another, so its wall time over their number is what each cost, an upper
// bound of its device time (other tenants' slices only add to it).
// DrainBegan() then Drained() measure it (TakeDrainedCost); ChargeFloor
// (below) charges the member's launches at least that much until the
// controller has learned their cost.
//
// What the markers measure (DESIGN.md section 8, "Evidence"): each marker is
// a timed event, and the time between two consecutive markers' completions
// (cuEventElapsedTime, the GPU's own clock) is the device time of the
// launches between them, plus any time the stream's context was switched out
// meanwhile (none while the group holds the device alone: its turn, DESIGN.md
// section 4; else the interval only bounds), when the stream had work
// throughout: the interval's first launch
// was queued while the previous marker was still pending (`newest_pending` in
// Launched), or the interval was opened by a start marker on an idle stream
// while the group held the device alone (OpenBracket; the launch after it
// gets its marker at once). Other intervals (the stream ran dry in them, or
// their start is unknown) measure nothing. TakeBusy() hands over what the
// measured intervals held: where the group's context runs alone (its turn,
// DESIGN.md section 4) that is exactly its device time per launch. A start
// marker recorded while another group's context may hold the device
// (OpenBracket with `alone` false) opens an interval that only bounds its
// launch's device time from above (its wait for the device counts too):
// TakeBusy hands that over apart.
// Consecutive markers are never more than kMarkers - 1 apart in the ring, so
// that the last completed marker keeps its timestamp for the next.
//
// Pure arithmetic on a ring of kMarkers markers: the caller records the
// events (ring index -> event), answers whether one has completed and, for
// the measurement, how long after one another two completed. Not
// thread-safe: the caller serialises the calls for one stream.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace gpuslice {

class ProgressWatch {
  // The elapsed time Check and Poll use when the caller gives none.
  struct NoElapsed {
    int64_t operator()(int, int) const { return -1; }
  };

 public:
  // Enough for the ~20 ms of launches (one marker per kMarkPeriodNs) admitted
  // at an old, short charge before the first long kernel starts under a 70 %
  // cap: launches past a full ring are confirmed with the next marker or the
  // drain's end, in one lump.
  static constexpr int kMarkers = 32;
  // A marker at most this often (per stream): a driver call per period, not
  // per launch.
  static constexpr int64_t kMarkPeriodNs = 1'000'000;
  // A marker's completion is looked at no more often than this while it is
  // not yet due (when it is due, on every check).
  static constexpr int64_t kQueryPeriodNs = 500'000;
  // Tolerance: kernels' own jitter, other tenants' time slices, a short
  // copy between two launches, and how late a completion is first seen.
  static constexpr int64_t kSlackNs = 2'000'000;
  // A marker's allowance: the larger of twice its launches' charge and
  // their charge stretched by the group's rate times 5/4.
  static constexpr int64_t kFactor = 2;
  static constexpr int64_t kStretchNum = 5;
  static constexpr int64_t kStretchDen = 4;

  enum class Verdict {
    kOk,       // launch
    kBacklog,  // a marker missed its deadline: drain the stream, then Drained()
  };

  // Before a launch at `now_ns`: drops the markers `done(index)` says have
  // completed (oldest first), then judges the oldest still pending.
  // `unknown_ahead_ns`: the allowance of a first marker (see above);
  // `rate_bp`: the group's rate on the device (1..10000).
  // `elapsed(a, b)`: the ns from marker a's completion to marker b's (-1:
  // not known); see Poll.
  template <typename Done, typename Elapsed = NoElapsed>
  Verdict Check(int64_t now_ns, int64_t unknown_ahead_ns, uint32_t rate_bp, Done&& done,
                Elapsed&& elapsed = {}) {
    if (count_ == 0) return Verdict::kOk;
    if (now_ns < Deadline(unknown_ahead_ns, rate_bp) && now_ns - last_query_ns_ < kQueryPeriodNs) {
      return Verdict::kOk;
    }
    last_query_ns_ = now_ns;
    Poll(now_ns, done, elapsed);
    if (count_ == 0 || now_ns <= Deadline(unknown_ahead_ns, rate_bp)) return Verdict::kOk;
    return Verdict::kBacklog;
  }

  // Drops the markers `done(index)` says have completed (oldest first),
  // confirming their launches, without judging the rest (a thread that
  // waits for a drain or a hold follows the queue). A completed marker whose
  // interval measures (see above) adds `elapsed(previous index, its index)`
  // (ns, the previous marker's completion to its own; negative: not known)
  // and its launches to the measurement. Returns pending().
  template <typename Done, typename Elapsed = NoElapsed>
  int Poll(int64_t now_ns, Done&& done, Elapsed&& elapsed = {}) {
    while (count_ > 0 && done(head_)) {
      const Marker& m = ring_[head_];
      if (m.measure != Measure::kNone && previous_done_) {
        if (const int64_t e = elapsed((head_ + kMarkers - 1) % kMarkers, head_); e > 0) {
          Busy& to = m.measure == Measure::kExact ? busy_ : bound_;
          to.ns += e;
          to.launches += m.launches;
          if (m.measure == Measure::kBound && m.launches > 0) {
            floors_[floor_next_++ % kFloorLaunches] = e / static_cast<int64_t>(m.launches);
          }
        }
      }
      previous_done_ = true;
      last_done_ns_ = now_ns;
      known_ahead_ = true;
      confirmed_ += ring_[head_].launches;
      outstanding_ -= ring_[head_].launches;
      head_ = (head_ + 1) % kMarkers;
      --count_;
      if (drain_began_ns_ >= 0 && drain_mark_ns_ < 0) {
        drain_mark_ns_ = now_ns;
        drain_mark_launches_ = outstanding_;
      }
    }
    return count_;
  }

  // True if the next launch is the first since the last marker: the caller
  // then tells Launched whether that marker (newest()) is still pending.
  bool FirstSinceMark() const { return unmarked_launches_ == 0; }
  // The ring index of the newest marker recorded, or -1 if none is pending.
  int newest() const { return count_ > 0 ? (head_ + count_ - 1) % kMarkers : -1; }

  // After a launch at `now_ns` charged `charge_ns` of device time: the ring
  // index at which to record a marker now (then Marked), or -1 for none.
  // `newest_pending` (looked at only for the first launch since the last
  // marker): the newest marker had not completed when this launch was
  // queued, so the stream had work from then on; the interval then measures
  // if the group holds the device `alone`, else it bounds. `mark_period_ns`:
  // a marker at most this often (a bracket's launch gets one at once).
  int Launched(int64_t now_ns, int64_t charge_ns, bool newest_pending = false,
               int64_t mark_period_ns = kMarkPeriodNs, bool alone = true) {
    if (unmarked_launches_ == 0 && !bracket_open_) {
      open_measure_ = !newest_pending || count_ == 0 ? Measure::kNone
                      : alone                        ? Measure::kExact
                                                     : Measure::kBound;
    }
    unmarked_charge_ns_ += charge_ns;
    ++unmarked_launches_;
    ++outstanding_;
    if (count_ >= kMarkers - 1) return -1;
    if (!bracket_open_ && now_ns - last_mark_ns_ < mark_period_ns) return -1;
    return (head_ + count_) % kMarkers;
  }
  // A marker was recorded at the index Launched gave, at `now_ns`. (Not
  // calling it, e.g. the driver refused, carries the charge to the next.)
  void Marked(int64_t now_ns) {
    ring_[(head_ + count_) % kMarkers] = {now_ns, unmarked_charge_ns_, unmarked_launches_,
                                          open_measure_};
    ++count_;
    unmarked_charge_ns_ = 0;
    unmarked_launches_ = 0;
    last_mark_ns_ = now_ns;
    open_measure_ = Measure::kNone;
    bracket_open_ = false;
  }

  // The ring index at which to record a marker behind the launches that have
  // none yet (before a wait: they are then seen complete while the thread
  // waits), or -1 (none, or the ring is full); then Marked.
  int FlushIndex() const {
    return unmarked_launches_ > 0 && count_ < kMarkers - 1 ? (head_ + count_) % kMarkers : -1;
  }

  // Before a launch on an idle stream (nothing pending, nothing unmarked):
  // the ring index at which to record a start marker now (then
  // BracketMarked), or -1 for none. The interval it opens measures the
  // launch's device time if the group holds the device `alone`, else bounds
  // it; the next launch gets its marker at once.
  int BracketIndex() const {
    return count_ == 0 && unmarked_launches_ == 0 ? (head_ + count_) % kMarkers : -1;
  }
  void BracketMarked(int64_t now_ns, bool alone) {
    ring_[(head_ + count_) % kMarkers] = {now_ns, 0, 0, Measure::kNone};
    ++count_;
    open_measure_ = alone ? Measure::kExact : Measure::kBound;
    bracket_open_ = true;
  }

  // A drain begins at `now_ns` (Check said kBacklog): the launches not yet
  // confirmed are what it waits for.
  void DrainBegan(int64_t now_ns) {
    drain_began_ns_ = now_ns;
    drain_launches_ = outstanding_;
    drain_mark_ns_ = -1;
  }
  // The stream drained at `now_ns` (all markers complete).
  void Drained(int64_t now_ns) {
    // Measured from the late marker's completion where it was seen: the
    // launches before it may hold the old workload's (and the one running
    // when the drain began), those after it are all of the new.
    if (drain_mark_ns_ >= 0 && drain_mark_launches_ > 0 && now_ns > drain_mark_ns_) {
      drained_cost_ns_ = (now_ns - drain_mark_ns_) / static_cast<int64_t>(drain_mark_launches_);
    } else if (drain_began_ns_ >= 0 && drain_launches_ > 0 && now_ns > drain_began_ns_) {
      drained_cost_ns_ = (now_ns - drain_began_ns_) / static_cast<int64_t>(drain_launches_);
    }
    drain_began_ns_ = -1;
    drain_launches_ = 0;
    drain_mark_ns_ = -1;
    count_ = 0;
    confirmed_ += outstanding_;
    outstanding_ = 0;
    unmarked_launches_ = 0;
    unmarked_charge_ns_ = 0;
    last_done_ns_ = now_ns;
    known_ahead_ = true;
    previous_done_ = false;  // the markers it dropped measured nothing
    open_measure_ = Measure::kNone;
    bracket_open_ = false;
  }
  // Forgets everything (a new stream, another device): the queue ahead of
  // the next marker is unknown.
  void Reset() { *this = ProgressWatch(); }

  // Forgets the launches not yet confirmed, keeping the markers (they were
  // counted for another member: a forked child's inherited watch).
  void ForgetLaunches() {
    for (Marker& m : ring_) m.launches = 0;
    unmarked_launches_ = 0;
    outstanding_ = 0;
    confirmed_ = 0;
    busy_ = {};
    bound_ = {};
  }
  // Confirms the launches made since the last marker (none will follow
  // them: the driver refused it), whether or not they have run.
  void ConfirmUnmarked() {
    confirmed_ += unmarked_launches_;
    outstanding_ -= unmarked_launches_;
    unmarked_launches_ = 0;
  }
  // The wall time per launch of the last drain (DrainBegan to Drained) since
  // the last call, 0 if none; zeroes it.
  int64_t TakeDrainedCost() {
    const int64_t c = drained_cost_ns_;
    drained_cost_ns_ = 0;
    return c;
  }
  // What the measured intervals held since the last call (device ns and
  // their launches), and what the bounding ones did; zeroes both.
  struct Busy {
    int64_t ns = 0;
    uint64_t launches = 0;
  };
  struct Taken {
    Busy exact;
    Busy bound;
  };
  // The least per launch of the last kFloorLaunches bounding intervals (0:
  // fewer than kFloorMinLaunches yet): a bracketed launch that found the
  // device free, the closest these bounds come to its device time.
  static constexpr int kFloorLaunches = 64;
  static constexpr int kFloorMinLaunches = 16;
  int64_t BoundFloorNs() const {
    if (floor_next_ < kFloorMinLaunches) return 0;
    int64_t least = 0;
    for (int i = 0; i < std::min<int>(floor_next_, kFloorLaunches); ++i) {
      if (least == 0 || (floors_[i] > 0 && floors_[i] < least)) least = floors_[i];
    }
    return least;
  }
  Taken TakeBusy() {
    const Taken t{busy_, bound_};
    busy_ = {};
    bound_ = {};
    return t;
  }
  // Launches confirmed (run by the GPU) since the last call; zeroes the count.
  uint64_t TakeConfirmed() {
    const uint64_t n = confirmed_;
    confirmed_ = 0;
    return n;
  }
  // Launches made (Launched) and not yet confirmed, nor taken.
  uint64_t outstanding() const { return outstanding_ + confirmed_; }
  // Launches made and not yet seen complete (whether taken or not).
  uint64_t queued() const { return outstanding_; }

  // Markers pending.
  int pending() const { return count_; }
  // True if a marker recorded before `t_ns` is still pending (as last seen:
  // Check drops the completed ones). The stream's queue is at least that old.
  bool PendingSince(int64_t t_ns) const { return count_ > 0 && ring_[head_].recorded_at_ns < t_ns; }
  // True if the oldest pending marker was recorded more than `lag_ns` before
  // the newest completion was seen: the device is serving this stream, and
  // what it runs now was queued that long before the oldest work still
  // waiting (a queue that grows because launches are admitted faster than
  // the device serves them). A stream waiting for its turn (other contexts'
  // time slices: nothing of it completed since the marker was recorded) is
  // not behind, however old its queue.
  bool BehindBy(int64_t lag_ns) const {
    return count_ > 0 && known_ahead_ && last_done_ns_ - ring_[head_].recorded_at_ns > lag_ns;
  }
  // When the oldest pending marker is due (meaningless when none is).
  int64_t Deadline(int64_t unknown_ahead_ns, uint32_t rate_bp) const {
    const Marker& m = ring_[head_];
    const int64_t stretched =
        m.charged_ns * 10000 / std::max<int64_t>(1, rate_bp) * kStretchNum / kStretchDen;
    return std::max(m.recorded_at_ns, last_done_ns_) + std::max(kFactor * m.charged_ns, stretched) +
           kSlackNs + (known_ahead_ ? 0 : unknown_ahead_ns);
  }

 private:
  // What a marker's interval (from the previous marker's completion to its
  // own) says of its launches' device time.
  enum class Measure : uint8_t { kNone, kExact, kBound };
  struct Marker {
    int64_t recorded_at_ns = 0;
    int64_t charged_ns = 0;  // the launches between the previous marker and this one
    uint64_t launches = 0;   // how many they were
    Measure measure = Measure::kNone;
  };
  std::array<Marker, kMarkers> ring_{};
  int head_ = 0;
  int count_ = 0;
  int64_t unmarked_charge_ns_ = 0;
  uint64_t unmarked_launches_ = 0;
  uint64_t outstanding_ = 0;  // launched, not yet confirmed
  uint64_t confirmed_ = 0;    // confirmed, not yet taken
  int64_t last_mark_ns_ = 0;
  int64_t last_done_ns_ = 0;  // when the newest completed marker was seen complete
  int64_t last_query_ns_ = 0;
  bool known_ahead_ = false;
  int64_t drain_began_ns_ = -1;       // the drain under way (-1: none)
  uint64_t drain_launches_ = 0;       // the launches it waits for
  int64_t drain_mark_ns_ = -1;        // when its first marker was seen complete (-1: not yet)
  uint64_t drain_mark_launches_ = 0;  // the launches left then
  int64_t drained_cost_ns_ = 0;       // the last drain's wall time per launch, not yet taken
  // The measurement (see above): whether the marker before the head
  // completed through Poll (its timestamp is the head's interval's start),
  // what the interval being collected measures, and whether a start marker
  // opened it.
  bool previous_done_ = false;
  Measure open_measure_ = Measure::kNone;
  bool bracket_open_ = false;
  Busy busy_;
  Busy bound_;
  std::array<int64_t, kFloorLaunches> floors_{};  // BoundFloorNs's, a ring
  int floor_next_ = 0;
};

// ChargeFloor: a member's launch charge on one device after a drain (issue
// 14). A drain proves the charge short: the launches behind a late marker
// cost more than they were charged. The controller learns their new cost only
// from NVML windows of them (two windows at least, a third of a second, and
// later when its thread is descheduled on a loaded host or a window arrives
// late). A drain that ended before that left the launch path with the old
// charge, and the budget, idle during the drain, admitted a whole burst at it
// before the next marker was due: at 70 %, 70 launches, 1.4 s of 20 ms
// kernels (bench/share_accuracy's outlier: the overuse ran a second past the
// change). So for kHoldNs after a drain a launch is charged at least what the
// drain measured per launch (ProgressWatch::TakeDrainedCost): by then the
// controller has relearned the cost from NVML (its estimate climbs towards
// the new cost over a few windows after the shift; a floor that gave way to
// an estimate half-way there let a 70 % group run at 78 %). The measurement
// is an upper bound (others' slices stretch it): a wrong floor costs a member
// some of its share for at most kHoldNs, never an overshoot.
//
// Thread-safe (relaxed atomics: a launch that reads a stale floor is charged
// the controller's charge, as before).
class ChargeFloor {
 public:
  static constexpr int64_t kHoldNs = 1'000'000'000;

  constexpr ChargeFloor() = default;
  ChargeFloor(const ChargeFloor& o)
      : floor_ns_(o.floor_ns_.load(std::memory_order_relaxed)),
        until_ns_(o.until_ns_.load(std::memory_order_relaxed)) {}
  ChargeFloor& operator=(const ChargeFloor& o) {
    floor_ns_.store(o.floor_ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    until_ns_.store(o.until_ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }

  // A drain that ended at `now_ns` measured `cost_ns` per launch (0: none)
  // of launches charged `charge_ns` at `rate_bp` (1..10000). A cost within
  // the watch's own allowance of the charge (twice it, or it stretched by
  // the rate x 5/4: other tenants' time slices) proves nothing about the
  // charge and sets no floor: among four tenants of 200 us kernels such a
  // floor held a 30 % tenant at 22 % for a second, and it overshot after.
  // Nor does any cost where gpusliced schedules the device (`scheduled`: it
  // set the burst): the other groups' contexts stretch a drain by up to
  // their number, whatever this group's rate (among 20 groups such floors
  // held a request-5 group at 4.5-6.8 % of its 9.5 in half the runs), and
  // the daemon's controller and capacity estimate the cost there.
  void Measured(int64_t now_ns, int64_t cost_ns, int64_t charge_ns, uint32_t rate_bp,
                bool scheduled) {
    const int64_t stretched = charge_ns * 10000 / std::max<int64_t>(1, rate_bp) *
                              ProgressWatch::kStretchNum / ProgressWatch::kStretchDen;
    if (scheduled || cost_ns <= 0 ||
        cost_ns <= std::max(ProgressWatch::kFactor * charge_ns, stretched)) {
      return;
    }
    floor_ns_.store(cost_ns, std::memory_order_relaxed);
    until_ns_.store(now_ns + kHoldNs, std::memory_order_relaxed);
  }
  // The charge of a launch at `now_ns` whose controller's charge is
  // `charge_ns` (> 0).
  int64_t Apply(int64_t now_ns, int64_t charge_ns) const {
    if (now_ns >= until_ns_.load(std::memory_order_relaxed)) return charge_ns;
    return std::max(charge_ns, floor_ns_.load(std::memory_order_relaxed));
  }

 private:
  std::atomic<int64_t> floor_ns_{0};
  std::atomic<int64_t> until_ns_{0};
};

}  // namespace gpuslice
