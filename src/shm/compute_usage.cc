#include "shm/compute_usage.h"

#include "shm/segment_fields.h"

namespace gpuslice {

using segment_fields::Atomic;
using segment_fields::Load;

void ComputeBudget::Completed(uint64_t n) {
  // Never below 0, whatever another member wrote there.
  std::atomic_ref<uint32_t> q(m_.queued);
  uint32_t seen = q.load(std::memory_order_relaxed);
  while (seen > 0 &&
         !q.compare_exchange_weak(seen, static_cast<uint32_t>(seen - std::min<uint64_t>(seen, n)),
                                  std::memory_order_relaxed)) {
  }
}

uint64_t ComputeUsage::Launches(int dev) const {
  return Atomic(layout_.devices[dev].compute.launches).load(std::memory_order_relaxed);
}

uint64_t ComputeUsage::SlotLaunches(int slot, int dev) const {
  return Load(layout_.slot_compute[slot][dev].launches);
}

uint32_t ComputeUsage::SlotQueued(int slot, int dev) const {
  return Load(layout_.slot_compute[slot][dev].queued);
}

ComputeUsage::SlotBusy ComputeUsage::SlotBusyOf(int slot, int dev) const {
  const SlotCompute& c = layout_.slot_compute[slot][dev];
  return {.busy_ns = Load(c.busy_ns),
          .launches = Load(c.busy_launches),
          .bound_ns = Load(c.bound_ns),
          .bound_launches = Load(c.bound_launches),
          .bound_floor_ns = Load(c.bound_floor_ns)};
}

void ComputeUsage::PublishSlotCharge(int slot, int dev, int64_t charge_ns) {
  Atomic(layout_.slot_compute[slot][dev].charge_ns)
      .store(std::clamp<int64_t>(charge_ns, 0, kMaxChargeNs), std::memory_order_release);
}

int64_t ComputeUsage::SlotCharge(int slot, int dev) const {
  return std::clamp<int64_t>(Load(layout_.slot_compute[slot][dev].charge_ns), 0, kMaxChargeNs);
}

int64_t ComputeUsage::MaxMemberCharge(int dev) const {
  int64_t most = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) {
    if (Load(layout_.slots[s].owner_pid) == 0) continue;
    const SlotCompute& c = layout_.slot_compute[s][dev];
    // The bootstrap measurement is a launch's wall time, an upper bound that
    // the charge refines (a 20 ms kernel beside 20 contexts measured 0.4 s):
    // once a charge is known, a launch charged the measurement was charged
    // too much, and the pull-back must not keep it (issue 13's stall).
    const int64_t charge = std::clamp<int64_t>(Load(c.charge_ns), 0, kMaxChargeNs);
    most = std::max(most,
                    charge > 0 ? charge : std::clamp<int64_t>(Load(c.probe_ns), 0, kMaxChargeNs));
  }
  return most;
}

void ComputeUsage::PublishEstimate(int dev, const Estimate& estimate) {
  DeviceCompute& c = layout_.devices[dev].compute;
  if (estimate.charge_ns > 0) {
    Atomic(c.charge_ns).store(estimate.charge_ns, std::memory_order_release);
  }
  if (estimate.share_bp >= 0) Atomic(c.share_bp).store(static_cast<uint32_t>(estimate.share_bp));
  Atomic(c.measured_at_ns).store(estimate.measured_at_ns);
}

}  // namespace gpuslice
