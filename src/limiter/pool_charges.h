// PoolCharges: the group's charge for the process's stream-ordered memory
// pools (cuMemAllocAsync, cuMemAllocFromPoolAsync; DESIGN.md section 2).
//
// The driver counts a pool's backing memory, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
// not its allocations: the reserve grows in blocks larger than the allocation
// that grew it and keeps freed memory until a synchronize releases what is
// above the pool's release threshold, or cuMemPoolTrimTo. So each pool is
// charged its reserve:
//
// - Before an allocation the pool would have to grow for (its free reserve,
//   reserved - used, is short), the shortfall rounded up to the pool's block
//   is reserved in the group segment: the block size is learnt from the
//   growth the driver showed for the smallest shortfall so far (a pool that
//   grew by exactly a shortfall smaller than kAssumedBlock grows by the
//   allocation granularity); until then the shortfall is rounded up to
//   kAssumedBlock, so a first growth of up to that much never passes the
//   cap. No room: CUDA_ERROR_OUT_OF_MEMORY, nothing called.
// - After it, the charge settles on the reserve the driver reports. When the
//   pool grew by more than the group has room for (only before its block is
//   known), the allocation is undone (the caller frees it and waits for the
//   stream), the pool is trimmed back to what it held before, and the call
//   returns CUDA_ERROR_OUT_OF_MEMORY: the driver's count is over the cap only
//   for that moment (a pool whose blocks are larger than kAssumedBlock).
// - Refresh()/RefreshAll() settle charges on the reserves again (after frees,
//   trims, synchronizes the limiter does not see; the limiter calls them on
//   frees of pool memory, cuMemPoolTrimTo, cuMemGetInfo, a refused
//   allocation, and every 200 ms from a thread of its own while any pool is
//   charged).
// - A destroyed pool gives its charge back. One with allocations outstanding
//   is released by the driver with its last allocation: its charge is given
//   back at the free of the last allocation it made through Allocate (each
//   is remembered by its pointer until freed: Freed). Where some of its
//   allocations are not known (the driver reported more in use than the
//   ones remembered) the charge stays until the process exits.
//
// Every allocation from any pool of the process and every refresh is
// serialised (one mutex, held across the driver call), so a reserve read
// right after an allocation is that allocation's doing.
//
// Thread-safe. Fork: the child calls ResetInChild() (after LockForFork() /
// UnlockForFork() around fork()), after which it holds no charges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cuda_abi/cuda_driver_api.h"
#include "limiter/ledger.h"

namespace gpuslice::limiter {

// A pool as the driver reports it.
struct PoolUsage {
  uint64_t reserved = 0;  // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
  uint64_t used = 0;      // CU_MEMPOOL_ATTR_USED_MEM_CURRENT
};

// What PoolCharges asks the driver (a seam: tests give a fake).
class PoolDriver {
 public:
  virtual ~PoolDriver() = default;
  // The pool's usage; nullopt when the driver cannot say (no such pool, a
  // driver without pool attributes).
  virtual std::optional<PoolUsage> Usage(uint64_t pool) = 0;
  // cuMemPoolTrimTo(pool, keep).
  virtual void TrimTo(uint64_t pool, uint64_t keep) = 0;
};

class PoolCharges {
 public:
  // What an unlearnt pool's growth is reserved in (see above).
  static constexpr uint64_t kAssumedBlock = uint64_t{32} << 20;

  // Charges go through `ledger`; allocations round up to `granularity` (a
  // power of two). Both references outlive this object.
  PoolCharges(Ledger& ledger, PoolDriver& driver, uint64_t granularity)
      : ledger_(ledger), driver_(driver), granularity_(granularity) {}
  PoolCharges(const PoolCharges&) = delete;
  PoolCharges& operator=(const PoolCharges&) = delete;

  // Records that `pool` holds memory of group device `device` (-1: memory
  // the group does not count, such as a host pool). Pools never added are
  // added by their first Allocate.
  void Add(uint64_t pool, int device);
  // The group device recorded for `pool`, if it is known.
  std::optional<int> DeviceOf(uint64_t pool) const;

  // Allocates `bytes` from `pool` (of group device `device` >= 0) through
  // `allocate` (the real call), keeping the pool's charge at its reserve (see
  // above). `undo` frees what `allocate` gave and waits until the pool has it
  // back. Returns the call's result, or nullopt when the driver cannot report
  // the pool's usage (nothing was called: the caller charges per allocation).
  // `pointer()` gives the allocation's address after a successful call (0:
  // none to remember).
  template <typename AllocateFn, typename UndoFn, typename PointerFn>
  std::optional<CUresult> Allocate(uint64_t pool, int device, uint64_t bytes, AllocateFn&& allocate,
                                   UndoFn&& undo, PointerFn&& pointer);
  template <typename AllocateFn, typename UndoFn>
  std::optional<CUresult> Allocate(uint64_t pool, int device, uint64_t bytes, AllocateFn&& allocate,
                                   UndoFn&& undo) {
    return Allocate(pool, device, bytes, allocate, undo, [] { return uint64_t{0}; });
  }

  // `ptr` (memory the ledger does not track) was freed: if it was the last
  // outstanding allocation of a destroyed pool, that pool's charge is given
  // back; then every pool's charge is settled (RefreshAll).
  void Freed(uint64_t ptr);

