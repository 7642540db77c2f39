#include "shm/compute_schedule.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "shm/segment_fields.h"

namespace gpuslice {
namespace {

using segment_fields::Atomic;
using segment_fields::Load;

// The turn plans of a device, under its sequence lock (`turn_seq` odd while
// a writer is inside). Readers retry; one that finds a writer inside for
// kTurnReadTries reads no turns (a writer that died there must not stop the
// launch path).
constexpr int kTurnReadTries = 1000;

// No fences (ThreadSanitizer has none): the plan's fields are stored with
// release and loaded with acquire, so a reader that loads a field a writer
// stored inside also sees that writer's odd sequence number when it looks
// again, and its second look cannot move before its loads.
void StorePlan(TurnPlan& to, const TurnPlan& from) {
  Atomic(to.epoch_ns).store(from.epoch_ns, std::memory_order_release);
  Atomic(to.period_ns).store(from.period_ns, std::memory_order_release);
  Atomic(to.begin_ns).store(from.begin_ns, std::memory_order_release);
  Atomic(to.length_ns).store(from.length_ns, std::memory_order_release);
}

TurnPlan LoadPlan(const TurnPlan& from) {
  return {Load(from.epoch_ns), Load(from.period_ns), Load(from.begin_ns), Load(from.length_ns)};
}

void WriteTurns(DeviceCompute& c, const TurnPlan& current, const TurnPlan& next) {
  auto seq = Atomic(c.turn_seq);
  // Odd while inside (taken over from a writer that died inside, if any).
  const uint32_t inside = (seq.load(std::memory_order_relaxed) + 1) | 1u;
  seq.store(inside, std::memory_order_relaxed);  // ordered before the plans' release stores
  StorePlan(c.turns[0], current);
  StorePlan(c.turns[1], next);
  seq.store(inside + 1, std::memory_order_release);
}

std::pair<TurnPlan, TurnPlan> ReadTurns(const DeviceCompute& c) {
  const std::atomic_ref<uint32_t> seq(const_cast<uint32_t&>(c.turn_seq));
  for (int i = 0; i < kTurnReadTries; ++i) {
    const uint32_t before = seq.load(std::memory_order_acquire);
    if ((before & 1u) != 0) continue;
    std::pair<TurnPlan, TurnPlan> plans{LoadPlan(c.turns[0]), LoadPlan(c.turns[1])};
    if (seq.load(std::memory_order_relaxed) == before) return plans;
  }
  return {};
}

bool HasTurnPlan(const DeviceCompute& c) {
  const auto [current, next] = ReadTurns(c);
  return current.period_ns > 0 || next.period_ns > 0;
}

// What compute_limited should hold, from the limits, grants, turns and `paused`.
uint32_t PacedMask(GroupSegmentLayout& layout) {
  const ComputeSchedule schedule(layout);
  const bool paused = schedule.Paused();
  uint32_t paced = 0;
  for (int d = 0; d < kGroupMaxDevices; ++d) {
    if (paused || schedule.PacedRateBp(d) < kFullGrantBp ||
        HasTurnPlan(layout.devices[d].compute)) {
      paced |= 1u << d;
    }
  }
  return paced;
}

// Stores `value` in `field` of `layout`; a change of value wakes the waiters.
template <typename T>
void StoreAndSignal(GroupSegmentLayout& layout, T& field, T value) {
  if (Atomic(field).exchange(value) != value) segment_fields::SignalChange(layout);
}

}  // namespace

void segment_fields::SignalChange(GroupSegmentLayout& layout) {
  // Writers may race: each recomputes the mask from the fields after its own
  // store and stores again until what it stored is still what they say.
  auto mask = Atomic(layout.compute_limited);
  for (uint32_t paced = PacedMask(layout);;) {
    mask.store(paced, std::memory_order_release);
    const uint32_t again = PacedMask(layout);
    if (again == paced) break;
    paced = again;
  }
  Atomic(layout.change_word).fetch_add(1);
  syscall(SYS_futex, &layout.change_word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void ComputeSchedule::SetComputeGrant(int dev, uint32_t grant_bp) {
  StoreAndSignal(layout_, layout_.devices[dev].compute_grant_bp, std::min(grant_bp, kFullGrantBp));
}

uint32_t ComputeSchedule::ComputeGrant(int dev) const {
  return Load(layout_.devices[dev].compute_grant_bp);
}

void ComputeSchedule::SetComputeBurst(int dev, int64_t burst_ns) {
  StoreAndSignal(layout_, layout_.devices[dev].compute.burst_ns, std::max<int64_t>(0, burst_ns));
}

int64_t ComputeSchedule::ComputeBurst(int dev) const {
  return Load(layout_.devices[dev].compute.burst_ns);
}

void ComputeSchedule::SetQueueBound(int dev, int64_t queue_ns) {
  StoreAndSignal(layout_, layout_.devices[dev].compute.queue_ns, std::max<int64_t>(0, queue_ns));
}

int64_t ComputeSchedule::QueueBound(int dev) const {
  return Load(layout_.devices[dev].compute.queue_ns);
}

void ComputeSchedule::SetTurns(int dev, const TurnPlan& current, const TurnPlan& next) {
  WriteTurns(layout_.devices[dev].compute, current, next);
  segment_fields::SignalChange(layout_);
}

TurnPlan ComputeSchedule::TurnAt(int dev, int64_t now_ns) const {
  const auto [current, next] = ReadTurns(layout_.devices[dev].compute);
  return next.epoch_ns != 0 && now_ns >= next.epoch_ns ? next : current;
}

std::pair<TurnPlan, TurnPlan> ComputeSchedule::Turns(int dev) const {
  return ReadTurns(layout_.devices[dev].compute);
}

void ComputeSchedule::SetPaused(bool paused) {
  StoreAndSignal(layout_, layout_.paused, paused ? 1u : 0u);
}

bool ComputeSchedule::Paused() const { return Load(layout_.paused) != 0; }

void ComputeSchedule::ClearSchedule() {
  bool changed = false;
  for (GroupDevice& d : layout_.devices) {
    changed |= Atomic(d.compute_grant_bp).exchange(0) != 0;
    changed |= Atomic(d.compute.burst_ns).exchange(0) != 0;
    changed |= Atomic(d.compute.queue_ns).exchange(0) != 0;
    if (HasTurnPlan(d.compute)) {
      WriteTurns(d.compute, TurnPlan{}, TurnPlan{});
      changed = true;
    }
  }
  if (changed) segment_fields::SignalChange(layout_);
}

uint32_t ComputeSchedule::PacedRateBp(int dev) const {
  const GroupDevice& d = layout_.devices[dev];
  const uint32_t limit = Load(d.compute_limit);
  const uint32_t grant = Load(d.compute_grant_bp);
  uint32_t rate = limit >= kUnlimitedPercent ? kFullGrantBp : limit * 100;
  if (grant != 0) rate = std::min(rate, grant);
  return rate;
}

ComputeCounters ComputeSchedule::Counters(int dev) const {
  const DeviceCompute& c = layout_.devices[dev].compute;
  uint32_t waiting = 0;  // members with a thread in a launch-gate wait (SlotCompute::waiting)
  for (const auto& slot : layout_.slot_compute) {
    if (Load(slot[dev].waiting) != 0) ++waiting;
  }
  return {.launches = Load(c.launches),
          .waits = Load(c.waits),
          .wait_ns = Load(c.wait_ns),
          .cut_off = Load(c.cut_off),
          .charge_ns = Load(c.charge_ns),
          .share_bp = Load(c.measured_at_ns) != 0 ? static_cast<int32_t>(Load(c.share_bp)) : -1,
          .waiting = waiting,
          .next_free_ns = Load(c.next_free_ns)};
}

}  // namespace gpuslice
