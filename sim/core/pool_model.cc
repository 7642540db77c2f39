#include "sim/core/pool_model.h"

#include <algorithm>

namespace gpuslice::sim {

uint64_t PoolModel::RoundUp(uint64_t bytes, uint64_t unit) {
  if (unit == 0) return bytes;
  return (bytes + unit - 1) / unit * unit;
}

uint64_t PoolModel::Rounded(uint64_t bytes) const { return RoundUp(bytes, granularity_); }

uint64_t PoolModel::GrowthFor(uint64_t bytes) const {
  const uint64_t need = Rounded(bytes);
  const uint64_t free = reserved_ - used_;
  return need <= free ? 0 : RoundUp(need - free, block_);
}

void PoolModel::Allocated(uint64_t bytes, uint64_t growth) {
  reserved_ += growth;
  used_ += Rounded(bytes);
  reserved_high_ = std::max(reserved_high_, reserved_);
  used_high_ = std::max(used_high_, used_);
}

void PoolModel::Freed(uint64_t bytes) { used_ -= std::min(used_, Rounded(bytes)); }

uint64_t PoolModel::ShrinkTo(uint64_t target) {
  // Whole blocks only, and never a block that holds memory in use.
  const uint64_t floor = std::max(RoundUp(used_, block_), target);
  if (floor >= reserved_) return 0;
  const uint64_t released = reserved_ - floor;
  reserved_ = floor;
  return released;
}

uint64_t PoolModel::ReleaseAtSync() {
  if (reserved_ <= release_threshold_) return 0;
  // Keeps at most the threshold (rounded down to a block).
  return ShrinkTo(release_threshold_ / block_ * block_);
}

uint64_t PoolModel::TrimTo(uint64_t keep) {
  if (reserved_ < keep) return 0;
  // Keeps at least `keep` (rounded up to a block).
  return ShrinkTo(RoundUp(keep, block_));
}

uint64_t PoolModel::ReleaseAll() {
  const uint64_t released = reserved_;
  reserved_ = 0;
  used_ = 0;
  return released;
}

}  // namespace gpuslice::sim
