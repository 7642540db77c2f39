#include "limiter/pool_charges.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::limiter {

uint64_t PoolCharges::RoundUp(uint64_t bytes, uint64_t unit) const {
  if (unit == 0 || bytes > UINT64_MAX - unit) return bytes;
  return (bytes + unit - 1) / unit * unit;
}

uint64_t PoolCharges::Shortfall(const PoolUsage& u, uint64_t bytes) const {
  const uint64_t need = RoundUp(bytes, granularity_);
  const uint64_t free = u.reserved > u.used ? u.reserved - u.used : 0;
  return need > free ? need - free : 0;
}

PoolCharges::Entry* PoolCharges::Find(uint64_t pool) {
  for (Entry& e : entries_) {
    if (e.pool == pool) return &e;
  }
  return nullptr;
}

PoolCharges::Entry& PoolCharges::FindOrAdd(uint64_t pool, int device) {
  if (Entry* e = Find(pool)) return *e;
  Entry fresh;
  fresh.pool = pool;
  fresh.device = device;
  for (Entry& e : entries_) {
    if (e.pool == 0) return e = fresh;  // a forgotten pool's place
  }
  entries_.push_back(fresh);
  return entries_.back();
}

void PoolCharges::Add(uint64_t pool, int device) {
  if (pool == 0) return;
  MutexLock lock(mu_);
  Entry& e = FindOrAdd(pool, device);
  e.device = device;
}

std::optional<int> PoolCharges::DeviceOf(uint64_t pool) const {
  MutexLock lock(mu_);
  for (const Entry& e : entries_) {
    if (e.pool == pool && pool != 0) return e.device;
  }
  return std::nullopt;
}

uint64_t PoolCharges::charged(uint64_t pool) const {
  MutexLock lock(mu_);
  for (const Entry& e : entries_) {
    if (e.pool == pool && pool != 0) return e.charged;
  }
  return 0;
}

uint64_t PoolCharges::device_block(int device) const {
  MutexLock lock(mu_);
  return DeviceBlockLocked(device);
}

uint64_t PoolCharges::DeviceBlockLocked(int device) const {
  if (device < 0 || static_cast<size_t>(device) >= device_blocks_.size()) return 0;
  return device_blocks_[device];
}

void PoolCharges::SetDeviceBlockLocked(int device, uint64_t block) {
  if (device < 0) return;
  if (static_cast<size_t>(device) >= device_blocks_.size()) device_blocks_.resize(device + 1, 0);
  device_blocks_[device] = block;
}

void PoolCharges::SetCharged(Entry& e, uint64_t bytes) {
  if (e.charged == 0 && bytes > 0) charged_pools_.fetch_add(1, std::memory_order_release);
  if (e.charged > 0 && bytes == 0) charged_pools_.fetch_sub(1, std::memory_order_release);
  e.charged = bytes;
}

void PoolCharges::SettleLocked(Entry& e, uint64_t reserved) {
  if (e.device < 0 || reserved == e.charged) return;
  if (reserved > e.charged) {
    // Memory the driver already holds: charged even past the limit (the
    // group's count never reads less than the driver's).
    const uint64_t grew = reserved - e.charged;
    if (!ledger_.Reserve(e.device, grew)) ledger_.ForceCharge(Charge{e.device, grew, 0});
  } else {
    ledger_.Release(Charge{e.device, e.charged - reserved, 0});
  }
  SetCharged(e, reserved);
}

void PoolCharges::RefreshLocked(Entry& e) {
  if (e.pool == 0 || e.destroyed) return;
  const std::optional<PoolUsage> u = driver_.Usage(e.pool);
  if (u) {
    SettleLocked(e, u->reserved);
    return;
  }
  // The driver no longer knows the pool (destroyed behind the limiter's
  // back, or with its context): nothing of it is held any more.
  ForgetLocked(e);
}

