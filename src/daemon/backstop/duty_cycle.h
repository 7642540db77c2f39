// DutyCycleThrottler: holds processes to a share of the time by a
// SIGSTOP/SIGCONT duty cycle (the compute backstop's throttle, DESIGN.md
// section 4 "Backstop"; docs/backstop.md). Each throttled set (a
// key: an over-limit group on a GPU, or one unregistered process) runs for
// `run_fraction` of every period and is stopped for the rest.
//
// Contracts:
//  - Before a process is first stopped, the set of every process this
//    throttler may have stopped is handed to `persist` (the daemon writes it
//    to its state directory), so a daemon that dies with a process stopped
//    SIGCONTs it at its next start (Recover).
//  - Release and ReleaseAll SIGCONT every process of the set, stopped or not:
//    no process is ever left stopped by it.
//  - Signals go only through the Signaller (which never signals pid <= 1).
//
// Simulated time: the caller passes `now_ns` and calls Advance at (or after)
// the instant it returns. Not thread-safe: one owner.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/backstop/signaller.h"

namespace gpuslice::daemon {

class DutyCycleThrottler {
 public:
  struct Options {
    int64_t period_ns = 200'000'000;  // one run + stop cycle
    double min_run_fraction = 0.02;   // never stopped for the whole period
  };
  // Receives every process that may be stopped, each time that set changes.
  using Persist = std::function<void(const std::vector<ProcessRef>& processes)>;

  // REQUIRES: `signaller` outlives the throttler.
  DutyCycleThrottler(Options options, Signaller& signaller, Persist persist);

  // Throttles `key`'s `processes` to `run_fraction` (clamped to
  // [min_run_fraction, 1]) of each `period_ns` (0: the default period) from
  // `now_ns`, or updates a throttle already running (the new fraction and
  // period from its next switch; processes no longer in the set are
  // continued at once). A fraction of 1 never stops them.
  void Set(const std::string& key, const std::vector<ProcessRef>& processes, double run_fraction,
           int64_t now_ns, int64_t period_ns = 0);
  // Ends `key`'s throttle: SIGCONT to each of its processes. No-op if unknown.
  void Release(const std::string& key);
  // Release of every key (the daemon stops).
  void ReleaseAll();
  // Sends the signals due at `now_ns`; the next instant one is due
  // (INT64_MAX: nothing throttled).
  int64_t Advance(int64_t now_ns);

  bool Throttling(const std::string& key) const { return throttles_.contains(key); }
  // Whether `key`'s processes are stopped now.
  bool Stopped(const std::string& key) const;
  double RunFraction(const std::string& key) const;
  // `key`'s period (the default when unknown).
  int64_t Period(const std::string& key) const;
  const Options& options() const { return options_; }
  // Every process of every throttle.
  std::vector<ProcessRef> Processes() const;

  // At start: SIGCONT to each process a previous run recorded (the signaller
  // skips any whose pid now names another process). The ones continued.
  static std::vector<ProcessRef> Recover(const std::vector<ProcessRef>& recorded,
                                         Signaller& signaller);

 private:
  struct Throttle {
    std::vector<ProcessRef> processes;
    double run_fraction = 1;
    int64_t period_ns = 0;
    bool stopped = false;
    int64_t next_ns = 0;  // the next switch
  };
  void Signal(const std::vector<ProcessRef>& processes, int sig);
  void PersistNow();

  const Options options_;
  Signaller& signaller_;
  const Persist persist_;
  std::map<std::string, Throttle> throttles_;
  std::vector<ProcessRef> persisted_;  // what `persist` was last given
};

// The state record: {"processes": [{"pid": P, "start_time": S}, ...]}.
nlohmann::json ProcessRefsJson(const std::vector<ProcessRef>& processes);
StatusOr<std::vector<ProcessRef>> ProcessRefsFromJson(const nlohmann::json& j);

}  // namespace gpuslice::daemon
