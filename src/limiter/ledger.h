// Ledger: the process's side of its group's memory ledger (DESIGN.md
// section 2).
//
// The group segment (shm/group_segment.h) counts how many bytes each member
// holds on each device; this class knows *which* of the process's
// allocations, arrays, VMM handles and contexts hold them, so that a free
// gives back exactly what its allocation was charged, and a destroyed context
// gives back everything allocated in it. It also counts the process's retains
// of each device's primary context (the first charges the context's
// reservation, the release of the last gives it back).
//
// Charges go to the process's slot of the bound segment, joined on the first
// charge (a process that never allocates never takes a slot).
//
// Cost (the allocation fast path, bench/ledger_micro): an allocation is one
// compare-and-swap on the group's count (ReserveDevice) and one short
// critical section that records the pointer in an open-addressing table (no
// allocation per tracked resource; the table grows by doubling) and charges
// the process's slot (TrackReserved); a free is one critical section
// (UntrackAndRelease's erase and slot) and one atomic subtraction from the
// group's count.
//
// Thread-safe. Fork: the child calls ResetInChild() (with the locks taken by
// LockForFork() in the parent released), after which it holds nothing.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "common/thread_annotations.h"
#include "gpuslice/group_segment.h"

namespace gpuslice {
class GroupSegment;
}

namespace gpuslice::limiter {

// Bytes charged to one device of the group.
struct Charge {
  int device = -1;  // index in the group segment
  uint64_t bytes = 0;
  uintptr_t context = 0;  // the context that owns the memory (0: outlives contexts)
};

// What a tracked handle is, so equal numeric values of different kinds
// (a device pointer, a VMM handle, an array) never collide.
enum class Resource : uint8_t { kPointer, kVmmHandle, kArray, kMipmappedArray, kContext };

// The process's tracked resources: (kind, id) -> Charge. Open addressing with
// linear probing and backward-shift deletion (no tombstones), capacity a
// power of two, at most half full. Not thread-safe (Ledger guards it).
class TrackedTable {
 public:
  TrackedTable() = default;
  ~TrackedTable();
  TrackedTable(const TrackedTable&) = delete;
  TrackedTable& operator=(const TrackedTable&) = delete;

  // Records `c` for (`kind`, `id`), replacing an earlier record. False if the
  // table could not grow (out of host memory): nothing recorded.
  bool Insert(Resource kind, uint64_t id, const Charge& c);
  // Removes (`kind`, `id`) and returns its charge, if recorded.
  std::optional<Charge> Erase(Resource kind, uint64_t id);
  // Removes every record whose context is `ctx`, appending their charges to `out`.
  void EraseContext(uintptr_t ctx, std::vector<Charge>* out);
  // Removes everything (keeps the storage).
  void Clear();
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    uint64_t id;
    uint64_t bytes;
    uintptr_t context;
    int32_t device;
    uint8_t kind;  // 0: empty; else Resource + 1
  };
  static constexpr size_t kInitialCapacity = 256;

  size_t Home(uint8_t kind, uint64_t id) const;
  // Index of (kind, id), or capacity_ if absent.
  size_t Find(uint8_t kind, uint64_t id) const;
  void RemoveAt(size_t i);
  bool Grow();

  Entry* entries_ = nullptr;
  size_t capacity_ = 0;  // 0 or a power of two
  size_t size_ = 0;
  int shift_ = 64;  // 64 - log2(capacity_)
};

// A lock for critical sections of a few dozen instructions: one atomic
// exchange to take, one store to give (no call into libc, whose pages a
// driver call may have evicted). Waiters spin briefly, then yield.
// A capability for clang's -Wthread-safety (common/thread_annotations.h).
class CAPABILITY("mutex") SpinLock {
 public:
  void lock() ACQUIRE() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#elif defined(__aarch64__)
          asm volatile("yield");
#endif
        } else {
          sched_yield();
        }
      }
    }
  }
  void unlock() RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Holds a SpinLock for its scope, as std::lock_guard does (no more), in a
// form the analysis follows.
class SCOPED_CAPABILITY SpinLockGuard {
 public:
  explicit SpinLockGuard(SpinLock& lock) ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  ~SpinLockGuard() RELEASE() { lock_.unlock(); }
  SpinLockGuard(const SpinLockGuard&) = delete;
  SpinLockGuard& operator=(const SpinLockGuard&) = delete;

 private:
  SpinLock& lock_;
};

