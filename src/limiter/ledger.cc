#include "limiter/ledger.h"

#include <unistd.h>

#include <bit>
#include <cstdlib>

#include "common/hot.h"
#include "common/log.h"
#include "common/process.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

// ---- TrackedTable ----

TrackedTable::~TrackedTable() { free(entries_); }

GS_HOT inline size_t TrackedTable::Home(uint8_t kind, uint64_t id) const {
  // Fibonacci hashing: pointers share their low bits (allocation granules).
  const uint64_t key = id ^ (uint64_t{kind} << 56);
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
}

GS_HOT inline size_t TrackedTable::Find(uint8_t kind, uint64_t id) const {
  if (capacity_ == 0) return 0;
  const size_t mask = capacity_ - 1;
  for (size_t i = Home(kind, id);; i = (i + 1) & mask) {
    const Entry& e = entries_[i];
    if (e.kind == 0) return capacity_;
    if (e.id == id && e.kind == kind) return i;
  }
}

bool TrackedTable::Grow() {
  const size_t capacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
  auto* entries = static_cast<Entry*>(calloc(capacity, sizeof(Entry)));
  if (entries == nullptr) return false;
  Entry* old = entries_;
  const size_t old_capacity = capacity_;
  entries_ = entries;
  capacity_ = capacity;
  shift_ = 64 - std::countr_zero(capacity);
  const size_t mask = capacity_ - 1;
  for (size_t j = 0; j < old_capacity; ++j) {
    if (old[j].kind == 0) continue;
    size_t i = Home(old[j].kind, old[j].id);
    while (entries_[i].kind != 0) i = (i + 1) & mask;
    entries_[i] = old[j];
  }
  free(old);
  return true;
}

GS_HOT bool TrackedTable::Insert(Resource kind, uint64_t id, const Charge& c) {
  const auto k = static_cast<uint8_t>(static_cast<uint8_t>(kind) + 1);
  // At most half full: probes stay short. A failed growth uses the room left.
  if ((size_ + 1) * 2 > capacity_ && !Grow() && size_ + 1 >= capacity_) return false;
  // One probe: the key's entry, or the first empty one (where the key would
  // be: deletion shifts entries back, so no probe run has holes).
  const size_t mask = capacity_ - 1;
  size_t i = Home(k, id);
  for (; entries_[i].kind != 0; i = (i + 1) & mask) {
    if (entries_[i].id == id && entries_[i].kind == k) {
      entries_[i].bytes = c.bytes;
      entries_[i].context = c.context;
      entries_[i].device = c.device;
      return true;
    }
  }
  entries_[i] = Entry{id, c.bytes, c.context, c.device, k};
  ++size_;
  return true;
}

GS_HOT void TrackedTable::RemoveAt(size_t i) {
  // Backward-shift deletion: move up every later entry of the probe run
  // whose home does not lie cyclically in (i, j], so lookups need no tombstones.
  const size_t mask = capacity_ - 1;
  for (size_t j = (i + 1) & mask; entries_[j].kind != 0; j = (j + 1) & mask) {
    const size_t home = Home(entries_[j].kind, entries_[j].id);
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    entries_[i] = entries_[j];
    i = j;
  }
  entries_[i].kind = 0;
  --size_;
}

GS_HOT std::optional<Charge> TrackedTable::Erase(Resource kind, uint64_t id) {
  const size_t i = Find(static_cast<uint8_t>(static_cast<uint8_t>(kind) + 1), id);
  if (i >= capacity_) return std::nullopt;
  const Entry& e = entries_[i];
  const Charge c{e.device, e.bytes, e.context};
  RemoveAt(i);
  return c;
}

void TrackedTable::EraseContext(uintptr_t ctx, std::vector<Charge>* out) {
  // Rare (a context destroyed): collect the keys first, then erase each, as
  // erasing shifts entries under a running scan.
  std::vector<std::pair<uint8_t, uint64_t>> keys;
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].kind != 0 && entries_[i].context == ctx) {
      keys.emplace_back(entries_[i].kind, entries_[i].id);
    }
  }
  for (const auto& [kind, id] : keys) {
    if (auto c = Erase(static_cast<Resource>(kind - 1), id)) out->push_back(*c);
  }
}

