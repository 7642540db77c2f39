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
//   allocation granularity). No room: CUDA_ERROR_OUT_OF_MEMORY, nothing
//   called.
// - A pool's first growth, before its block is known, on a device where the
//   group has a memory limit: the block is found first by a probe (the
//   caller's `probe(span)`: a pool of the limiter's own on the same device
//   that may reserve at most `span` bytes, CUmemPoolProps::maxSize, grows by
//   one block for one byte and is given back). `span` is held in the group
//   segment while the probe runs: min(room, kProbeSpan), then the whole
//   room if the block was not smaller. A block found is the device's (every
//   pool of it not yet learnt starts from it). A probe pool refused even the
//   whole room: the block is larger than the room, and the allocation is
//   refused with CUDA_ERROR_OUT_OF_MEMORY before the driver is called. So the
//   first growth of a pool never passes the cap, whatever its block. A probe
//   that grew by its whole span is not trusted (a driver might clip a growth
//   to maxSize): as a refusal.
// - Where the probe cannot tell (a driver without maxSize, before CUDA 12.2;
//   a capturing stream), the shortfall is rounded up to kAssumedBlock, and
//   after the call the charge settles on the reserve the driver reports. When
//   the pool grew by more than the group has room for (only then, and only
//   for blocks larger than kAssumedBlock), the allocation is undone (the
//   caller frees it and waits for the stream), the pool is trimmed back to
//   what it held before, and the call returns CUDA_ERROR_OUT_OF_MEMORY: the
//   driver's count is over the cap for that moment.
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
#include <atomic>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "cuda_abi/cuda_driver_api.h"
#include "limiter/ledger.h"

namespace gpuslice::limiter {

// What a probe of a device's pool growth found (PoolCharges::Allocate).
struct BlockProbe {
  enum Kind : uint8_t {
    kUnknown,  // it could not be done: nothing learnt
    kBlock,    // a pool of the device grew by `block` for its first byte
    kLarger,   // a pool capped at the span was refused: the block is larger
  };
  Kind kind = kUnknown;
  uint64_t block = 0;
};

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
  // What an unlearnt pool's growth is reserved in where no probe can tell
  // (see above).
  static constexpr uint64_t kAssumedBlock = uint64_t{32} << 20;
  // The first span a block probe may reserve (see above).
  static constexpr uint64_t kProbeSpan = uint64_t{128} << 20;

  // Charges go through `ledger`; allocations round up to `granularity` (a
  // power of two). Both references outlive this object.
  PoolCharges(Ledger& ledger, PoolDriver& driver, uint64_t granularity)
      : ledger_(ledger), driver_(driver), granularity_(granularity) {}
  PoolCharges(const PoolCharges&) = delete;
  PoolCharges& operator=(const PoolCharges&) = delete;

  // Records that `pool` holds memory of group device `device` (-1: memory
  // the group does not count, such as a host pool). Pools never added are
  // added by their first Allocate.
  void Add(uint64_t pool, int device) EXCLUDES(mu_);
  // The group device recorded for `pool`, if it is known.
  std::optional<int> DeviceOf(uint64_t pool) const EXCLUDES(mu_);

  // Allocates `bytes` from `pool` (of group device `device` >= 0) through
  // `allocate` (the real call), keeping the pool's charge at its reserve (see
  // above). `undo` frees what `allocate` gave and waits until the pool has it
  // back. Returns the call's result, or nullopt when the driver cannot report
  // the pool's usage (nothing was called: the caller charges per allocation).
  // `pointer()` gives the allocation's address after a successful call (0:
  // none to remember). `probe(span)` returns a BlockProbe of the device's
  // pools capped at `span` bytes (see above); it may synchronize the
  // caller's stream. Without one, kUnknown.
  template <typename AllocateFn, typename UndoFn, typename PointerFn, typename ProbeFn>
  std::optional<CUresult> Allocate(uint64_t pool, int device, uint64_t bytes, AllocateFn&& allocate,
                                   UndoFn&& undo, PointerFn&& pointer, ProbeFn&& probe)
      EXCLUDES(mu_);
  template <typename AllocateFn, typename UndoFn, typename PointerFn>
  std::optional<CUresult> Allocate(uint64_t pool, int device, uint64_t bytes, AllocateFn&& allocate,
                                   UndoFn&& undo, PointerFn&& pointer) {
    return Allocate(pool, device, bytes, allocate, undo, pointer,
                    [](uint64_t) { return BlockProbe{}; });
  }
  template <typename AllocateFn, typename UndoFn>
  std::optional<CUresult> Allocate(uint64_t pool, int device, uint64_t bytes, AllocateFn&& allocate,
                                   UndoFn&& undo) {
    return Allocate(pool, device, bytes, allocate, undo, [] { return uint64_t{0}; });
  }

