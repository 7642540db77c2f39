#include "shm/memory_ledger.h"

#include <algorithm>
#include <atomic>

#include "common/hot.h"
#include "shm/group_segment.h"
#include "shm/segment_fields.h"

namespace gpuslice {

using segment_fields::Atomic;
using segment_fields::Load;
using segment_fields::RaiseTo;
using segment_fields::TakeAtMost;

// The ledger's lock-free steps (include/gpuslice/group_segment.h, "Memory
// accounting"): the device's count grows before the slot's and the slot's
// shrinks before the device's, so memory_used >= the sum of the slots at
// every instant, and a member killed between two steps leaves the group
// charged (never less).

GS_HOT bool MemoryLedger::Reserve(int slot, int dev, uint64_t bytes) {
  if (!ReserveDevice(dev, bytes)) return false;
  Atomic(layout_.slots[slot].memory[dev]).fetch_add(bytes, std::memory_order_acq_rel);
  return true;
}

GS_HOT bool MemoryLedger::ReserveDevice(int dev, uint64_t bytes) {
  GroupDevice& d = layout_.devices[dev];
  auto used = Atomic(d.memory_used);
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t seen = used.load(std::memory_order_acquire);
    const uint64_t limit = Load(d.memory_limit);
    while (bytes <= limit && seen <= limit - bytes) {
      if (used.compare_exchange_weak(seen, seen + bytes, std::memory_order_acq_rel)) {
        RaiseTo(d.memory_peak, seen + bytes);
        return true;
      }
    }
    // Over the limit: a dead member's memory may be what is in the way.
    if (attempt == 0 && segment_.ReapDead() == 0) break;
  }
  Atomic(d.alloc_failures).fetch_add(1, std::memory_order_relaxed);
  return false;
}

void MemoryLedger::Charge(int slot, int dev, uint64_t bytes) {
  ChargeDevice(dev, bytes);
  Atomic(layout_.slots[slot].memory[dev]).fetch_add(bytes, std::memory_order_acq_rel);
}

void MemoryLedger::ChargeDevice(int dev, uint64_t bytes) {
  GroupDevice& d = layout_.devices[dev];
  const uint64_t used = Atomic(d.memory_used).fetch_add(bytes, std::memory_order_acq_rel) + bytes;
  RaiseTo(d.memory_peak, used);
}

GS_HOT void MemoryLedger::Release(int slot, int dev, uint64_t bytes) {
  const uint64_t taken = TakeAtMost(layout_.slots[slot].memory[dev], bytes);
  TakeAtMost(layout_.devices[dev].memory_used, taken);
}

GS_HOT void MemoryLedger::ReleaseDevice(int dev, uint64_t bytes) {
  TakeAtMost(layout_.devices[dev].memory_used, bytes);
}

GS_HOT void MemoryLedger::AddToOwnSlot(int slot, int dev, uint64_t bytes) {
  // Only the owner changes a live slot's count, under its own lock: a plain
  // load and store (atomic, so readers never see a torn value).
  auto held = Atomic(layout_.slots[slot].memory[dev]);
  held.store(held.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
}

GS_HOT uint64_t MemoryLedger::TakeFromOwnSlot(int slot, int dev, uint64_t bytes) {
  auto held = Atomic(layout_.slots[slot].memory[dev]);
  const uint64_t seen = held.load(std::memory_order_relaxed);
  const uint64_t taken = std::min(bytes, seen);
  held.store(seen - taken, std::memory_order_release);
  return taken;
}

uint64_t MemoryLedger::SlotMemory(int slot, int dev) const {
  return Load(layout_.slots[slot].memory[dev]);
}

uint64_t MemoryLedger::MemoryUsed(int dev) const { return Load(layout_.devices[dev].memory_used); }

}  // namespace gpuslice
