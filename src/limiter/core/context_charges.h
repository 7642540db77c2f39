// ContextCharges: what the process charges for its CUDA contexts' own
// memory (DESIGN.md section 2: "each context's own reservation" is counted;
// context_footprint.h says why and how much).
//
// A context is charged Estimate(device) before it exists: what the last
// context settled at on that device, else the configured estimate
// (GPUSLICE_CONTEXT_BYTES, 300 MiB by default). Once it exists, where its
// device has a memory limit and the estimate was not fixed by
// GPUSLICE_CONTEXT_BYTES, its charge settles on the driver's count
// (ContextDriver: NVML's figure of this process on that device) less
// everything else the process has charged there: the difference is charged,
// or given back. No room for a larger difference: nothing changes and the
// caller destroys the context and refuses it. An unknown driver count leaves
// the estimate standing.
//
// No CUDA, no NVML, no getenv: the driver's count comes through ContextDriver
// and the charges go to the process's Ledger, so it is tested on a ledger
// over a temporary segment and a scripted driver.
//
// Thread-safe (the settled sizes under a lock of their own; the ledger is).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "common/thread_annotations.h"
#include "limiter/ledger.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

inline constexpr uint64_t kDefaultContextBytes = 300ull << 20;

// The driver's count of this process's memory on a group device.
class ContextDriver {
 public:
  virtual ~ContextDriver() = default;
  // Bytes on group device `device`; nullopt: not known (no NVML, the process
  // not listed, a PID namespace hiding its host pid).
  virtual std::optional<uint64_t> ProcessBytes(int device) = 0;
};

class ContextCharges {
 public:
  struct Options {
    uint64_t estimate_bytes = kDefaultContextBytes;
    bool fixed = false;  // the estimate was given (GPUSLICE_CONTEXT_BYTES): never settled
  };

  // Settled sizes are rounded up to `granularity` (the driver's allocation
  // granularity). REQUIRES: `ledger` outlives this.
  ContextCharges(Ledger& ledger, uint64_t granularity)
      : ledger_(ledger), granularity_(granularity) {}
  ContextCharges(const ContextCharges&) = delete;
  ContextCharges& operator=(const ContextCharges&) = delete;

  // At attach, before the first context: the group's segment (the ledger's),
  // the options and the driver's count. REQUIRES: `segment` and `driver`
  // outlive this (the process's, never freed).
  void Bind(const GroupSegment* segment, Options options, ContextDriver* driver);

  // Bytes a new context on group device `device` is charged before it exists.
  uint64_t Estimate(int device) const;
  // Settles the tracked context `id` (Resource::kContext). False if the
  // group has no room for the difference (nothing changed).
  bool SettleContext(uint64_t id);
  // Settles the primary context of `device`, whose charge this caller made
  // (Ledger::PrimaryRetainDone). False as SettleContext.
  bool SettlePrimary(int device);

  // Around fork() (pthread_atfork): the lock held in the parent, given back
  // in both; the child keeps the settled sizes (same devices, same driver).
  void LockForFork() ACQUIRE(mu_) { mu_.lock(); }
  void UnlockForFork() RELEASE(mu_) { mu_.unlock(); }

 private:
  // The settled size of charge `c` with the difference charged or given
  // back; nullopt if the group has no room.
  std::optional<uint64_t> Settled(const Charge& c);

  Ledger& ledger_;
  const uint64_t granularity_;
  const GroupSegment* segment_ = nullptr;  // set by Bind, then read-only
  Options options_;
  ContextDriver* driver_ = nullptr;
  mutable Mutex mu_;
  std::unordered_map<int, uint64_t> settled_ GUARDED_BY(mu_);  // device -> bytes
};

}  // namespace gpuslice::limiter
