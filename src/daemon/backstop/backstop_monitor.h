// BackstopMonitor: the daemon's backstop in operation (DESIGN.md section 4,
// "Backstop"; docs/backstop.md), one monitor for the memory and the compute
// checks. Each Tick, on the GPU monitor's thread after its sample:
//  - reads each GPU's compute processes from the backend once (NVML's host
//    pids and used memory, which no tenant can forge) and, while the compute
//    check runs, NVML's per-process utilization samples of the last
//    `lookback_ns`;
//  - reads the registry from the tick's one RegistryView, which the daemon
//    takes once per sample for all its consumers (a tenant's host pid -> its
//    group; a group's limits on a GPU, the registry's lowered by its
//    tenants' own, as the group controllers hold them);
//  - runs MemoryBackstop and ComputeBackstop over that one reading, each
//    where its mode is not off;
//  - returns the reading, which the daemon's GpuUsageCache keeps for the API
//    and metrics (so no one reads NVML's process list a second time).
// Each finding is logged (event=backstop_<kind>), published (`sink`, SSE
// event backstop_<kind>) and counted (gpuslice_backstop_findings_total{kind}).
//
// Processes for which `is_ignored` holds (MPS servers: NVML charges them
// their clients' memory and time) are left out of both checks. A GPU whose
// processes cannot be read is skipped by the memory check for that tick and
// reported unreadable by the compute check.
//
// The compute throttle's SIGSTOP/SIGCONT are sent on a thread of the
// monitor's own (Start) that never calls NVML; no lock it takes is held across
// an NVML call: a stopped process holding a lock NVML needs (the simulator's
// state mutex) delays a Tick, never the SIGCONT that frees it. An MPS
// terminate_client runs under that lock (it may delay a switch by its
// duration). Never leaves a process stopped: the processes it may stop are
// recorded in the state store (record "compute_backstop") before the first
// SIGSTOP; Recover() at start SIGCONTs what a previous run (a crash) left
// there; Stop() SIGCONTs every throttled process, and so does a finding that
// clears.
//
// Thread safety: Tick from one thread at a time; Advance, Recover, Stop, the
// counters and FormatMetrics from any.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
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
#include "daemon/backstop/memory_backstop.h"
#include "daemon/backstop/signaller.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

inline constexpr const char* kComputeBackstopRecordName = "compute_backstop";

class BackstopMonitor {
 public:
  struct Options {
    std::optional<MemoryBackstop::Options> memory;    // nullopt: the memory check is off
    std::optional<ComputeBackstop::Options> compute;  // nullopt: the compute check is off
    DutyCycleThrottler::Options duty;
    int64_t lookback_ns = 1'000'000'000;  // the utilization samples averaged per tick
    std::string proc_root = "/proc";      // start times of unregistered processes
    // Processes not to account (MPS servers; nullptr: none).
    std::function<bool(uint32_t pid)> is_ignored;
    // Whether a group's processes on a GPU are MPS clients (nullptr: never).
    std::function<bool(const std::string& group, const std::string& uuid)> is_mps;
  };
  using EventSink = std::function<void(std::string_view type, const nlohmann::json& data)>;
  // What the checks may do, besides reporting (each used only by the mode that asks for it).
  struct Actions {
    MemoryBackstop::Killer killer;           // memory kill mode
    Signaller& signaller;                    // compute throttle mode
    ComputeBackstop::Terminator terminator;  // compute throttle of MPS clients (nullptr: none)
  };
  struct Clocks {
    const Clock& monotonic;  // the duty cycle and the compute thresholds
    const Clock& realtime;   // NVML's sample timestamps
  };

  // REQUIRES: everything passed by reference (and `store`, when not null)
  // outlives the monitor.
  BackstopMonitor(Options options, GpuBackend& backend, Actions actions, StateStore* store,
                  EventSink sink, Clocks clocks);
  ~BackstopMonitor();  // Stop()
  BackstopMonitor(const BackstopMonitor&) = delete;
  BackstopMonitor& operator=(const BackstopMonitor&) = delete;

