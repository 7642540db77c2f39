// ComputeBackstop: the daemon's check of GPU compute use against what the
// limiter is meant to enforce (DESIGN.md section 4, "Backstop";
// docs/backstop.md), beside MemoryBackstop.
//
// The limiter paces kernel launches inside each process, cooperatively; a
// process without it (no LD_PRELOAD, a static driver) is not paced. NVML's
// per-process SM utilization samples are taken by the driver on the host.
// Each Check gets one GPU's compute processes and its recent samples (host
// pids) and finds, edge-triggered:
//  (a) kUnregistered when a process that is no registered tenant appears in
//      the GPU's processes or samples (once per pid), kUnregisteredGone when
//      it is in neither any more;
//  (b) kOverLimit when a registered group's share of the GPU (the sum of its
//      processes' sm_percent; a process's samples averaged, or under NVML's
//      window attribution, where each window's sample goes to one process with
//      the whole window's busy percent, summed over the windows read: see
//      WindowAttributionWindows) stays above its
//      compute limit there by more than `tolerance_points` for more than
//      `over_for_ns`; kBackUnder when it has been within it for more than
//      `over_for_ns` again (while throttled: its share divided by the run
//      fraction, i.e. what it would use unthrottled), or its processes left.
// With Action::kThrottle (the operator's choice; report only otherwise):
//  - an over-limit group's processes on that GPU are held to its limit by a
//    SIGSTOP/SIGCONT duty cycle (DutyCycleThrottler), whose run fraction
//    follows the measured share (averaged over about one period;
//    multiplicative steps of at most 2x, one per period) and whose period grows
//    while the fraction alone cannot (see max_period_ns), until the finding
//    clears, then every process is continued;
//  - an unregistered process above `unregistered_percent` (+ tolerance) for
//    more than `over_for_ns` is held to `unregistered_percent` the same way;
//  - a group whose processes on that GPU are MPS clients (its tier is mps
//    there) is not signalled: each of its processes there is ended with the
//    MPS control's terminate_client (`terminator`), once per finding.
// Every start and stop of a throttle and every termination is a finding too:
// nothing is done silently.
//
// Simulated time: `now_ns` is passed in. Not thread-safe: one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/backstop/duty_cycle.h"
#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

// Samples less than this apart belong to the same NVML window.
inline constexpr uint64_t kSameWindowUs = 20'000;

// The number of NVML windows `samples` cover if they are window-attributed
// (every window with one sample, two processes or more, two windows or more:
// NVML on an H100 with driver r580 with time-sliced contexts; a process's
// share is then its samples' sum over the windows, as one sample stands for
// a whole window's busy time); 0 otherwise (each process's own part of each
// window: a process's share is the mean of its samples).
uint32_t WindowAttributionWindows(const std::vector<ProcessUtilization>& samples);

class ComputeBackstop {
 public:
  enum class Action { kReport, kThrottle };

  struct Options {
    Action action = Action::kReport;
    uint32_t tolerance_points = 5;
    int64_t over_for_ns = 5'000'000'000;
    uint32_t unregistered_percent = 10;  // what an unregistered process is throttled to
    // The duty cycle's period grows (x2 per period, up to this) while the run
    // fraction is at its minimum and the share still above the limit: work
    // queued on the GPU (up to the driver's 1024 launches) runs on while its
    // process is stopped, so the stop must outlast the queue. It shrinks back
    // (/2 per period, down to the throttler's period) once the run fraction is
    // above one half.
    int64_t max_period_ns = 8'000'000'000;
  };

  enum class FindingKind {
    kUnregistered,
    kUnregisteredGone,
    kOverLimit,
    kBackUnder,
    kThrottleStarted,
    kThrottleStopped,
    kMpsClientTerminated,
    kThrottleRecovered,  // at start: a process a previous run left stopped, continued
  };
  static constexpr size_t kKindCount = 8;

  struct Finding {
    FindingKind kind;
    uint32_t gpu = 0;
    std::string uuid;
    std::string group;           // empty for an unregistered process
    std::vector<uint32_t> pids;  // the processes concerned
    uint32_t share_percent = 0;  // measured (sum of sm_percent)
    uint32_t limit_percent = 0;  // the group's compute limit, or the unregistered share
    uint32_t run_percent = 100;  // a throttle's run fraction, in percent
    std::string detail;          // why (a stop's reason, a termination's error)
  };