  // `ptr` (memory the ledger does not track) was freed: if it was the last
  // outstanding allocation of a destroyed pool, that pool's charge is given
  // back; then every pool's charge is settled (RefreshAll).
  void Freed(uint64_t ptr) EXCLUDES(mu_);

  // Settles `pool`'s charge on its reserve now; a pool the driver no longer
  // knows gives its charge back and is forgotten.
  void Refresh(uint64_t pool) EXCLUDES(mu_);
  // The same for every pool. Returns true if any charge went down.
  bool RefreshAll() EXCLUDES(mu_);
  // `pool` was destroyed; `outstanding`: it still had allocations, `used`
  // bytes of them as the driver reported (its charge stays until they are
  // freed, see above).
  void Destroyed(uint64_t pool, bool outstanding, uint64_t used = 0) EXCLUDES(mu_);
  // Destroys `pool` through `destroy` (the real call), then as Destroyed
  // with what the driver said of it just before.
  template <typename DestroyFn>
  CUresult Destroy(uint64_t pool, DestroyFn&& destroy) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const std::optional<PoolUsage> u = driver_.Usage(pool);
    const CUresult rc = destroy();
    if (rc == CUDA_SUCCESS) DestroyedLocked(pool, u && u->used > 0, u ? u->used : 0);
    return rc;
  }

  // True while some pool is charged (cheap: one load).
  bool any_charged() const { return charged_pools_.load(std::memory_order_acquire) > 0; }
  // Bytes charged for `pool` (0 if unknown).
  uint64_t charged(uint64_t pool) const EXCLUDES(mu_);
  // The block a probe found for group device `device` (0: none yet).
  uint64_t device_block(int device) const EXCLUDES(mu_);

  // ---- fork ----
  void LockForFork() ACQUIRE(mu_) { mu_.Lock(); }
  void UnlockForFork() RELEASE(mu_) { mu_.Unlock(); }
  void ResetInChild() EXCLUDES(mu_);

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

  // An `Entry&` or `Entry*` argument is one of entries_ (so mu_ is held).
  void DestroyedLocked(uint64_t pool, bool outstanding, uint64_t used) REQUIRES(mu_);
  Entry* Find(uint64_t pool) REQUIRES(mu_);
  Entry& FindOrAdd(uint64_t pool, int device) REQUIRES(mu_);
  // Settles `e` at `reserved` bytes (charging what grew, even past the
  // limit: the driver holds it; giving back what shrank).
  void SettleLocked(Entry& e, uint64_t reserved) REQUIRES(mu_);
  // Refreshes every entry but `busy`; true if a charge went down.
  bool RefreshAllLocked(const Entry* busy = nullptr) REQUIRES(mu_);
  void RefreshLocked(Entry& e) REQUIRES(mu_);
  // What an allocation of `bytes` needs beyond the free reserve of a pool
  // with usage `u` (0: it fits). Pure: no lock needed.
  uint64_t Shortfall(const PoolUsage& u, uint64_t bytes) const;
  uint64_t RoundUp(uint64_t bytes, uint64_t unit) const;
  // Reserves `bytes` on `device` (a refresh of every pool but `busy`, and
  // one more try, when the group has no room). False: no room.
  bool ReserveLocked(int device, uint64_t bytes, const Entry* busy) REQUIRES(mu_);
  // What ProbeLocked found.
  enum class Probed : uint8_t { kBlock, kUnknown, kNoRoom };
  // Gives `e` (not learnt) its device's block, probing for it where the
  // group has a limit there (see above).
  template <typename ProbeFn>
  Probed ProbeLocked(Entry& e, ProbeFn& probe) REQUIRES(mu_);
  // The block probed for `device`, or 0.
  uint64_t DeviceBlockLocked(int device) const REQUIRES(mu_);
  void SetDeviceBlockLocked(int device, uint64_t block) REQUIRES(mu_);
  // After an allocation that used `shortfall` and grew the pool by `growth`.
  void Learn(Entry& e, uint64_t shortfall, uint64_t growth) REQUIRES(mu_);
  // Sets e.charged (the caller charged or gave back the difference).
  void SetCharged(Entry& e, uint64_t bytes) REQUIRES(mu_);
  // Remembers the allocation at `ptr` (0: none) of `bytes` from `e`.
  void RememberLocked(Entry& e, uint64_t ptr, uint64_t bytes) REQUIRES(mu_);
  // Forgets `e` (its charge given back) and the allocations remembered of it.
  void ForgetLocked(Entry& e) REQUIRES(mu_);

  Ledger& ledger_;
  PoolDriver& driver_;
  const uint64_t granularity_;
  // Held across the driver calls of every allocation and refresh (above).
  mutable Mutex mu_;
  std::vector<Entry> entries_ GUARDED_BY(mu_);                     // a process has few pools
  std::unordered_map<uint64_t, Allocation> live_ GUARDED_BY(mu_);  // by pointer
  std::vector<uint64_t> device_blocks_ GUARDED_BY(mu_);            // by group device; 0: unknown
  std::atomic<int> charged_pools_{0};  // entries with charged > 0; read without mu_
};

