// LaunchCostMeter: gpusliced's compute half of a group's controller
// (DESIGN.md sections 3-4, docs/scheduling.md "Evidence"). It learns what one
// launch of each member costs from the member's own launch gate: the gate's
// timing markers measure the device time of launches whose stream had work
// throughout (shm/progress_watch.h), and add it to the member's slot
// (SlotCompute::busy_ns, busy_launches). Under gpusliced's turns a batch
// group holds the device alone, so that is exactly its device time; no NVML
// per-process sample is read.
//
// Every tick, for each device and each live member:
//  - the member's charge is its measured device time over its measured
//    launches, over the newest evidence holding at least kMinEvidenceNs and
//    kMinLaunches (however old, up to kMaxAgeNs: a member with long kernels
//    and a small share launches rarely), stretched back to kHorizonNs; when
//    the evidence of the last kRecentNs disagrees with it by more than
//    kShiftRatio (a new workload), the recent evidence alone, and so too when
//    the newest kFewLaunches are that far below it (a measured interval can
//    only be stretched, by another context that ran in it: at a group's
//    start, before every group on the GPU takes turns);
//  - a member with no evidence (its launches never queue behind one another
//    outside a turn: a latency group's, each waited for) is charged the
//    device's fallback (SetFallbackCharge: what the UsageMeter derives from
//    the device's busy time), else the group's mean, else nothing (its gate
//    measures its first launches itself);
//  - the group's mean charge (launch-weighted over the last second) is
//    published for readers (ComputeUsage::PublishEstimate);
//  - what the member's bracketed launches bounded (SlotCompute::bound_ns: a
//    launch's time from its queueing to its end, beside other groups) gives
//    the group's bound per launch (BoundCharge), an upper bound of its cost
//    that caps a latency group's charge, and their least bracketed launch
//    of late (BoundFloor), what the scheduler tells a heavy latency group
//    by.
// It also keeps each device's count of launches seen complete
// (CompletedLaunches), the count the scheduler meters use by.
//
// Not thread-safe: one instance, on the daemon's control thread.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>

#include "common/clock.h"
#include "control/compute_control.h"
#include "shm/group_segment.h"

namespace gpuslice::control {

class LaunchCostMeter final : public ComputeControl {
 public:
  static constexpr int64_t kHorizonNs = 2'000'000'000;
  static constexpr int64_t kMaxAgeNs = 10'000'000'000;
  static constexpr int64_t kMinEvidenceNs = 1'000'000;
  static constexpr uint64_t kMinLaunches = 4;
  static constexpr int64_t kRecentNs = 300'000'000;
  static constexpr double kShiftRatio = 1.3;
  // This few launches well below the rest are a shift down (see TickDevice).
  static constexpr uint64_t kFewLaunches = 2;

  // REQUIRES: `segment` and `monotonic` (the segment's time base) outlive this.
  LaunchCostMeter(GroupSegment& segment, const Clock& monotonic)
      : segment_(segment), clock_(monotonic) {}

  bool Tick() override;

  // Forgets the evidence gathered on `dev` so far, keeping the charges: a
  // group that joined the device's turns ran beside them before, so what
  // they measured meanwhile was stretched (gpusliced calls it then).
  void ForgetEvidence(int dev) {
    for (auto& [slot, m] : devices_.at(dev).members) m.history.clear();
  }

  // The charge of members of `dev` that have no evidence of their own (0:
  // none). Taken at the next Tick.
  void SetFallbackCharge(int dev, int64_t charge_ns) { fallback_ns_.at(dev) = charge_ns; }

  // The group's mean charge on `dev` as last published (0: not known).
  int64_t GroupCharge(int dev) const { return devices_.at(dev).group_charge_ns; }
  // The group's upper bound per launch on `dev` from its bracketed launches
  // (0: none).
  int64_t BoundCharge(int dev) const { return devices_.at(dev).bound_ns; }
  // The members' least bracketed launch of late (SlotCompute::
  // bound_floor_ns), launch-weighted over the last second (0: none): near
  // a launch's own time, from above where the launches are alike.
  int64_t BoundFloor(int dev) const { return devices_.at(dev).floor_ns; }
  // Launches of the group on `dev` seen complete so far (each live member's
  // launches less those still queued; monotonic while members live).
  uint64_t CompletedLaunches(int dev) const { return devices_.at(dev).completed; }

 private:
  struct Point {
    int64_t t_ns;
    uint64_t busy_ns;
    uint64_t busy_launches;
    uint64_t completed;  // the member's launches seen complete
    uint64_t bound_ns;
    uint64_t bound_launches;
  };
  struct Member {
    int64_t joined_ns = 0;  // tells a slot's successive owners apart
    std::deque<Point> history;
    int64_t charge_ns = 0;  // from its own evidence; 0: none
    int64_t bound_ns = 0;   // from its bracketed launches; 0: none
  };
  struct Device {
    std::map<int, Member> members;  // by slot
    uint64_t completed = 0;
    uint64_t gone_completed = 0;  // what members that left had completed
    int64_t group_charge_ns = 0;
    int64_t bound_ns = 0;
    int64_t floor_ns = 0;
  };

  // The member's charge from its history (0: too little evidence): its
  // measured intervals', or with `bound` its bracketed launches'.
  static int64_t ChargeOf(const std::deque<Point>& history, bool bound = false);
  void TickDevice(int dev, const std::vector<GroupSegment::MemberRef>& live, int64_t now);

  GroupSegment& segment_;
  const Clock& clock_;
  std::array<Device, kGroupMaxDevices> devices_{};
  std::array<int64_t, kGroupMaxDevices> fallback_ns_{};
};

}  // namespace gpuslice::control
