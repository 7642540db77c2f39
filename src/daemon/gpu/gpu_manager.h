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
// Durability (docs/daemon.md, "State"), with SetPersistence:
//  6. Every change to the lease records (set, release, expiry, permanent
//     change, RevertAll) is saved before the device changes; a failed save
//     refuses the change with kUnavailable and changes nothing.
//  7. A revert is saved as a stack with no leases (its baseline kept) until
//     the device is back, so a crash between the two still reverts at start.
//  8. Expiries are saved on the wall clock (CLOCK_REALTIME), with the lease's
//     duration and, when the boot is known, on the monotonic clock of that
//     boot. Restore in the same boot keeps the monotonic expiry (a wall clock
//     stepped back while the daemon was down lengthens nothing); after a
//     reboot it gives a lease the wall time that remains, never more than the
//     duration it was granted for.
//  9. A revert (or the next lease's value) the device refuses is not dropped:
//     the stack stays, in the record and in memory, and ExpireDue retries it
//     with backoff (1 s, doubling, at most kMaxRetryBackoffNs) until the
//     device takes it. Each failure is logged (event=revert_failed), counted
//     (RevertStatus) and reported to the event listener.
//  12. A kept lease (LeaseOptions::kept: MPS's compute mode, whose control
//      daemons outlive gpusliced's restarts) is not ended by the daemon
//      stopping: RevertAll ends the other leases of its stack, the device
//      shows the newest kept lease's value, and the record keeps the kept
//      leases for the next start's Restore. Only Release ends one.
//  11. A step that must not be refused (a rollback, a revert, the end of a
//     revert) still changes the leases when its save fails; the record is
//     then stale, and ExpireDue saves it again until a save works (the
//     state store counts and logs the failures: state_store.h).
//
// All or nothing (docs/api.md "Settings"):
// 10. A Set naming several GPUs is one change: when any GPU refuses it (an
//     NVML error, a record that cannot be saved, a GPU that cannot be read),
//     every GPU that took it is undone once all have answered: its new lease
//     is removed as if never granted (a lease of the same holder it replaced
//     comes back), a permanent change gives the stack and the device their
//     old values back, and the device is set back where its value changed.
//     The refusing GPU's future holds its error; an undone GPU's holds
//     kAborted naming the GPU that refused. An undo the device refuses is
//     kept and retried as in rule 9 (counted in revert_failures). A lease
//     that ended or was replaced before its undo ran is left as it is.
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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/gpu/backend.h"
#include "daemon/gpu/lease_record.h"
#include "daemon/gpu/serial_executor.h"
#include "daemon/gpu/setting.h"

namespace gpuslice::daemon {

struct LeaseOptions {
  std::string holder;                  // who holds the change, e.g. "uid:1000"
  std::optional<int64_t> duration_ns;  // none: held until released or the daemon stops
  bool permanent = false;              // no lease, no revert (rule 5)
  bool kept = false;                   // held across the daemon's stops (rule 12)
  // For a lease that starts its stack: the value to go back to, instead of
  // the device's now (a holder that changed the device before it held a
  // lease). Of the lease's setting.
  std::optional<SettingValue> baseline = std::nullopt;
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

// Where GpuManager keeps its lease records.
struct LeasePersistence {
  // Durably replaces the lease record with `data` (LeaseRecordsJson); an
  // error means nothing was saved. Called on executor threads, one at a time.
  std::function<Status(const nlohmann::json& data)> save;
  // The wall clock (RealtimeClock) expiries are saved on; read only by the
  // threads that call Set and Restore. REQUIRES: outlives the manager.
  const Clock* wall_clock = nullptr;
  // This boot's id (/proc/sys/kernel/random/boot_id); empty: unknown, the
  // monotonic expiries are neither saved nor trusted. REQUIRES, when set:
  // the manager's clock is CLOCK_MONOTONIC (MonotonicClock), which runs on
  // across daemon restarts within a boot.
  std::string boot_id = {};
};

// A setting whose revert (or next value) the device refused, retried (rule 9).
struct PendingRevert {
  uint32_t gpu;
  SettingKind kind;
  SettingValue target;  // what the device must show
  int attempts;         // failed attempts so far
  std::string error;    // the last one's
};

struct RevertStatus {
  uint64_t failures_total = 0;    // every failed revert attempt since start
  uint64_t retried_ok_total = 0;  // reverts that went through on a retry
  std::vector<PendingRevert> pending;
};

// What Restore found and did, one count per lease.
struct RestoreReport {
  bool refused = false;  // the record was unreadable: nothing restored
  int kept = 0;          // still running: the device shows the value again
  int reverted = 0;      // expired while the daemon was down: reverted
  int dropped = 0;       // its GPU is gone
};

// Prometheus text: gpuslice_lease_revert_failures_total (counter),
// gpuslice_lease_reverts_retried_total (counter) and
// gpuslice_lease_reverts_pending (gauge).
std::string FormatRevertMetrics(const RevertStatus& status);

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
  // ready once every GPU's command has run (and, if one failed, the others
  // were undone: rule 10). REQUIRES: every index < DeviceCount(), no index
  // twice. kUnavailable when the lease record cannot be saved (rule 6).
  std::vector<std::future<Status>> Set(const std::vector<uint32_t>& gpus, const SettingValue& value,
                                       const LeaseOptions& lease);
  // Ends `holder`'s lease of `kind` on each GPU (rule 4); kNotFound for a GPU
  // where it holds none.
  std::vector<std::future<Status>> Release(const std::vector<uint32_t>& gpus, SettingKind kind,
                                           const std::string& holder);
  // Total energy and instant power, read in order with the GPU's commands.
  std::future<StatusOr<EnergyReading>> Energy(uint32_t gpu);