class Ledger {
 public:
  Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Charges go to `segment` (the process's, alive for the process's life;
  // nullptr: no group, nothing is charged). REQUIRES: called before charges
  // are made (at attach, or in a fork child after ResetInChild).
  void Bind(GroupSegment* segment);

  // ---- the group's counts ----

  // Charges `bytes` to `device` for this process, all or nothing (nullopt:
  // over the limit, or no slot could be joined). REQUIRES: device >= 0.
  std::optional<Charge> Reserve(int device, uint64_t bytes);
  // Bytes the group may still charge to `device` (its limit less its usage,
  // 0 when over it); kUnlimitedBytes where it has no limit or no segment is
  // bound. A snapshot: other members change it at any time.
  uint64_t Room(int device) const;
  // Charges whatever the limit says (memory the driver already handed out).
  void ForceCharge(const Charge& c);
  // Gives `c` back.
  void Release(const Charge& c);

  // ---- the allocation fast path (one critical section per driver call) ----
  //
  // The process's slot count changes only under this ledger's lock (a plain
  // load and store: MemoryLedger::AddToOwnSlot), so recording a resource and
  // charging its slot share one critical section. The group's count is
  // charged first and given back last (the segment's invariant 1).

  // Charges `bytes` to `device` in the group's count only, all or nothing
  // (nullopt as Reserve). The charge then goes to TrackReserved (the driver
  // said yes) or ReleaseReserved (it said no), nowhere else.
  std::optional<Charge> ReserveDevice(int device, uint64_t bytes);
  // Records that `id` of `kind` holds `c` (from ReserveDevice) and adds it
  // to the process's slot. A record that cannot be kept leaves `c` charged.
  void TrackReserved(Resource kind, uint64_t id, const Charge& c);
  // Gives back a ReserveDevice charge that was never tracked.
  void ReleaseReserved(const Charge& c);
  // Forgets `id` and gives its charge back (the slot's share in the same
  // critical section, then the group's count); the charge, if the ledger saw
  // `id`.
  std::optional<Charge> UntrackAndRelease(Resource kind, uint64_t id);

  // ---- which resource holds what ----

  // Records that `id` of `kind` holds `c` (after the driver said yes). If
  // the record cannot be kept (no host memory), `c` stays charged: the
  // group's count errs on the safe side.
  void Track(Resource kind, uint64_t id, const Charge& c);
  // Forgets `id` and returns its charge, if the ledger saw it.
  std::optional<Charge> Untrack(Resource kind, uint64_t id);
  // Settles the charge of tracked `id` at `actual` bytes (the driver's own
  // figure, known after the call), charging or giving back the difference.
  void Settle(Resource kind, uint64_t id, uint64_t actual);
  // Gives back everything tracked in context `ctx` (it was destroyed, and the
  // driver freed its memory with it).
  void ReleaseContext(uintptr_t ctx);
  // Resources tracked now.
  size_t tracked() const;

  // ---- primary contexts ----

  // The first retain of a device charges its reservation, the release that
  // ends the last retain gives it back (with the memory allocated in it);
  // reset ends every retain at once.
  bool PrimaryNeedsCharge(int device);
  // After a successful retain: `charge` is what this caller reserved (if it
  // saw no retain); a surplus charge from a racing retain is given back.
  // True if `charge` became the context's (this was the first retain).
  bool PrimaryRetainDone(int device, uintptr_t ctx, std::optional<Charge> charge);
  void PrimaryRelease(int device, bool reset);
  // The charge of `device`'s primary context while it is retained.
  std::optional<Charge> PrimaryCharge(int device) const;
  // Sets the bytes of that charge (the caller charged or gave back the
  // difference); false, with nothing changed, if it is no longer retained.
  bool ResizePrimaryCharge(int device, uint64_t bytes);

  // The process's slot in the segment; -1 before the first charge.
  int slot() const { return slot_.load(std::memory_order_acquire); }
  // The process's slot, joining the group on first use (the compute gate
  // counts and charges a member's launches there); -1 if that is impossible.
  int JoinedSlot() { return Slot(); }

  // ---- fork ----

  // In the parent, around fork(): hold every lock so the child gets them in
  // a consistent state.
  void LockForFork() ACQUIRE(join_mu_, mu_);
  void UnlockForFork() RELEASE(mu_, join_mu_);
  // In the child (after UnlockForFork): a new member with nothing charged
  // and no slot; still bound to the same segment (Bind again to change it).
  void ResetInChild();

 private:
  struct PrimaryCount {
    int retains = 0;
    uintptr_t ctx = 0;
    Charge charge;
  };
  // The process's slot, joined on first use; -1 if that is impossible.
  int Slot();
  // Takes `c` from the process's slot (REQUIRES mu_), then, after the lock
  // is given up, the caller takes what this returns from the group's count.
  uint64_t TakeFromSlotLocked(const Charge& c) REQUIRES(mu_);

  GroupSegment* segment_ = nullptr;  // set before the first charge, then read-only
  std::atomic<int> slot_{-1};
  // The fast path's fields first, in one cache line with the above.
  mutable SpinLock mu_;
  TrackedTable tracked_ GUARDED_BY(mu_);
  PrimaryCount primary_[kGroupMaxDevices] GUARDED_BY(mu_);
  Mutex join_mu_;  // serialises joining
};

}  // namespace gpuslice::limiter