  // What one Tick read and found.
  struct TickResult {
    std::vector<GpuProcessReading> readings;  // one per GPU of the snapshot, in its order
    std::vector<MemoryBackstop::Finding> memory;
    std::vector<ComputeBackstop::Finding> compute;
  };
  // Reads and checks every GPU of `snapshot` (its index and UUID) once, now,
  // against `registry` (the registry as of this sample); the findings are
  // also logged, published and counted. After Stop the processes are still
  // read, and nothing is checked.
  TickResult Tick(const Snapshot& snapshot, const RegistryView& registry);

  // SIGCONTs the processes a previous run recorded as possibly stopped (each
  // reported as throttle_recovered), then clears the record. Call once,
  // before Start.
  void Recover();
  // The duty cycle's signals due now; when the next one is due (monotonic ns,
  // INT64_MAX: none).
  int64_t Advance();
  // Runs Advance on the monitor's thread when due (a Tick that starts a
  // throttle wakes it).
  void Start();
  // Ends the thread and every throttle (SIGCONT, reported). Idempotent.
  void Stop();

  uint64_t Count(MemoryBackstop::FindingKind kind) const;
  uint64_t Count(ComputeBackstop::FindingKind kind) const;
  // Prometheus text: gpuslice_backstop_findings_total{kind="..."}, the HELP and
  // TYPE lines and one line per kind of each check that runs ("" when neither).
  std::string FormatMetrics() const;

 private:
  void Report(const std::vector<MemoryBackstop::Finding>& findings);
  void Report(const std::vector<ComputeBackstop::Finding>& findings);
  // Records the throttled processes (the state store's kComputeBackstopRecordName).
  // A failed save is logged once and kept in `unsaved_`; every Tick saves
  // it again until a save works (docs/errors.md "A full disk").
  void Persist(const std::vector<ProcessRef>& processes);
  void PersistLocked(const std::vector<ProcessRef>& processes) REQUIRES(persist_mu_);
  void RetryUnsaved();
  void RunDutyCycle();
  const RegistryView& Registry() const;

  const Options options_;
  GpuBackend& backend_;
  Signaller& signaller_;
  StateStore* const store_;
  const EventSink sink_;
  const Clocks clocks_;

  Mutex persist_mu_;  // one save at a time; taken after mu_
  std::optional<std::vector<ProcessRef>> unsaved_ GUARDED_BY(persist_mu_);

  mutable Mutex mu_;  // never held across an NVML call
  DutyCycleThrottler throttler_;
  MemoryBackstop memory_;
  ComputeBackstop compute_;
  // The current Tick's registry (under mu_; null between ticks), which the
  // checks' callbacks read through Registry() (an empty view when null).
  const RegistryView* view_ = nullptr;
  bool stopped_ = false;

  Mutex thread_mu_;
  std::condition_variable_any wake_;
  bool stop_thread_ = false;
  std::thread duty_;  // Advance when due; never calls NVML

  std::array<std::atomic<uint64_t>, 4> memory_counts_{};  // by MemoryBackstop::FindingKind
  std::array<std::atomic<uint64_t>, ComputeBackstop::kKindCount> compute_counts_{};
};

// The SSE event / log name of a memory finding: backstop_over_limit,
// backstop_back_under, backstop_unregistered_process, backstop_killed.
std::string_view BackstopEventName(MemoryBackstop::FindingKind kind);
nlohmann::json FindingJson(const MemoryBackstop::Finding& finding);
nlohmann::json ComputeFindingJson(const ComputeBackstop::Finding& finding);

// The production killer: SIGKILLs `pid` only while it is the registry's
// tenant (same start time, read after a pidfd to it is opened, so a reused pid
// is never signalled). False when it is not, or the signal fails.
MemoryBackstop::Killer TenantKiller(const TenantRegistry& registry,
                                    std::string proc_root = "/proc");

// Whether /proc/<pid>/comm names an MPS server (nvidia-cuda-mps-server, as
// the kernel cuts it to 15 characters).
bool IsMpsServer(const std::string& proc_root, uint32_t pid);

}  // namespace gpuslice::daemon