  // For the MPS module: holds `mode` on `gpu` for `holder`, a kept lease
  // (rule 12) with no expiry, until ReleaseComputeMode; `baseline` as
  // LeaseOptions::baseline. Blocking.
  Status HoldComputeMode(uint32_t gpu, ComputeMode mode, const std::string& holder,
                         std::optional<ComputeMode> baseline);
  Status ReleaseComputeMode(uint32_t gpu, const std::string& holder);
  // Whether this daemon may change `kind` on `gpu`: sets the value the device
  // has (no lease, no change), in order with the GPU's commands. Blocking.
  Status CheckSettable(uint32_t gpu, SettingKind kind);

  // Saves the lease records through `persistence` from now on (rules 6-8).
  // REQUIRES: called before the first command; persistence.wall_clock set.
  void SetPersistence(LeasePersistence persistence);

  // Reconciles the GPUs with the records an earlier run saved (`loaded`: the
  // record's data as StateStore::Load returns it), logging each decision as
  // event=lease_restored:
  //  - a lease still running is kept with the wall time it has left, and the
  //    device is set to its stack's effective value again;
  //  - a lease that expired is dropped; the device goes to the next lease's
  //    value or the baseline;
  //  - a stack whose GPU UUID is not on this node is dropped;
  //  - kNotFound: no record, nothing to do; any other error, or data that
  //    ParseLeaseRecords refuses: logged, nothing restored (report.refused).
  // The reconciled records are saved before the devices change.
  // REQUIRES: SetPersistence was called; no other command has run yet.
  // Blocking.
  RestoreReport Restore(const StatusOr<nlohmann::json>& loaded);

  // Ends every lease whose expiry is at or before the clock's now, retries
  // refused reverts (rule 9) and saves a stale record again (rule 11).
  void ExpireDue();
  // Reverts every leased setting to its baseline (a stack with kept leases
  // to the newest of them, rule 12) and waits; afterwards Set is refused
  // with kUnavailable. For daemon shutdown.
  void RevertAll();
  // Runs the commands already queued, then ends the executors; later
  // commands fail with kUnavailable. After it no callback runs. Idempotent.
  void Stop();

  std::vector<LeaseInfo> Leases() const;
  RevertStatus Reverts() const;
  // Called (on an executor thread) after a command changed a GPU's settings.
  // Set before the first command.
  void SetChangeListener(std::function<void(uint32_t gpu)> listener);
  // Called (on an executor thread) with "revert_failed" or "revert_retried"
  // and the event's fields. Set before the first command.
  void SetEventListener(
      std::function<void(std::string_view type, const nlohmann::json& data)> listener);

  static constexpr int64_t kFirstRetryBackoffNs = 1'000'000'000;
  static constexpr int64_t kMaxRetryBackoffNs = 60'000'000'000;

