// The bookkeeping of one simulated stream-ordered memory pool (cuMemPoolCreate,
// a device's default pool): how much backing memory it reserves from the
// device and how much of that the program uses. docs/sim.md "Memory pools"
// says which documented fact each rule follows and which numbers are the
// model's parameters.
//
// - Backing memory is reserved in blocks of `block` bytes (a multiple of the
//   allocation granularity): an allocation the pool's free reserve cannot
//   hold grows the reserve by its shortfall rounded up to a block.
// - Allocations are counted in use rounded up to the granularity. Freed
//   memory stays reserved (the free reserve is one amount: fragmentation is
//   not modelled).
// - At a synchronize the pool gives back whole blocks above its release
//   threshold (default 0: everything not in use); cuMemPoolTrimTo(keep) gives
//   back whole blocks while at least `keep` stays reserved. Neither gives back
//   memory in use.
// - A pool with a maximum size (CUmemPoolProps::maxSize, 0: none) never
//   reserves more: an allocation whose growth would take the reserve past it
//   does not fit (the caller refuses it; the pool does not grow by less).
//
// A plain value; not thread-safe (the driver guards each pool).
#pragma once

#include <cstdint>

namespace gpuslice::sim {

class PoolModel {
 public:
  PoolModel() = default;
  // REQUIRES: granularity a power of two, block a positive multiple of it.
  PoolModel(uint64_t granularity, uint64_t block) : granularity_(granularity), block_(block) {}

  // Bytes of backing memory the pool must reserve (a multiple of the block)
  // before an allocation of `bytes` fits; 0 when its free reserve holds it.
  uint64_t GrowthFor(uint64_t bytes) const;
  // False when growing by `growth` would take the reserve past the pool's
  // maximum size.
  bool Fits(uint64_t growth) const {
    return max_size_ == 0 || (growth <= max_size_ && reserved_ <= max_size_ - growth);
  }
  // Records an allocation of `bytes`, after the caller reserved `growth`
  // (what GrowthFor said) from the device.
  void Allocated(uint64_t bytes, uint64_t growth);
  // Records the free of an allocation of `bytes`; its memory stays reserved.
  void Freed(uint64_t bytes);

  // A synchronize: releases whole blocks above the release threshold that are
  // not in use. Returns the bytes released (the caller gives them back to the
  // device).
  uint64_t ReleaseAtSync();
  // cuMemPoolTrimTo(keep): no-op when less than `keep` is reserved, else
  // releases whole blocks not in use while at least `keep` stays. Returns the
  // bytes released.
  uint64_t TrimTo(uint64_t keep);
  // Everything reserved, released (the pool is gone). Returns the bytes.
  uint64_t ReleaseAll();

  uint64_t reserved() const { return reserved_; }
  uint64_t used() const { return used_; }
  uint64_t reserved_high() const { return reserved_high_; }
  uint64_t used_high() const { return used_high_; }
  // Setting a high watermark attribute to 0 resets it to the current value.
  void ResetReservedHigh() { reserved_high_ = reserved_; }
  void ResetUsedHigh() { used_high_ = used_; }

  uint64_t release_threshold() const { return release_threshold_; }
  void set_release_threshold(uint64_t bytes) { release_threshold_ = bytes; }
  uint64_t block() const { return block_; }
  uint64_t max_size() const { return max_size_; }
  void set_max_size(uint64_t bytes) { max_size_ = bytes; }

 private:
  uint64_t Rounded(uint64_t bytes) const;
  static uint64_t RoundUp(uint64_t bytes, uint64_t unit);
  // Releases down to `target` (never below the blocks in use). Returns bytes.
  uint64_t ShrinkTo(uint64_t target);

  uint64_t granularity_ = 2ull << 20;
  uint64_t block_ = 2ull << 20;
  uint64_t release_threshold_ = 0;
  uint64_t max_size_ = 0;  // 0: no maximum
  uint64_t reserved_ = 0;
  uint64_t used_ = 0;
  uint64_t reserved_high_ = 0;
  uint64_t used_high_ = 0;
};

}  // namespace gpuslice::sim