void TrackedTable::Clear() {
  for (size_t i = 0; i < capacity_; ++i) entries_[i].kind = 0;
  size_ = 0;
}

// ---- Ledger ----

void Ledger::Bind(GroupSegment* segment) { segment_ = segment; }

uint64_t Ledger::Room(int device) const {
  if (segment_ == nullptr || device < 0) return kUnlimitedBytes;
  const uint64_t limit = segment_->MemoryLimit(device);
  if (limit == kUnlimitedBytes) return kUnlimitedBytes;
  const uint64_t used = segment_->ledger().MemoryUsed(device);
  return limit > used ? limit - used : 0;
}

GS_HOT int Ledger::Slot() {
  int s = slot_.load(std::memory_order_acquire);
  if (s >= 0) return s;
  MutexLock lock(join_mu_);
  s = slot_.load();
  if (s >= 0 || segment_ == nullptr) return s;
  char name[16];
  ProcessName(getpid(), name, sizeof name);
  auto joined = segment_->Join(getpid(), ProcessStartTime(getpid()), name);
  if (!joined.ok()) {
    GS_LOG(kError, "limiter", "%s", joined.status().message().c_str());
    return -1;
  }
  slot_.store(*joined, std::memory_order_release);
  return *joined;
}

GS_HOT std::optional<Charge> Ledger::ReserveDevice(int device, uint64_t bytes) {
  int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) [[unlikely]]
    slot = Slot();
  if (slot < 0 || device < 0) return std::nullopt;
  if (!segment_->ledger().ReserveDevice(device, bytes)) return std::nullopt;
  return Charge{device, bytes};
}

GS_HOT void Ledger::TrackReserved(Resource kind, uint64_t id, const Charge& c) {
  const int slot = slot_.load(std::memory_order_acquire);
  bool kept;
  {
    SpinLockGuard lock(mu_);
    kept = tracked_.Insert(kind, id, c);
    if (slot >= 0 && c.device >= 0) segment_->ledger().AddToOwnSlot(slot, c.device, c.bytes);
  }
  if (!kept) GS_LOG(kError, "limiter", "out of host memory: a charge stays until exit");
}

GS_HOT void Ledger::ReleaseReserved(const Charge& c) {
  if (c.device >= 0 && c.bytes > 0) segment_->ledger().ReleaseDevice(c.device, c.bytes);
}

GS_HOT uint64_t Ledger::TakeFromSlotLocked(const Charge& c) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || c.device < 0 || c.bytes == 0) return 0;
  return segment_->ledger().TakeFromOwnSlot(slot, c.device, c.bytes);
}

GS_HOT std::optional<Charge> Ledger::UntrackAndRelease(Resource kind, uint64_t id) {
  std::optional<Charge> c;
  uint64_t taken = 0;
  {
    SpinLockGuard lock(mu_);
    c = tracked_.Erase(kind, id);
    if (!c) return std::nullopt;
    taken = TakeFromSlotLocked(*c);
  }
  if (taken > 0) segment_->ledger().ReleaseDevice(c->device, taken);
  return c;
}

std::optional<Charge> Ledger::Reserve(int device, uint64_t bytes) {
  std::optional<Charge> c = ReserveDevice(device, bytes);
  if (!c) return std::nullopt;
  SpinLockGuard lock(mu_);
  segment_->ledger().AddToOwnSlot(slot_.load(std::memory_order_acquire), device, bytes);
  return c;
}

void Ledger::ForceCharge(const Charge& c) {
  const int slot = Slot();
  if (slot < 0 || c.device < 0 || c.bytes == 0) return;
  segment_->ledger().ChargeDevice(c.device, c.bytes);
  SpinLockGuard lock(mu_);
  segment_->ledger().AddToOwnSlot(slot, c.device, c.bytes);
}