 private:
  struct Lease {
    uint64_t id;
    std::string holder;
    SettingValue value;
    std::optional<int64_t> expires_ns;       // on clock_
    std::optional<int64_t> expires_wall_ns;  // the same instant on the wall clock
    std::optional<int64_t> duration_ns;      // as granted, for the records (rule 8)
    bool kept = false;                       // rule 12
    bool expiring = false;                   // an expiry release is queued
  };
  // The device does not show the stack's effective value: a Set failed (rule 9).
  // (No default member initializers: the enclosing class is incomplete where
  // std::optional<Retry> asks whether it is default-constructible.)
  struct Retry {
    int attempts;
    std::string error;
    std::optional<int64_t> next_ns;  // on clock_; none: ExpireDue schedules it
    bool queued;                     // a retry is on the executor
  };
  struct Stack {
    std::string uuid;  // of the GPU, for the records
    SettingValue baseline;
    std::vector<Lease> leases;  // oldest first; back() is effective; empty: reverting (rule 7)
    std::optional<Retry> retry =
        std::nullopt;  // in memory only: a restart applies every stack anyway
    SettingValue Target() const { return leases.empty() ? baseline : leases.back().value; }
  };
  using Key = std::pair<uint32_t, int>;  // (gpu, SettingKind)

  // Invariant: the stack of key (gpu, kind) changes only on gpu's executor
  // (or in Restore, before any executor runs), so an executor can copy it,
  // edit the copy and put it back with Commit without losing a change.
  std::optional<Stack> StackOf(const Key& key) const;
  // Makes `after` (none: no stack) the stack of `key`, saving the records
  // first; kUnavailable, and nothing changed, when the save fails.
  Status Commit(const Key& key, std::optional<Stack> after);
  // Like Commit, but the change is made even when the save fails (logged):
  // for rollbacks and for steps that must not be refused. The next saved
  // change rewrites the whole record.
  void CommitAnyway(const Key& key, std::optional<Stack> after, const char* why);
  // The records with `key`'s stack replaced by `after`
  // (no key: the records as they are).
  nlohmann::json RecordsWith(const std::optional<Key>& key, const std::optional<Stack>& after) const
      REQUIRES(mu_);

  struct Expiry {
    std::optional<int64_t> ns;       // on clock_
    std::optional<int64_t> wall_ns;  // on the wall clock
    std::optional<int64_t> duration_ns;
  };
  // Records that the device refused `key`'s effective value (`error`), or
  // that it shows it (ok), in memory; logs, counts and reports a failure.
  void NoteApplied(const Key& key, const Status& status, bool retry);
  // A retry of `key`'s effective value, on its executor (rule 9).
  Status RetryOnGpu(const Key& key);
  // What undoes one GPU's part of a Set (rule 10).
  struct Undo {
    std::optional<Stack> before;  // the stack before the change
    SettingValue prior;           // the device's value before it
    SettingValue value;           // the value the change applied
    uint64_t lease_id;            // the lease it granted; 0: a permanent change
    std::string holder;
  };
  // One Set across several GPUs (rule 10): each GPU's result and undo, and
  // the futures' promises, fulfilled once the last GPU has answered.
  struct SetBatch;
  // Applies one GPU's part of a Set; on success fills `undo`.
  Status SetOnGpu(uint32_t gpu, const SettingValue& value, const LeaseOptions& lease, Expiry expiry,
                  std::optional<Undo>* undo);
  // Records GPU number `i` of `batch` as done with `status`; the last one
  // queues the undos (if any GPU failed) and fulfils the promises.
  void FinishOne(const std::shared_ptr<SetBatch>& batch, size_t i, Status status,
                 std::optional<Undo> undo);
  // Undoes `undo` on `gpu` (on its executor); the error when the device
  // refused to go back (kept for retry), OK otherwise.
  Status UndoOnGpu(uint32_t gpu, SettingKind kind, const Undo& undo, const std::string& why);
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
  LeasePersistence persistence_;
  Mutex persist_mu_;  // one save at a time, in the order of the changes; before mu_
  mutable Mutex mu_;
  std::map<Key, Stack> stacks_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::function<void(uint32_t)> listener_;
  std::function<void(std::string_view, const nlohmann::json&)> event_listener_;
  uint64_t revert_failures_ GUARDED_BY(mu_) = 0;
  bool record_stale_ GUARDED_BY(persist_mu_) = false;  // rule 11
  uint64_t reverts_retried_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpuslice::daemon