  // Settles `pool`'s charge on its reserve now; a pool the driver no longer
  // knows gives its charge back and is forgotten.
  void Refresh(uint64_t pool);
  // The same for every pool. Returns true if any charge went down.
  bool RefreshAll();
  // `pool` was destroyed; `outstanding`: it still had allocations, `used`
  // bytes of them as the driver reported (its charge stays until they are
  // freed, see above).
  void Destroyed(uint64_t pool, bool outstanding, uint64_t used = 0);
  // Destroys `pool` through `destroy` (the real call), then as Destroyed
  // with what the driver said of it just before.
  template <typename DestroyFn>
  CUresult Destroy(uint64_t pool, DestroyFn&& destroy) {
    std::lock_guard lock(mu_);
    const std::optional<PoolUsage> u = driver_.Usage(pool);
    const CUresult rc = destroy();
    if (rc == CUDA_SUCCESS) DestroyedLocked(pool, u && u->used > 0, u ? u->used : 0);
    return rc;
  }

  // True while some pool is charged (cheap: one load).
  bool any_charged() const { return charged_pools_.load(std::memory_order_acquire) > 0; }
  // Bytes charged for `pool` (0 if unknown).
  uint64_t charged(uint64_t pool) const;

  // ---- fork ----
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }
  void ResetInChild();

 private:
  struct Entry {
    uint64_t pool = 0;
    int device = -1;
    uint64_t charged = 0;               // bytes charged to `device` for this pool
    uint64_t block = 0;                 // learnt growth unit (0: not yet: the granularity)
    uint64_t learnt_from = UINT64_MAX;  // the shortfall `block` was learnt from
    bool destroyed = false;             // charge kept until its allocations are freed
    uint64_t allocations = 0;           // remembered allocations outstanding (in live_)
    uint64_t allocated_bytes = 0;       // their bytes, rounded to the granularity
  };
  struct Allocation {
    uint64_t pool;
    uint64_t bytes;
  };

  // REQUIRES: mu_ held (for all below).
  void DestroyedLocked(uint64_t pool, bool outstanding, uint64_t used);
  Entry* Find(uint64_t pool);
  Entry& FindOrAdd(uint64_t pool, int device);
  // Settles `e` at `reserved` bytes (charging what grew, even past the
  // limit: the driver holds it; giving back what shrank).
  void SettleLocked(Entry& e, uint64_t reserved);
  // Refreshes every entry but `busy`; true if a charge went down.
  bool RefreshAllLocked(const Entry* busy = nullptr);
  void RefreshLocked(Entry& e);
  // What an allocation of `bytes` needs beyond the free reserve of a pool
  // with usage `u` (0: it fits).
  uint64_t Shortfall(const PoolUsage& u, uint64_t bytes) const;
  uint64_t RoundUp(uint64_t bytes, uint64_t unit) const;
  // Reserves `bytes` on `device` (a refresh of every pool but `busy`, and
  // one more try, when the group has no room). False: no room.
  bool ReserveLocked(int device, uint64_t bytes, const Entry* busy);
  // After an allocation that used `shortfall` and grew the pool by `growth`.
  void Learn(Entry& e, uint64_t shortfall, uint64_t growth);
  // Sets e.charged (the caller charged or gave back the difference).
  void SetCharged(Entry& e, uint64_t bytes);
  // Remembers the allocation at `ptr` (0: none) of `bytes` from `e`.
  void RememberLocked(Entry& e, uint64_t ptr, uint64_t bytes);
  // Forgets `e` (its charge given back) and the allocations remembered of it.
  void ForgetLocked(Entry& e);

  Ledger& ledger_;
  PoolDriver& driver_;
  const uint64_t granularity_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;                     // GUARDED_BY(mu_): a process has few pools
  std::unordered_map<uint64_t, Allocation> live_;  // GUARDED_BY(mu_): by pointer
  std::atomic<int> charged_pools_{0};              // entries with charged > 0
};

template <typename AllocateFn, typename UndoFn, typename PointerFn>
std::optional<CUresult> PoolCharges::Allocate(uint64_t pool, int device, uint64_t bytes,
                                              AllocateFn&& allocate, UndoFn&& undo,
                                              PointerFn&& pointer) {
  std::lock_guard lock(mu_);
  const std::optional<PoolUsage> before = driver_.Usage(pool);
  if (!before) return std::nullopt;
  Entry& e = FindOrAdd(pool, device);
  SettleLocked(e, before->reserved);
  const uint64_t shortfall = Shortfall(*before, bytes);
  // Until the pool's block is learnt, a growth is assumed to be a whole
  // kAssumedBlock (the drivers' default pools grow by 32 MiB).
  const uint64_t ahead =
      RoundUp(shortfall, e.block != 0 ? e.block : std::max(granularity_, kAssumedBlock));
  if (ahead > 0) {
    if (!ReserveLocked(device, ahead, &e)) return CUDA_ERROR_OUT_OF_MEMORY;
    SetCharged(e, e.charged + ahead);
  }
  const CUresult rc = allocate();
  const std::optional<PoolUsage> after = driver_.Usage(pool);
  if (!after) return rc;  // what was reserved stays charged
  if (rc != CUDA_SUCCESS) {
    SettleLocked(e, after->reserved);
    return rc;
  }
  if (after->reserved > before->reserved) Learn(e, shortfall, after->reserved - before->reserved);
  if (after->reserved <= e.charged) {
    SettleLocked(e, after->reserved);  // gives back what was reserved ahead and not used
    RememberLocked(e, pointer(), bytes);
    return rc;
  }
  if (ReserveLocked(device, after->reserved - e.charged, &e)) {
    SetCharged(e, after->reserved);
    RememberLocked(e, pointer(), bytes);
    return rc;
  }
  // The pool grew past the group's room: undo the allocation, trim the pool
  // back to what it held before, and settle on what the driver then holds.
  undo();
  driver_.TrimTo(pool, before->reserved);
  const std::optional<PoolUsage> undone = driver_.Usage(pool);
  SettleLocked(e, undone ? undone->reserved : after->reserved);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace gpuslice::limiter
