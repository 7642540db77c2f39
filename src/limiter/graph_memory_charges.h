// GraphMemCharges: the group's charge for the process's CUDA graph memory
// (allocation nodes: cuGraphAddMemAllocNode, cuMemAllocAsync captured;
// DESIGN.md section 2, docs/memory.md "Graph memory").
//
// The driver counts, per device, the graph memory pool's physical memory
// (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT). It grows when an executable graph
// is launched or uploaded and its allocations are not mapped yet, stays
// between launches and after the exec is destroyed, and shrinks only at
// cuDeviceGraphMemTrim (docs/sim.md "Graph memory"). So each device's graph
// pool is charged its reserve:
//
// - Instantiated(): the exec's allocation nodes need `bytes` (their sum,
//   rounded to the granularity: an upper bound of what its mapping takes).
// - Run() (a launch or an upload of an exec with allocation nodes): while
//   the exec is not mapped as far as the limiter knows (before its first run,
//   after a trim), what the pool's free memory (reserved - used) lacks of
//   `bytes` is reserved in the group segment before the driver is called; no
//   room: CUDA_ERROR_OUT_OF_MEMORY and the driver is not called, so a graph
//   that would pass the cap fails its launch. After the call the charge
//   settles on the reserve the driver reports (charged even past the cap
//   when the driver grew by more: it holds it).
// - Trimmed(): after cuDeviceGraphMemTrim every exec of the device counts as
//   unmapped again, and the charge settles on the reserve.
// - Destroyed(), RefreshAll(): the charge settles on the reserve (a
//   destroyed context may take the pool's memory with it).
//
// Where the driver cannot report the graph pool (no
// cuDeviceGetGraphMemAttribute) nothing is charged here.
//
// Thread-safe: one mutex, held across Run()'s driver call so that a reserve
// read after it is that call's doing. Execs without allocation nodes cost
// Run() one atomic load. Fork: the child calls ResetInChild() (after
// LockForFork() / UnlockForFork() around fork()).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "cuda_abi/cuda_driver_api.h"
#include "limiter/ledger.h"
#include "limiter/pool_charges.h"

namespace gpuslice::limiter {

// What GraphMemCharges asks the driver (a seam: tests give a fake).
class GraphMemDriver {
 public:
  virtual ~GraphMemDriver() = default;
  // The graph pool of CUDA device `ordinal` (RESERVED_MEM_CURRENT,
  // USED_MEM_CURRENT); nullopt when the driver cannot say.
  virtual std::optional<PoolUsage> Usage(int ordinal) = 0;
};

class GraphMemCharges {
 public:
  // Both references outlive this object.
  GraphMemCharges(Ledger& ledger, GraphMemDriver& driver) : ledger_(ledger), driver_(driver) {}
  GraphMemCharges(const GraphMemCharges&) = delete;
  GraphMemCharges& operator=(const GraphMemCharges&) = delete;

  // `exec`'s allocation nodes need `bytes` of CUDA device `ordinal`, group
  // device `device` (-1: not the group's; nothing is charged). bytes 0:
  // nothing to charge (forgets an exec handle reused).
  void Instantiated(uint64_t exec, int ordinal, int device, uint64_t bytes) EXCLUDES(mu_);

  // Runs `run` (the real launch or upload of `exec`) with its graph memory
  // charged first (see above); its result, or CUDA_ERROR_OUT_OF_MEMORY.
  template <typename RunFn>
  CUresult Run(uint64_t exec, RunFn&& run) EXCLUDES(mu_);

  // cuDeviceGraphMemTrim(ordinal) succeeded.
  void Trimmed(int ordinal) EXCLUDES(mu_);
  // `exec` was destroyed.
  void Destroyed(uint64_t exec) EXCLUDES(mu_);
  // Settles every device's charge on its reserve.
  void RefreshAll() EXCLUDES(mu_);

  // Bytes charged for the graph pool of `ordinal`.
  uint64_t charged(int ordinal) const EXCLUDES(mu_);

  // ---- fork ----
  void LockForFork() ACQUIRE(mu_) { mu_.Lock(); }
  void UnlockForFork() RELEASE(mu_) { mu_.Unlock(); }
  void ResetInChild() EXCLUDES(mu_);

 private:
  struct Exec {
    int ordinal = -1;
    int device = -1;
    uint64_t bytes = 0;
    bool mapped = false;  // ran since its instantiation or the last trim
  };
  struct DevicePool {
    int ordinal = -1;
    int device = -1;
    uint64_t charged = 0;
  };

  DevicePool& PoolOf(int ordinal, int device) REQUIRES(mu_);
  // Charges or gives back the difference to `reserved`.
  void SettleLocked(DevicePool& p, uint64_t reserved) REQUIRES(mu_);
  // Reserves for `x` before its run; false: no room.
  bool ReserveAheadLocked(Exec& x, DevicePool& p) REQUIRES(mu_);

  Ledger& ledger_;
  GraphMemDriver& driver_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Exec> execs_ GUARDED_BY(mu_);  // with allocation nodes only
  std::vector<DevicePool> pools_ GUARDED_BY(mu_);
  std::atomic<int> execs_with_memory_{0};  // execs_.size(), read without mu_
};

template <typename RunFn>
CUresult GraphMemCharges::Run(uint64_t exec, RunFn&& run) {
  if (execs_with_memory_.load(std::memory_order_acquire) == 0) return run();
  MutexLock lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return run();
  Exec& x = it->second;
  DevicePool& p = PoolOf(x.ordinal, x.device);
  if (!ReserveAheadLocked(x, p)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = run();
  const std::optional<PoolUsage> after = driver_.Usage(x.ordinal);
  if (after) SettleLocked(p, after->reserved);  // else what was reserved stays charged
  if (rc == CUDA_SUCCESS) x.mapped = true;
  return rc;
}

}  // namespace gpuslice::limiter
