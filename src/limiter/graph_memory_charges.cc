#include "limiter/graph_memory_charges.h"

namespace gpuslice::limiter {

GraphMemCharges::DevicePool& GraphMemCharges::PoolOf(int ordinal, int device) {
  for (DevicePool& p : pools_) {
    if (p.ordinal == ordinal) return p;
  }
  pools_.push_back(DevicePool{ordinal, device, 0});
  return pools_.back();
}

void GraphMemCharges::Instantiated(uint64_t exec, int ordinal, int device, uint64_t bytes) {
  MutexLock lock(mu_);
  execs_.erase(exec);  // a handle reused
  if (bytes > 0 && ordinal >= 0 && device >= 0) {
    PoolOf(ordinal, device);
    execs_[exec] = Exec{ordinal, device, bytes, false};
  }
  execs_with_memory_.store(static_cast<int>(execs_.size()), std::memory_order_release);
}

void GraphMemCharges::SettleLocked(DevicePool& p, uint64_t reserved) {
  if (reserved == p.charged) return;
  if (reserved > p.charged) {
    // Memory the driver already holds: charged even past the limit.
    const uint64_t grew = reserved - p.charged;
    if (!ledger_.Reserve(p.device, grew)) ledger_.ForceCharge(Charge{p.device, grew, 0});
  } else {
    ledger_.Release(Charge{p.device, p.charged - reserved, 0});
  }
  p.charged = reserved;
}

bool GraphMemCharges::ReserveAheadLocked(Exec& x, DevicePool& p) {
  const std::optional<PoolUsage> before = driver_.Usage(x.ordinal);
  if (!before) return true;  // the driver cannot say: nothing charged here
  SettleLocked(p, before->reserved);
  if (x.mapped) return true;  // its mapping is kept between runs
  const uint64_t free = before->reserved > before->used ? before->reserved - before->used : 0;
  const uint64_t ahead = x.bytes > free ? x.bytes - free : 0;
  if (ahead == 0) return true;
  if (!ledger_.Reserve(p.device, ahead)) return false;
  p.charged += ahead;
  return true;
}

void GraphMemCharges::Trimmed(int ordinal) {
  MutexLock lock(mu_);
  for (auto& [h, x] : execs_) {
    if (x.ordinal == ordinal) x.mapped = false;  // the trim may have unmapped it
  }
  for (DevicePool& p : pools_) {
    if (p.ordinal != ordinal) continue;
    if (const std::optional<PoolUsage> u = driver_.Usage(ordinal)) SettleLocked(p, u->reserved);
  }
}

void GraphMemCharges::Destroyed(uint64_t exec) {
  MutexLock lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  const int ordinal = it->second.ordinal;
  execs_.erase(it);
  execs_with_memory_.store(static_cast<int>(execs_.size()), std::memory_order_release);
  for (DevicePool& p : pools_) {
    if (p.ordinal != ordinal) continue;
    if (const std::optional<PoolUsage> u = driver_.Usage(ordinal)) SettleLocked(p, u->reserved);
  }
}

void GraphMemCharges::RefreshAll() {
  MutexLock lock(mu_);
  for (DevicePool& p : pools_) {
    if (const std::optional<PoolUsage> u = driver_.Usage(p.ordinal)) SettleLocked(p, u->reserved);
  }
}

uint64_t GraphMemCharges::charged(int ordinal) const {
  MutexLock lock(mu_);
  for (const DevicePool& p : pools_) {
    if (p.ordinal == ordinal) return p.charged;
  }
  return 0;
}

void GraphMemCharges::ResetInChild() {
  MutexLock lock(mu_);
  execs_.clear();
  pools_.clear();
  execs_with_memory_.store(0);
}

}  // namespace gpuslice::limiter
