// ComputeBackstopMonitor: the compute backstop in operation (DESIGN.md
// section 4, "Backstop"; docs/backstop.md). On two threads of its own:
//  - every `sample_interval_ns` one reads each GPU's compute processes and
//    NVML's per-process utilization samples of the last `lookback_ns` from the
//    backend (host pids), maps them to the registry's groups (a tenant's host
//    pid -> its group; a group's compute limit on a GPU is the registry's,
//    lowered by its tenants' own) and runs ComputeBackstop over them;
//  - the other sends the duty cycle's SIGSTOP/SIGCONT when due. It never
//    calls NVML, and no lock it takes is held across an NVML call: a stopped
//    process holding a lock NVML needs (the simulator's state mutex) delays a
//    sample, never the SIGCONT that frees it. An MPS terminate_client runs
//    under that lock (it may delay a switch by its duration).
// Each finding is logged (event=backstop_<kind>), published (`sink`, SSE
// event backstop_<kind>) and counted (gpuslice_backstop_findings_total{kind}).
//
// Never leaves a process stopped: the processes it may stop are recorded in
// the state store (record "compute_backstop") before the first SIGSTOP;
// Recover() at start SIGCONTs what a previous run (a crash) left there; Stop()
// SIGCONTs every throttled process, and so does a finding that clears.
//
// Thread safety: Sample, Advance, Recover, Stop and the counters may be called
// from any thread; Start runs Sample and Advance on the monitor's threads.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "daemon/backstop/compute_backstop.h"
#include "daemon/backstop/duty_cycle.h"
#include "daemon/backstop/signaller.h"
#include "daemon/gpu/backend.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

inline constexpr const char* kComputeBackstopRecordName = "compute_backstop";

class ComputeBackstopMonitor {
 public:
  struct Options {
    ComputeBackstop::Options backstop;
    DutyCycleThrottler::Options duty;
    int64_t sample_interval_ns = 500'000'000;
    int64_t lookback_ns = 1'000'000'000;  // the utilization samples averaged per sample
    std::string proc_root = "/proc";      // start times of unregistered processes
    // Processes not to account (MPS servers; nullptr: none).
    std::function<bool(uint32_t pid)> is_ignored;
    // Whether a group's processes on a GPU are MPS clients (nullptr: never).
    std::function<bool(const std::string& group, const std::string& uuid)> is_mps;
  };
  using EventSink = std::function<void(std::string_view type, const nlohmann::json& data)>;
  struct Clocks {
    const Clock& monotonic;  // the duty cycle and the 5 s thresholds
    const Clock& realtime;   // NVML's sample timestamps
  };

  // REQUIRES: everything passed by reference (and `store`, when not null)
  // outlives the monitor.
  ComputeBackstopMonitor(Options options, GpuBackend& backend, const TenantRegistry& registry,
                         Signaller& signaller, StateStore* store,
                         ComputeBackstop::Terminator terminator, EventSink sink, Clocks clocks);
  ~ComputeBackstopMonitor();  // Stop()
  ComputeBackstopMonitor(const ComputeBackstopMonitor&) = delete;
  ComputeBackstopMonitor& operator=(const ComputeBackstopMonitor&) = delete;

  // SIGCONTs the processes a previous run recorded as possibly stopped (each
  // reported as throttle_recovered), then clears the record. Call once,
  // before Start.
  void Recover();
  // One sample of every GPU, now; the findings (also logged, published, counted).
  std::vector<ComputeBackstop::Finding> Sample();
  // The duty cycle's signals due now; when the next one is due (monotonic ns,
  // INT64_MAX: none).
  int64_t Advance();

  void Start();
  // Ends the thread and every throttle (SIGCONT, reported). Idempotent.
  void Stop();

  uint64_t Count(ComputeBackstop::FindingKind kind) const;
  // Prometheus lines gpuslice_backstop_findings_total{kind="..."} for the
  // compute kinds; with `header`, the metric's HELP and TYPE first (leave
  // them out when the memory backstop's lines precede these).
  std::string FormatMetrics(bool header) const;

 private:
  void Report(std::vector<ComputeBackstop::Finding>& findings);
  // Records the throttled processes (the state store's kComputeBackstopRecordName).
  // A failed save is logged once and kept in `unsaved_`; every Sample saves
  // it again until a save works (docs/errors.md "A full disk").
  void Persist(const std::vector<ProcessRef>& processes);
  void PersistLocked(const std::vector<ProcessRef>& processes) REQUIRES(persist_mu_);
  void RetryUnsaved();
  void RunSampler();
  void RunDutyCycle();

  const Options options_;
  GpuBackend& backend_;
  const TenantRegistry& registry_;
  Signaller& signaller_;
  StateStore* const store_;
  const EventSink sink_;
  const Clocks clocks_;

  Mutex persist_mu_;  // one save at a time; taken after mu_
  std::optional<std::vector<ProcessRef>> unsaved_ GUARDED_BY(persist_mu_);

  Mutex sample_mu_;                        // one Sample at a time
  std::map<uint32_t, std::string> uuids_;  // GPU index -> UUID, learnt on first read (sample_mu_)

  mutable Mutex mu_;  // never held across an NVML call
  DutyCycleThrottler throttler_;
  ComputeBackstop backstop_;
  TenantRegistry::View view_;  // the registry as of the current sample
  bool stopped_ = false;

  Mutex thread_mu_;
  std::condition_variable_any wake_;
  bool stop_thread_ = false;
  std::thread sampler_;  // Sample every sample_interval_ns
  std::thread duty_;     // Advance when due; never calls NVML

  std::array<std::atomic<uint64_t>, ComputeBackstop::kKindCount> counts_{};
};

nlohmann::json ComputeFindingJson(const ComputeBackstop::Finding& finding);

}  // namespace gpuslice::daemon