template <typename ProbeFn>
PoolCharges::Probed PoolCharges::ProbeLocked(Entry& e, ProbeFn& probe) {
  if (const uint64_t known = DeviceBlockLocked(e.device); known != 0) {
    e.block = known;
    e.learnt_from = granularity_;  // as if learnt from the smallest shortfall
    return Probed::kBlock;
  }
  uint64_t span = kProbeSpan;
  // Two spans at most (kProbeSpan, then the room), and as many tries again
  // when another member took the room meanwhile.
  for (int tries = 0; tries < 4; ++tries) {
    const uint64_t room = ledger_.Room(e.device);
    if (room == kUnlimitedBytes) return Probed::kUnknown;  // no cap to pass
    const uint64_t whole = room / granularity_ * granularity_;
    const uint64_t held = std::min(span, whole);
    if (held == 0) return Probed::kNoRoom;  // no room for any growth
    std::optional<Charge> charge = ledger_.Reserve(e.device, held);
    if (!charge) continue;
    const BlockProbe found = probe(held);
    ledger_.Release(*charge);
    if (found.kind == BlockProbe::kUnknown) return Probed::kUnknown;
    if (found.kind == BlockProbe::kBlock && found.block > 0 && found.block < held) {
      SetDeviceBlockLocked(e.device, found.block);
      e.block = found.block;
      e.learnt_from = granularity_;
      return Probed::kBlock;
    }
    // Refused (or grown by the whole span): the block is larger than `held`.
    if (held >= whole) return Probed::kNoRoom;
    span = whole;
  }
  return Probed::kNoRoom;
}

template <typename AllocateFn, typename UndoFn, typename PointerFn, typename ProbeFn>
std::optional<CUresult> PoolCharges::Allocate(uint64_t pool, int device, uint64_t bytes,
                                              AllocateFn&& allocate, UndoFn&& undo,
                                              PointerFn&& pointer, ProbeFn&& probe) {
  MutexLock lock(mu_);
  std::optional<PoolUsage> before = driver_.Usage(pool);
  if (!before) return std::nullopt;
  Entry& e = FindOrAdd(pool, device);
  if (e.block == 0 && e.device >= 0 && Shortfall(*before, bytes) > 0) {
    // The pool's first growth: its block found first.
    const Probed probed = ProbeLocked(e, probe);
    if (probed == Probed::kNoRoom) return CUDA_ERROR_OUT_OF_MEMORY;
    // The probe may have synchronized (a pool may have released memory).
    before = driver_.Usage(pool);
    if (!before) return std::nullopt;
  }
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
