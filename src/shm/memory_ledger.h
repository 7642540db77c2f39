// MemoryLedger: a group's memory ledger, a view of its GroupSegment
// (segment.ledger(); include/gpuslice/group_segment.h, "Memory accounting").
//
// Reserve() charges bytes to a device of the group all-or-nothing against
// the limit, so concurrent allocations in any number of processes never
// overshoot; Release() gives them back. Both are lock-free (one
// compare-and-swap on the device's count, one on the slot's); the *Device
// and *OwnSlot forms split the two for a member whose own lock orders its
// slot's changes. A dead member's memory is reclaimed by the segment's
// ReapDead().
//
// A view holds references only: valid while its segment is. Thread-safe.
#pragma once

#include <cstdint>

#include "gpuslice/group_segment.h"

namespace gpuslice {

class GroupSegment;

class MemoryLedger {
 public:
  MemoryLedger(const GroupSegment& segment, GroupSegmentLayout& layout)
      : segment_(segment), layout_(layout) {}

  // `slot`: a slot this process joined; `dev`: a device of the segment.

  // Charges `bytes` to (`slot`, `dev`) if the group stays within the limit;
  // false, with nothing changed, otherwise (after reaping dead members once,
  // whose memory may be what is in the way).
  bool Reserve(int slot, int dev, uint64_t bytes);
  // Charges `bytes` whatever the limit (for memory the driver already handed
  // out, e.g. a context larger than estimated).
  void Charge(int slot, int dev, uint64_t bytes);
  // Returns `bytes` (at most what the slot holds on `dev`).
  void Release(int slot, int dev, uint64_t bytes);
  uint64_t SlotMemory(int slot, int dev) const;
  // What the group holds on `dev` (every member, and charges in flight).
  uint64_t MemoryUsed(int dev) const;

  // The two steps of the above, for a member that keeps its own slot's count
  // in step with its own records under a lock of its own (the limiter's
  // Ledger): the device's count with one atomic operation, the slot's with a
  // plain load and store. A charge adds to the device first, a release takes
  // from the slot first (invariant 1).
  //
  // Charges `bytes` to `dev`'s count if the group stays within the limit
  // (false, nothing changed, otherwise); the slot is not touched.
  bool ReserveDevice(int dev, uint64_t bytes);
  // Charges `bytes` to `dev`'s count whatever the limit.
  void ChargeDevice(int dev, uint64_t bytes);
  // Takes up to `bytes` from `dev`'s count (never below 0).
  void ReleaseDevice(int dev, uint64_t bytes);
  // Adds `bytes` to the slot's count on `dev`. REQUIRES: this process owns
  // `slot`, and the caller serialises every change of it (no atomic
  // read-modify-write: only its owner changes a live slot).
  void AddToOwnSlot(int slot, int dev, uint64_t bytes);
  // Takes up to `bytes` from the slot's count on `dev`; returns what it took.
  // REQUIRES: as AddToOwnSlot.
  uint64_t TakeFromOwnSlot(int slot, int dev, uint64_t bytes);

 private:
  const GroupSegment& segment_;  // reaps dead members when a reservation fails
  GroupSegmentLayout& layout_;
};

}  // namespace gpuslice
