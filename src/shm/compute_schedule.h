// ComputeSchedule: what gpusliced's scheduler sets for a group and the
// launch path obeys (DESIGN.md section 4), a view of its GroupSegment
// (segment.schedule(); include/gpuslice/group_segment.h, DeviceCompute).
//
// Per device: a grant (the group's share), a burst tolerance, a bound on one
// stream's queue and the turn plans; for the group: paused. Launches are
// paced at the lower of the compute limit and the grant. Every setter that
// changes a value wakes the launches waiting on the segment's change word.
//
// A view holds a reference only: valid while its segment is. Thread-safe:
// every field is read and written atomically.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

#include "gpuslice/group_segment.h"
#include "shm/launch_pacer.h"

namespace gpuslice {

// What the scheduler reads of one device (each field atomically).
struct ComputeCounters {
  uint64_t launches;     // admitted so far
  uint64_t waits;        // launches that waited for budget (held back by the rate)
  uint64_t wait_ns;      // their total wait
  uint64_t cut_off;      // launches their turn's end cut off (DeviceCompute::cut_off)
  int64_t charge_ns;     // estimated device time of one launch; 0: not known yet
  int32_t share_bp;      // measured share; -1: never measured
  uint32_t waiting;      // members with a thread waiting in the launch gate now
  int64_t next_free_ns;  // the budget: when the work admitted so far is paid for
};

class ComputeSchedule {
 public:
  explicit ComputeSchedule(GroupSegmentLayout& layout) : layout_(layout) {}

  // Sets the group's share of `dev` in basis points (1..kFullGrantBp; 0: no
  // grant, the limit alone paces).
  void SetComputeGrant(int dev, uint32_t grant_bp);
  uint32_t ComputeGrant(int dev) const;
  // Sets how far ahead of now the group may have admitted work on `dev`
  // (0: kPacerBurstNs).
  void SetComputeBurst(int dev, int64_t burst_ns);
  int64_t ComputeBurst(int dev) const;
  // The burst in effect on `dev`: ComputeBurst, or kPacerBurstNs when none is
  // set (one read).
  int64_t BurstOrDefault(int dev) const {
    const int64_t burst = ComputeBurst(dev);
    return burst > 0 ? burst : kPacerBurstNs;
  }
  // Sets the most work one stream of the group may have queued on `dev`
  // (DeviceCompute::queue_ns; 0: no such bound).
  void SetQueueBound(int dev, int64_t queue_ns);
  int64_t QueueBound(int dev) const;
  // Sets the group's turns on `dev`: `current` until `next.epoch_ns`, `next`
  // from then on (next.epoch_ns 0: `current` only). A plan with period 0: no
  // turns.
  void SetTurns(int dev, const TurnPlan& current, const TurnPlan& next);
  // The plan in effect on `dev` at `now_ns` (period 0: no turns). Never waits
  // long: a plan being written for too long (a writer that died inside) reads
  // as no turns.
  TurnPlan TurnAt(int dev, int64_t now_ns) const;
  // Both plans as written (TurnAt's sources).
  std::pair<TurnPlan, TurnPlan> Turns(int dev) const;
  // Pauses (launches on every device wait; memory is kept) or resumes the
  // group; resuming wakes the waiting launches at once.
  void SetPaused(bool paused);
  bool Paused() const;
  // Clears every grant, burst, queue bound and turn plan (a member taking
  // control back from the daemon: self-control paces by the limits alone).
  // `paused` stays.
  void ClearSchedule();

  // The rate launches on `dev` are paced at, in basis points of the device:
  // the lower of the compute limit and the grant; kFullGrantBp: not paced.
  uint32_t PacedRateBp(int dev) const;
  // Bit d set: launches on device d take the paced path: it has a compute
  // limit below 100 or a grant below the whole device, or turns, or the
  // group is paused (one load; the launch path's test for "nothing to pace").
  uint32_t ComputeLimitedMask() const {
    return std::atomic_ref<uint32_t>(layout_.compute_limited).load(std::memory_order_acquire);
  }
  // The word ComputeLimitedMask() reads, for a reader that keeps its address
  // (the limiter's launch fast path); alive as long as the mapping.
  uint32_t* ComputeLimitedWord() const { return &layout_.compute_limited; }

  ComputeCounters Counters(int dev) const;

 private:
  GroupSegmentLayout& layout_;
};

}  // namespace gpuslice
