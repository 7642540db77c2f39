// GpuManager: applies GPU settings, one command at a time per GPU, and keeps
// the leases that revert them (DESIGN.md section 5).
//
// Lease rule, per (GPU, setting):
//  1. The first lease records the baseline: the value before it.
//  2. Each holder has at most one lease; setting again replaces it (new value,
//     new expiry) and makes it the most recent.
//  3. The device shows the most recent lease's value (last writer wins).
//  4. When a lease ends (expiry, release, or the daemon stopping) it is
//     removed; if it was the most recent, the device goes to the value of the
//     next most recent lease, or back to the baseline when none is left.
//  5. A permanent change applies its value and drops every lease of that
//     setting on that GPU: nothing is reverted later, it is the new normal.
//
// Thread safety: all public methods are thread-safe. Device commands run on
// one SerialExecutor per GPU; lease records are guarded by a mutex. The clock
// is read only by the calling thread (Set, ExpireDue), never by executors, so
// tests can drive a SimulatedClock from their own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/serial_executor.h"
#include "daemon/gpu/setting.h"

namespace gpuslice::daemon {

struct LeaseOptions {
  std::string holder;                  // who holds the change, e.g. "uid:1000"
  std::optional<int64_t> duration_ns;  // none: held until released or the daemon stops
  bool permanent = false;              // no lease, no revert (rule 5)
};

struct LeaseInfo {
  uint32_t gpu;
  SettingKind kind;
  std::string holder;
  SettingValue value;
  SettingValue baseline;
  std::optional<int64_t> expires_ns;  // on the manager's clock
  bool effective;                     // the most recent lease: its value is on the device
};

// kInvalidArgument naming the valid range when `value` is outside what `gpu`
// supports (power limit constraints, maximum clocks); OK otherwise.
Status ValidateSetting(const GpuInfo& gpu, const SettingValue& value);

class GpuManager {
 public:
  // REQUIRES: `backend` and `clock` outlive the manager.
  GpuManager(GpuBackend& backend, const Clock& clock);
  ~GpuManager();  // stops the executors (running queued commands); does not revert
  GpuManager(const GpuManager&) = delete;
  GpuManager& operator=(const GpuManager&) = delete;

  uint32_t DeviceCount() const { return static_cast<uint32_t>(executors_.size()); }
  const Clock& clock() const { return clock_; }

  // Queues `value` on each GPU in `gpus`; one future per GPU, in that order,
  // ready when that GPU's command has run. REQUIRES: every index < DeviceCount().
  std::vector<std::future<Status>> Set(const std::vector<uint32_t>& gpus, const SettingValue& value,
                                       const LeaseOptions& lease);
  // Ends `holder`'s lease of `kind` on each GPU (rule 4); kNotFound for a GPU
  // where it holds none.
  std::vector<std::future<Status>> Release(const std::vector<uint32_t>& gpus, SettingKind kind,
                                           const std::string& holder);
  // Total energy and instant power, read in order with the GPU's commands.
  std::future<StatusOr<EnergyReading>> Energy(uint32_t gpu);

  // For the MPS module: holds `mode` on `gpu` for `holder` (no expiry) until
  // ReleaseComputeMode or the daemon stops. Blocking.
  Status SetComputeMode(uint32_t gpu, ComputeMode mode, const std::string& holder);
  Status ReleaseComputeMode(uint32_t gpu, const std::string& holder);

  // Ends every lease whose expiry is at or before the clock's now.
  void ExpireDue();
  // Reverts every leased setting to its baseline and waits; afterwards Set
  // is refused with kUnavailable. For daemon shutdown.
  void RevertAll();
  // Runs the commands already queued, then ends the executors; later
  // commands fail with kUnavailable. After it no callback runs. Idempotent.
  void Stop();

  std::vector<LeaseInfo> Leases() const;
  // Called (on an executor thread) after a command changed a GPU's settings.
  // Set before the first command.
  void SetChangeListener(std::function<void(uint32_t gpu)> listener);

 private:
  struct Lease {
    uint64_t id;
    std::string holder;
    SettingValue value;
    std::optional<int64_t> expires_ns;
    bool expiring = false;  // an expiry release is queued
  };
  struct Stack {
    SettingValue baseline;
    std::vector<Lease> leases;  // oldest first; back() is effective
  };
  using Key = std::pair<uint32_t, int>;  // (gpu, SettingKind)

  Status SetOnGpu(uint32_t gpu, const SettingValue& value, const LeaseOptions& lease,
                  std::optional<int64_t> expires_ns);
  Status ReleaseOnGpu(uint32_t gpu, SettingKind kind, const std::string& holder,
                      std::optional<uint64_t> lease_id);
  // Runs `f` on `gpu`'s executor; the future holds its result (kUnavailable
  // when the executor has stopped).
  template <typename R, typename F>
  std::future<R> Run(uint32_t gpu, F f);
  void Changed(uint32_t gpu);

  GpuBackend& backend_;
  const Clock& clock_;
  std::vector<std::unique_ptr<SerialExecutor>> executors_;
  mutable std::mutex mu_;
  std::map<Key, Stack> stacks_;  // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;         // GUARDED_BY(mu_)
  bool stopping_ = false;        // GUARDED_BY(mu_)
  std::function<void(uint32_t)> listener_;
};

}  // namespace gpuslice::daemon