void Ledger::Release(const Charge& c) {
  uint64_t taken = 0;
  {
    SpinLockGuard lock(mu_);
    taken = TakeFromSlotLocked(c);
  }
  if (taken > 0) segment_->ledger().ReleaseDevice(c.device, taken);
}

GS_HOT void Ledger::Track(Resource kind, uint64_t id, const Charge& c) {
  bool kept;
  {
    SpinLockGuard lock(mu_);
    kept = tracked_.Insert(kind, id, c);
  }
  if (!kept) GS_LOG(kError, "limiter", "out of host memory: a charge stays until exit");
}

GS_HOT std::optional<Charge> Ledger::Untrack(Resource kind, uint64_t id) {
  SpinLockGuard lock(mu_);
  return tracked_.Erase(kind, id);
}

size_t Ledger::tracked() const {
  SpinLockGuard lock(mu_);
  return tracked_.size();
}

void Ledger::ReleaseContext(uintptr_t ctx) {
  if (ctx == 0) return;
  std::vector<Charge> freed;
  {
    SpinLockGuard lock(mu_);
    tracked_.EraseContext(ctx, &freed);
  }
  for (const Charge& c : freed) Release(c);
}

void Ledger::Settle(Resource kind, uint64_t id, uint64_t actual) {
  std::optional<Charge> c = Untrack(kind, id);
  if (!c) return;
  if (actual > c->bytes) ForceCharge(Charge{c->device, actual - c->bytes, 0});
  if (actual < c->bytes) Release(Charge{c->device, c->bytes - actual, 0});
  c->bytes = actual;
  Track(kind, id, *c);
}

bool Ledger::PrimaryNeedsCharge(int device) {
  if (device < 0 || device >= kGroupMaxDevices) return true;
  SpinLockGuard lock(mu_);
  return primary_[device].retains == 0;
}

bool Ledger::PrimaryRetainDone(int device, uintptr_t ctx, std::optional<Charge> charge) {
  if (device < 0 || device >= kGroupMaxDevices) return false;
  {
    SpinLockGuard lock(mu_);
    PrimaryCount& pc = primary_[device];
    if (pc.retains++ == 0) {
      pc.ctx = ctx;
      pc.charge = charge.value_or(Charge{});
      return charge.has_value();
    }
  }
  if (charge) Release(*charge);  // a racing retain charged first
  return false;
}

std::optional<Charge> Ledger::PrimaryCharge(int device) const {
  if (device < 0 || device >= kGroupMaxDevices) return std::nullopt;
  SpinLockGuard lock(mu_);
  if (primary_[device].retains == 0) return std::nullopt;
  return primary_[device].charge;
}

bool Ledger::ResizePrimaryCharge(int device, uint64_t bytes) {
  if (device < 0 || device >= kGroupMaxDevices) return false;
  SpinLockGuard lock(mu_);
  if (primary_[device].retains == 0) return false;
  primary_[device].charge.bytes = bytes;
  return true;
}

void Ledger::PrimaryRelease(int device, bool reset) {
  if (device < 0 || device >= kGroupMaxDevices) return;
  Charge give_back;
  uintptr_t ctx = 0;
  {
    SpinLockGuard lock(mu_);
    PrimaryCount& pc = primary_[device];
    if (pc.retains == 0) return;
    pc.retains = reset ? 0 : pc.retains - 1;
    if (pc.retains > 0) return;
    give_back = pc.charge;
    ctx = pc.ctx;
    pc = PrimaryCount{};
  }
  Release(give_back);
  ReleaseContext(ctx);
}

// ---- fork ----

void Ledger::LockForFork() {
  join_mu_.lock();
  mu_.lock();
}

void Ledger::UnlockForFork() {
  mu_.unlock();
  join_mu_.unlock();
}

void Ledger::ResetInChild() {
  SpinLockGuard lock(mu_);
  tracked_.Clear();
  for (PrimaryCount& pc : primary_) pc = PrimaryCount{};
  slot_.store(-1);
}

}  // namespace gpuslice::limiter
