#include "limiter/core/context_charges.h"

#include "limiter/core/context_footprint.h"

namespace gpuslice::limiter {

void ContextCharges::Bind(const GroupSegment* segment, Options options, ContextDriver* driver) {
  segment_ = segment;
  options_ = options;
  driver_ = driver;
}

uint64_t ContextCharges::Estimate(int device) const {
  MutexLock lock(mu_);
  auto it = settled_.find(device);
  return it != settled_.end() ? it->second : options_.estimate_bytes;
}

std::optional<uint64_t> ContextCharges::Settled(const Charge& c) {
  const int slot = ledger_.slot();
  if (options_.fixed || segment_ == nullptr || driver_ == nullptr || slot < 0 || c.device < 0 ||
      segment_->MemoryLimit(c.device) == kUnlimitedBytes) {
    return c.bytes;
  }
  const std::optional<uint64_t> driver = driver_->ProcessBytes(c.device);
  if (!driver) return c.bytes;  // the estimate stands
  const uint64_t settled = SettledContextBytes(
      *driver, segment_->ledger().SlotMemory(slot, c.device), c.bytes, granularity_);
  if (settled > c.bytes && !ledger_.Reserve(c.device, settled - c.bytes)) return std::nullopt;
  if (settled < c.bytes) ledger_.Release(Charge{c.device, c.bytes - settled, 0});
  MutexLock lock(mu_);
  settled_[c.device] = settled;
  return settled;
}

bool ContextCharges::SettleContext(uint64_t id) {
  std::optional<Charge> c = ledger_.Untrack(Resource::kContext, id);
  if (!c) return true;
  const std::optional<uint64_t> settled = Settled(*c);
  if (settled) c->bytes = *settled;
  ledger_.Track(Resource::kContext, id, *c);
  return settled.has_value();
}

bool ContextCharges::SettlePrimary(int device) {
  const std::optional<Charge> c = ledger_.PrimaryCharge(device);
  if (!c) return true;
  const std::optional<uint64_t> settled = Settled(*c);
  if (!settled) return false;
  // A release racing with this retain may have given the charge back already.
  if (ledger_.ResizePrimaryCharge(device, *settled)) return true;
  if (*settled > c->bytes) {
    ledger_.Release(Charge{device, *settled - c->bytes, 0});
  } else if (*settled < c->bytes) {
    ledger_.ForceCharge(Charge{device, c->bytes - *settled, 0});  // that release gave back c->bytes
  }
  return true;
}

}  // namespace gpuslice::limiter
