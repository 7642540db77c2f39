// What a group's members record of their launches and its controller
// publishes back, per device and per member (include/gpuslice/group_segment.h,
// DeviceCompute and SlotCompute): ComputeBudget, the launch path's handle,
// and ComputeUsage, the controller's view of a GroupSegment
// (segment.usage()).
//
// Both hold references only: valid while their segment is. Thread-safe:
// every operation is one atomic step on the shared fields.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "gpuslice/group_segment.h"
#include "shm/launch_pacer.h"

namespace gpuslice {

// The launch path's handle on one device's compute budget (DeviceCompute in
// include/gpuslice/group_segment.h; the arithmetic is launch_pacer.h) and on
// the calling member's own compute there (SlotCompute: its launch count, its
// charge, its bootstrap). Every operation is one atomic step on the shared
// fields, safe from any thread of any member.
class ComputeBudget {
 public:
  ComputeBudget(DeviceCompute& c, SlotCompute& member) : c_(c), m_(member) {}

  // The fields it works on (a stream's watch keeps them: StreamBacklog).
  DeviceCompute& device() const { return c_; }
  SlotCompute& member() const { return m_; }

  // The group controller's estimate of one of this member's launches, at
  // most kMaxChargeNs; 0: none yet.
  int64_t charge_ns() const { return Bounded(Load(m_.charge_ns)); }

  // Bootstrap (no estimate yet): true if this launch is to be measured: one
  // of the member's first `probes` launches, or any while it has no
  // measurement.
  bool TakeProbe(uint32_t probes) {
    return std::atomic_ref<uint32_t>(m_.probes).fetch_add(1) < probes || probe_ns() == 0;
  }
  // The least launch-to-completion time the member measured (at most
  // kMaxChargeNs); 0: none.
  int64_t probe_ns() const { return Bounded(Load(m_.probe_ns)); }
  // Records a measurement (keeps the least).
  void RecordProbe(int64_t measured_ns) {
    std::atomic_ref<int64_t> f(m_.probe_ns);
    int64_t seen = f.load();
    while ((seen <= 0 || measured_ns < seen) && !f.compare_exchange_weak(seen, measured_ns)) {
    }
  }

  // Admits a launch of `interval_ns` of wall time at `now_ns` within
  // `burst_ns`: 0 if admitted (the budget advanced), else the nanoseconds to
  // wait before trying again (nothing changed).
  int64_t TryAdmit(int64_t now_ns, int64_t interval_ns, int64_t burst_ns) {
    return gpuslice::TryAdmit(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, interval_ns,
                              burst_ns);
  }
  // How far the budget runs ahead of `now_ns` (negative: behind).
  int64_t AheadBy(int64_t now_ns) const {
    return std::atomic_ref<int64_t>(c_.next_free_ns).load(std::memory_order_relaxed) - now_ns;
  }
  // Pulls the budget back to at most `max_ahead_ns` past `now_ns`
  // (launch_pacer.h ClampAhead); true if it did.
  bool ClampAhead(int64_t now_ns, int64_t max_ahead_ns) {
    return gpuslice::ClampAhead(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, max_ahead_ns);
  }
  // Raises the budget to at least `ahead_ns` past `now_ns` (launch_pacer.h
  // RaiseBehind: a launch waiting for its stream's queue banks nothing).
  void RaiseBehind(int64_t now_ns, int64_t ahead_ns) {
    gpuslice::RaiseBehind(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, ahead_ns);
  }
  // Charges `interval_ns` from `now_ns` whatever the budget holds (a launch
  // measured after the fact).
  void ChargeAfter(int64_t now_ns, int64_t interval_ns) {
    gpuslice::ChargeAfter(std::atomic_ref<int64_t>(c_.next_free_ns), now_ns, interval_ns);
  }