void PoolCharges::ForgetLocked(Entry& e) {
  SettleLocked(e, 0);
  if (e.allocations > 0) {
    std::erase_if(live_, [&](const auto& kv) { return kv.second.pool == e.pool; });
  }
  e = Entry{};
}

void PoolCharges::RememberLocked(Entry& e, uint64_t ptr, uint64_t bytes) {
  if (ptr == 0) return;
  const uint64_t rounded = RoundUp(bytes, granularity_);
  if (!live_.insert_or_assign(ptr, Allocation{e.pool, rounded}).second) return;  // reused address
  ++e.allocations;
  e.allocated_bytes += rounded;
}

void PoolCharges::Freed(uint64_t ptr) {
  MutexLock lock(mu_);
  if (auto it = live_.find(ptr); it != live_.end()) {
    const Allocation a = it->second;
    live_.erase(it);
    if (Entry* e = Find(a.pool)) {
      e->allocations -= e->allocations > 0 ? 1 : 0;
      e->allocated_bytes -= std::min(e->allocated_bytes, a.bytes);
      // The driver releases a destroyed pool with its last allocation.
      if (e->destroyed && e->allocations == 0) ForgetLocked(*e);
    }
  }
  RefreshAllLocked();
}

bool PoolCharges::RefreshAllLocked(const Entry* busy) {
  bool lowered = false;
  for (Entry& e : entries_) {
    if (&e == busy) continue;
    const uint64_t before = e.charged;
    RefreshLocked(e);
    lowered |= e.charged < before;
  }
  return lowered;
}

void PoolCharges::Refresh(uint64_t pool) {
  MutexLock lock(mu_);
  if (Entry* e = Find(pool)) RefreshLocked(*e);
}

bool PoolCharges::RefreshAll() {
  MutexLock lock(mu_);
  return RefreshAllLocked();
}

bool PoolCharges::ReserveLocked(int device, uint64_t bytes, const Entry* busy) {
  if (bytes == 0 || ledger_.Reserve(device, bytes)) return true;
  // Another pool may have given memory back since it was last looked at.
  return RefreshAllLocked(busy) && ledger_.Reserve(device, bytes).has_value();
}

void PoolCharges::Learn(Entry& e, uint64_t shortfall, uint64_t growth) {
  // A pool that grew by more than the allocation lacked grows in blocks; the
  // smallest shortfall shows the block best (a larger one is rounded to
  // several blocks).
  if (growth > shortfall && shortfall > 0 && shortfall <= e.learnt_from) {
    e.block = growth;
    e.learnt_from = shortfall;
  } else if (e.block == 0 && growth == shortfall && shortfall > 0 && shortfall < kAssumedBlock) {
    // Grew by exactly a shortfall smaller than any block: it grows by the
    // allocation (a larger shortfall may be a whole number of blocks).
    e.block = granularity_;
    e.learnt_from = shortfall;
  }
}

void PoolCharges::Destroyed(uint64_t pool, bool outstanding, uint64_t used) {
  MutexLock lock(mu_);
  DestroyedLocked(pool, outstanding, used);
}

void PoolCharges::DestroyedLocked(uint64_t pool, bool outstanding, uint64_t used) {
  Entry* e = Find(pool);
  if (e == nullptr) return;
  if (outstanding) {
    e->destroyed = true;
    if (e->allocations == 0 || used > e->allocated_bytes) {
      // Some outstanding memory was not allocated through Allocate: its
      // free cannot be told, so the charge stays.
      e->allocations = 0;
      std::erase_if(live_, [&](const auto& kv) { return kv.second.pool == pool; });
      GS_LOG(kInfo, "limiter",
             "a memory pool destroyed with allocations outstanding stays charged (%llu bytes)",
             static_cast<unsigned long long>(e->charged));
    }
    return;
  }
  ForgetLocked(*e);
}

void PoolCharges::ResetInChild() {
  MutexLock lock(mu_);
  entries_.clear();
  live_.clear();
  device_blocks_.clear();
  charged_pools_.store(0);
}

}  // namespace gpuslice::limiter