  // What the daemon knows, asked at each Check.
  struct Registry {
    // The group of a host pid; nullopt: not a registered tenant.
    std::function<std::optional<std::string>(uint32_t pid)> group_of;
    // A group's compute limit on a GPU (percent); nullopt: none.
    std::function<std::optional<uint32_t>(const std::string& group, const std::string& uuid)>
        limit_of;
    // Whether the group's processes on the GPU are MPS clients (nullptr: never).
    std::function<bool(const std::string& group, const std::string& uuid)> is_mps;
    // The start time of a host pid (/proc/<pid>/stat field 22; 0 unknown).
    std::function<uint64_t(uint32_t pid)> start_time_of;
  };
  // Ends MPS client `pid` on GPU `uuid` (MpsManager::TerminateClient).
  using Terminator = std::function<Status(const std::string& uuid, pid_t pid)>;

  // `throttler` is used only with Action::kThrottle (may be null otherwise);
  // REQUIRES: it outlives this.
  ComputeBackstop(Options options, Registry registry, DutyCycleThrottler* throttler,
                  Terminator terminator);

  // One sample of GPU `gpu` (`uuid`) at `now_ns`: its compute processes and
  // the utilization samples of the last window (nullopt: unreadable, then
  // only presence is checked). Returns what changed.
  std::vector<Finding> Check(int64_t now_ns, uint32_t gpu, const std::string& uuid,
                             const std::vector<GpuProcess>& processes,
                             const std::optional<std::vector<ProcessUtilization>>& samples);

  // GPU `uuid` could not be read: nothing on it is held without being
  // measured. Its throttles end (SIGCONT) and its groups' findings clear,
  // each reported; a later sample finds them again if they are still over.
  std::vector<Finding> Unreadable(const std::string& uuid);

  // Ends every throttle (SIGCONT), as the daemon stops; each is reported.
  std::vector<Finding> ReleaseAll(const std::string& reason);

  // Whether `group` (empty: the unregistered process `pid`) is throttled on `uuid`.
  bool Throttled(const std::string& uuid, const std::string& group, uint32_t pid = 0) const;

 private:
  // A group on a GPU, or one unregistered process on a GPU.
  struct Subject {
    uint32_t gpu = 0;
    std::string uuid;
    std::string group;  // empty: unregistered
    std::vector<ProcessRef> processes;
    uint32_t share = 0;
    uint32_t limit = 100;
    bool over = false;         // the finding (or, unregistered, the throttle) stands
    int64_t over_since = -1;   // first sample above, while !over
    int64_t under_since = -1;  // first sample within, while over
    bool throttled = false;
    bool terminated = false;
    double run_fraction = 1;
    int64_t period_ns = 0;    // the duty cycle's (0: the throttler's default)
    double smoothed = 0;      // the share, averaged over about one period, while throttled
    int64_t last_ns = -1;     // the previous measured sample
    int64_t adjusted_ns = 0;  // the last change of the run fraction or period
  };
  static std::string KeyOf(const std::string& uuid, const std::string& group, uint32_t pid);
  void Evaluate(int64_t now_ns, const std::string& key, Subject& s, bool measured,
                std::vector<Finding>& out);
  void StartAction(int64_t now_ns, const std::string& key, Subject& s, std::vector<Finding>& out);
  void StopThrottle(const std::string& key, Subject& s, const std::string& reason,
                    std::vector<Finding>& out);
  Finding Make(FindingKind kind, const Subject& s) const;

  Options options_;
  Registry registry_;
  DutyCycleThrottler* throttler_;
  Terminator terminator_;
  std::map<std::string, Subject> subjects_;  // by KeyOf
};

// The metric label of a kind: compute_unregistered, compute_unregistered_gone,
// over_compute_limit, back_under_compute_limit, throttle_started,
// throttle_stopped, mps_client_terminated, throttle_recovered. Its log and SSE
// event name is "backstop_" + that.
std::string_view ComputeFindingKindName(ComputeBackstop::FindingKind kind);

}  // namespace gpuslice::daemon