  // Counters readers, the controller and the scheduler see: the group's and
  // the member's launches.
  void CountLaunch() {
    std::atomic_ref<uint64_t>(c_.launches).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(m_.launches).fetch_add(1, std::memory_order_relaxed);
  }
  // `n` launches of the member just made are queued on the GPU (watched: the
  // member will see them complete), or `n` of those were seen complete: the
  // controller counts a launch when it completes (SlotCompute::queued).
  void Queued(uint32_t n) {
    std::atomic_ref<uint32_t>(m_.queued).fetch_add(n, std::memory_order_relaxed);
  }
  void Completed(uint64_t n);
  // The member's timing markers measured `busy_ns` of device time for
  // `launches` launches (SlotCompute::busy_ns).
  void AddBusy(int64_t busy_ns, uint64_t launches) {
    Add(m_.busy_ns, m_.busy_launches, busy_ns, launches);
  }
  // ...and bounded `bound_ns` for `launches` launches (SlotCompute::bound_ns).
  void AddBound(int64_t bound_ns, uint64_t launches) {
    Add(m_.bound_ns, m_.bound_launches, bound_ns, launches);
  }
  // The least of the member's last bracketed launches (SlotCompute::
  // bound_floor_ns); 0 or less: leaves it.
  void SetBoundFloor(int64_t floor_ns) {
    if (floor_ns <= 0) return;
    std::atomic_ref<uint32_t>(m_.bound_floor_ns)
        .store(static_cast<uint32_t>(std::min<int64_t>(floor_ns, UINT32_MAX)),
               std::memory_order_relaxed);
  }
  // A thread of the member starts / ends a wait in the launch gate: the
  // scheduler sees the member held back while it waits, not only once the
  // wait ends (a wait can last seconds). Every BeginWait is paired with one
  // EndWait.
  void BeginWait() {
    std::atomic_ref<uint32_t>(m_.waiting).fetch_add(1, std::memory_order_relaxed);
  }
  void EndWait() { std::atomic_ref<uint32_t>(m_.waiting).fetch_sub(1, std::memory_order_relaxed); }
  // A launch within its group's turn that the turn's end cut off.
  void CountCutOff() {
    std::atomic_ref<uint64_t>(c_.cut_off).fetch_add(1, std::memory_order_relaxed);
  }
  void CountWait(int64_t waited_ns) {
    std::atomic_ref<uint64_t>(c_.waits).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(c_.wait_ns)
        .fetch_add(static_cast<uint64_t>(waited_ns), std::memory_order_relaxed);
  }

 private:
  template <typename T>
  static T Load(const T& field) {
    return std::atomic_ref<const T>(field).load(std::memory_order_acquire);
  }
  static void Add(uint64_t& ns_field, uint64_t& launches_field, int64_t ns, uint64_t launches) {
    if (launches == 0 || ns <= 0) return;
    std::atomic_ref<uint64_t>(ns_field).fetch_add(static_cast<uint64_t>(ns),
                                                  std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(launches_field).fetch_add(launches, std::memory_order_relaxed);
  }
  // A charge read from the segment (any member may write it): never
  // negative, never above kMaxChargeNs.
  static int64_t Bounded(int64_t ns) { return std::clamp<int64_t>(ns, 0, kMaxChargeNs); }
  DeviceCompute& c_;
  SlotCompute& m_;
};

class ComputeUsage {
 public:
  explicit ComputeUsage(GroupSegmentLayout& layout) : layout_(layout) {}

  // The compute budget of `dev` for the launch path of the member in `slot`
  // (a slot this process joined). REQUIRES: 0 <= slot < kGroupMaxSlots.
  ComputeBudget Budget(int dev, int slot) const {
    return {layout_.devices[dev].compute, layout_.slot_compute[slot][dev]};
  }

  // Launches admitted on `dev` so far (all members).
  uint64_t Launches(int dev) const;
  // Launches the member in `slot` made on `dev` since it joined.
  uint64_t SlotLaunches(int slot, int dev) const;
  // Of those, the launches not yet seen complete (SlotCompute::queued).
  uint32_t SlotQueued(int slot, int dev) const;
  // What the member's timing markers measured on `dev` so far
  // (SlotCompute::busy_ns, busy_launches).
  struct SlotBusy {
    uint64_t busy_ns = 0;
    uint64_t launches = 0;
    uint64_t bound_ns = 0;
    uint64_t bound_launches = 0;
    int64_t bound_floor_ns = 0;  // SlotCompute::bound_floor_ns
  };
  SlotBusy SlotBusyOf(int slot, int dev) const;

  // Publishes the charge of one launch of the member in `slot` on `dev`
  // (0: not known; the member measures its own launches meanwhile).
  void PublishSlotCharge(int slot, int dev, int64_t charge_ns);
  // The charge the launch path of `slot` uses on `dev` (bounded as read).
  int64_t SlotCharge(int slot, int dev) const;
  // The largest charge of any member on `dev`, or its bootstrap measurement
  // while it has no charge: the most one admitted launch can have advanced
  // the budget by, at a rate, once what was charged a measurement is
  // refined (a member's measurement no longer counts once its charge does).
  int64_t MaxMemberCharge(int dev) const;

  struct Estimate {
    int64_t charge_ns;       // device time of one launch; 0: not known (keep the last)
    int32_t share_bp;        // the group's share of the device, basis points; -1: unknown
    int64_t measured_at_ns;  // CLOCK_MONOTONIC
  };
  // Publishes the controller's estimate for `dev` to the launch path and to readers.
  void PublishEstimate(int dev, const Estimate& estimate);

 private:
  GroupSegmentLayout& layout_;
};

}  // namespace gpuslice
