// UsageMeter: what each group on one GPU ran, the first stage of the
// ShareScheduler (DESIGN.md section 8 "Evidence", docs/scheduling.md).
//
// Evidence, per figure:
//  - a batch group ran its launches seen complete times their charge: the
//    launch gate counts them, and its timing markers measure the charge
//    while the group holds the device alone in its turn (LaunchCostMeter);
//  - a latency group's launches are each waited for (no marker interval of
//    it measures), and its kernels run between the batch groups'. What it
//    ran is the device's busy time (NVML's device utilization, whose device
//    figure is right whatever the processes) less what the batch groups ran,
//    over the last kResidualNs; split between latency groups by their
//    launches (weighted by their own charges where they have one). That
//    gives their charge (Reading::charge_ns), smoothed, and never above
//    their own upper bound (their bracketed launches' time, waits included:
//    a batch group's cost not quite right must not make a latency group's
//    grow without end, each smaller count of launches dividing more). A
//    batch group whose cost is not known yet counts with its upper bound
//    (the residual is then too small: a latency group is never held back
//    for another's unknown); with neither, the residual stands as it was.
//    Before any residual, a latency group's own charge, else its bound.
// No figure reads NVML's per-process samples.
//
// Each figure is over the last kWindowNs; for launches of kStretchChargeNs
// or more, stretched (up to kMaxWindowNs) until it holds kMinWindowLaunches
// launches, so that groups with long kernels are not measured in whole
// kernels.
//
// Pure: time and evidence come in through Tick. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::control {

class UsageMeter {
 public:
  static constexpr int64_t kWindowNs = 1'000'000'000;
  static constexpr int64_t kMaxWindowNs = 4'000'000'000;
  static constexpr uint64_t kMinWindowLaunches = 16;
  static constexpr int64_t kStretchChargeNs = 1'000'000;
  static constexpr int64_t kFastWindowNs = 200'000'000;
  static constexpr int64_t kResidualNs = 2'000'000'000;
  // Each tick moves a latency group's charge this part of the way to what
  // the residual says.
  static constexpr double kResidualSmoothing = 0.25;
  // A latency group the residual says ran nothing beside the batch groups is
  // charged this little: nearly unpaced, until what it runs shows (more of
  // the device's busy time the batch groups do not explain).
  static constexpr int64_t kMinResidualChargeNs = 1000;

  struct Group {
    std::string name;        // unique
    bool latency = false;    // its device time is the device's residual
    uint64_t launches = 0;   // admitted so far (monotonic)
    uint64_t completed = 0;  // seen complete so far (monotonic)
    int64_t charge_ns = 0;   // its own charge per launch; 0: not known
    int64_t bound_ns = 0;    // an upper bound of it; 0: none
    int64_t floor_ns = 0;    // its least bracketed launch of late; 0: none
  };
  // A closed NVML window of the device: busy `busy` (0..1) over
  // (end_ns - length_ns, end_ns], on the groups' time base.
  struct BusyWindow {
    int64_t end_ns;
    int64_t length_ns;
    double busy;
  };

  // At `now_ns`: the groups now on the GPU (a group missing is forgotten) and
  // the device windows closed since the last Tick. REQUIRES: now_ns does not
  // decrease; each group's counts do not decrease (a group whose do, e.g. a
  // new segment under the same name, starts over).
  void Tick(int64_t now_ns, const std::vector<Group>& groups,
            const std::vector<BusyWindow>& windows);

  struct Reading {
    uint32_t used_bp = 0;       // what it ran over the window, basis points of the device
    uint32_t used_fast_bp = 0;  // over the last kFastWindowNs
    // What it ran over the window by its launches' least bracketed time
    // (0: none), near what it ran where its launches are alike.
    uint32_t floor_bp = 0;
    bool launched = false;  // admitted a launch within the last kWindowNs
    int64_t charge_ns = 0;  // the charge its figures use (a latency group's: the residual's)
  };
  // As of the last Tick; a group not seen: all zero.
  Reading Of(std::string_view group) const;
  // The device's busy share over the last kWindowNs of windows, basis
  // points; -1: no window yet.
  int32_t device_busy_bp() const { return device_busy_bp_; }

 private:
  struct Sample {
    int64_t t_ns;
    uint64_t launches;
    uint64_t completed;
  };
  struct State {
    bool latency = false;
    std::deque<Sample> samples;  // newest last, the last kMaxWindowNs
    int64_t charge_ns = 0;       // own
    int64_t bound_ns = 0;
    int64_t floor_ns = 0;
    int64_t residual_charge_ns = 0;
    bool residual_known = false;
    Reading reading;
  };
  // Completed launches of `st` at `t_ns`, interpolated between samples.
  static double CompletedAt(const State& st, int64_t t_ns);
  // The latency groups' charges from the device's busy (see the header).
  void Residual(int64_t now_ns);

  std::map<std::string, State, std::less<>> states_;
  std::deque<BusyWindow> windows_;  // the last kResidualNs (at least kWindowNs)
  int32_t device_busy_bp_ = -1;
};

}  // namespace gpuslice::control
