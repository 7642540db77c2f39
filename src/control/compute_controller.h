// ComputeController: the compute half of a group's controller (DESIGN.md
// sections 2-3). It runs wherever the group is controlled: in the member that
// holds the controller role (the limiter's keeper thread) or in gpusliced.
//
// For each device of the group with a compute limit, every tick it records
// launch counts (the launches the GPU has run: each member's count less those
// it has not yet seen complete, SlotCompute::queued), reads the utilization
// samples newer than the last ones it saw and feeds both to CostEstimators:
//  - one per member whose slot it knows (Member::slot >= 0): that member's
//    own launches (SlotCompute) against its own samples, so members whose
//    kernels differ a hundredfold are each charged what theirs cost
//    (ComputeUsage::PublishSlotCharge: the launch path paces by it);
//  - one for the members it cannot tell apart (a pid without a slot, e.g.
//    the daemon's host pids of members in containers): their launches
//    together against their samples together; each such member is charged
//    that mean;
//  - one for the whole group: its mean charge and measured share, for
//    `gpuslice status` and the scheduler (ComputeUsage::PublishEstimate).
// The members' published charges are the estimates multiplied by the
// group's ShareCorrection: a group NVML measures over its rate is slowed
// within a window or two whatever its estimates say, and one measured under
// it while its launches wait for budget is sped up (share_correction.h).
//
// NVML's attribution of a window (docs/sim.md "Per-process utilization"):
// either each process that ran in a window gets a sample with its own part
// ("split"), or, as on an H100 with driver r580 with time-sliced contexts,
// each window goes to ONE process with the whole window's busy percent
// ("window"): right on average, in whole windows. Each sample is credited to
// its own window (the span since the previous window's close), never to the
// other windows a tick's samples cover. The controller tells the
// attribution from the samples: a window with several processes' samples is
// split attribution; windows of one sample each, of several processes, are
// window attribution (the first ones, before any split evidence; after it,
// kWindowAttributionWindows in a row). Under window attribution it measures over
// more windows: the estimators take WindowAttributionOptions() (a 10 s
// horizon holding 8 windows the group won at least: a group's busy time over
// a few windows is a few whole windows; workload changes are then followed
// over that horizon), and the share correction is off (its third of a
// second is one or two windows, all or nothing). Whatever the options, a
// window the group had no sample of is no ground for a workload shift
// (CostEstimator). A member without a sample of a window that another
// member has one of was idle or below NVML's rounding only where the
// attribution is known to be split; otherwise (window, or not yet known:
// a member just joined beside another) the window may have gone to the
// other, and is unknown for this member, not a window of next to nothing:
// taken for one, a member of 20 us kernels charged 0.5 % for every window
// its 5 ms neighbour won ran its group at 85 % of the device under a 40 %
// cap for the two seconds after the neighbour joined.
//
// A device that NVML shows all but idle (its own figure, DeviceBusySource:
// every window since the last sample at most kQuietPercent, for at least
// kQuietSpanUs) with no process's sample bounds every member by that
// figure: NVML gives no per-process sample of a window too idle to round to
// a percent, and a group whose kernels got a hundred times shorter under
// its cap (15 launches a second of 200 us, 0.3 %) would else keep its old
// charge, and that share, for ever (bench/share_accuracy "100x shorter").
//
// Members are matched by pid in the utilization source's namespace (NVML:
// the host's). The limiter passes its slots' pids with their slots, so
// inside a container with its own pid namespace no sample matches and each
// member's charge stays at its bootstrap measurement (an upper bound: the
// group stays under its limit; that is logged once). The daemon passes the
// host pids of its registry, which always match, without slots.
//
// Not thread-safe: one instance, on the controlling thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/clock.h"
#include "control/compute_control.h"
#include "control/cost_estimator.h"
#include "control/device_busy.h"
#include "control/share_correction.h"
#include "control/utilization_source.h"
#include "shm/group_segment.h"

namespace gpuslice::control {

// A count of launches seen complete, fed to an estimator every tick.
// Launches are seen complete in lumps (a marker covers every launch admitted
// with it, a batch of half the burst; the end of a drain confirms what no
// marker covered): the launches of a lump that follows a stretch with
// launches queued and none seen complete ran over that stretch, one after
// another, and are spread over it (at most kMaxSpreadNs).
struct CompletedLaunches {
  static constexpr int64_t kMaxSpreadNs = 2'500'000'000;
  uint64_t total = 0;
  int64_t flat_since_ns = -1;  // the last record at which it moved or nothing was queued

  // Records `seen` (never below what was recorded) at `now_ns`; `queued`:
  // launches admitted and not yet seen complete are left.
  void Record(CostEstimator& e, int64_t now_ns, uint64_t seen, bool queued) {
    const bool moved = seen > total;
    if (moved) {
      const bool spread = flat_since_ns >= 0 && now_ns - flat_since_ns <= kMaxSpreadNs;
      total = seen;
      e.RecordLaunches(now_ns, total, spread ? flat_since_ns : -1);
    } else {
      e.RecordLaunches(now_ns, total);
    }
    if (moved || !queued) flat_since_ns = now_ns;
  }
};

class ComputeController final : public ComputeControl {
 public:
  // Windows in a row, each with one sample, of two processes or more, after
  // split evidence: NVML attributes each window to one process (see above).
  static constexpr size_t kWindowAttributionWindows = 8;
  // Samples less than this apart belong to the same window.
  static constexpr uint64_t kSameWindowUs = 20'000;
  // The estimators' options under window attribution.
  static CostEstimator::Options WindowAttributionOptions();
  // A member whose launch count has not moved for this long has nothing
  // queued, whatever its queued count says (launches made last before it
  // stopped launching, whose markers nobody looked at since): longer than
  // the longest drain of a backlog (kBacklogMaxWaitNs).
  static constexpr int64_t kQueueSettleNs = 3'000'000'000;
  // A device this quiet (percent, each window) for this long without a
  // process sample bounds the members by its own figure (see above).
  static constexpr uint32_t kQuietPercent = 1;
  static constexpr uint64_t kQuietSpanUs = 300'000;

  // The pids of the group's members, in the utilization source's namespace.
  using MemberPids = std::function<std::vector<int32_t>()>;
  // A member: its pid in the utilization source's namespace and, where
  // known, its slot in the segment (-1: unknown).
  struct Member {
    int32_t pid;
    int slot = -1;
  };
  using Members = std::function<std::vector<Member>()>;

  struct Clocks {
    const Clock& realtime;   // the time base of utilization samples
    const Clock& monotonic;  // the segment's time base
  };

  // REQUIRES: `segment`, `source`, the clocks and `device_busy` (the
  // device's own busy figure; null: none) outlive the controller.
  ComputeController(GroupSegment& segment, UtilizationSource& source, Members members,
                    Clocks clocks, DeviceBusySource* device_busy = nullptr);
  // Members known by pid only (each charged the group's mean).
  ComputeController(GroupSegment& segment, UtilizationSource& source, MemberPids pids,
                    Clocks clocks, DeviceBusySource* device_busy = nullptr);

  // The members of `segment` with their slots, by the pids the slots hold
  // (the limiter's keeper: NVML sees those pids outside containers).
  static Members SlotMembers(const GroupSegment& segment);

  // One step for every compute-limited device (kPeriod: several times per
  // NVML sampling window, 1/6 s at the shortest). Returns true if some
  // device has a compute limit.
  bool Tick() override;

  // Workload changes the estimators of `dev` have detected so far.
  uint64_t Shifts(int dev) const;

 private:
  // One member with a slot, on one device.
  struct SlotState {
    int64_t joined_ns = 0;
    uint64_t last_launches = 0;  // the slot's admitted count at the last tick
    uint64_t last_done = 0;      // of those, the ones it had seen complete (the most seen)
    int64_t launched_ns = 0;     // when its admitted count last moved
    uint64_t launches = 0;       // this member's launches seen complete (monotonic)
    CompletedLaunches completed;
    CostEstimator estimator;
  };
  struct Device {
    CostEstimator estimator;  // the whole group
    CostEstimator unslotted;  // members without a known slot, together
    uint64_t unslotted_launches = 0;
    bool unslotted_queued = false;
    CompletedLaunches unslotted_completed;
    CompletedLaunches completed;     // the group's
    std::map<int, SlotState> slots;  // by slot: every live member's
    std::set<int> unknown;           // live slots of members without a known slot
    uint64_t last_seen_us = 0;       // newest sample timestamp consumed
    bool matched_once = false;       // some sample matched a member
    int64_t first_tick_ns = 0;
    uint64_t launches_at_first_tick = 0;
    bool paced_launch_seen = false;  // launches moved since the first tick
    ShareCorrection correction;      // on the group's measured share
    uint64_t shifts_seen = 0;        // workload changes the estimators detected
    uint64_t waits_seen = 0;         // the group's waits at the last window
    bool waited_otherwise = false;   // paused or scheduled since (not the budget)
    // The newest windows: their sample count and, with one, its pid.
    std::deque<std::pair<size_t, uint32_t>> windows;
    // How NVML attributes the windows (see above): unknown until a window
    // with several processes' samples (split) or kWindowAttributionWindows
    // in a row of one sample each, of several processes (window).
    enum class Attribution { kUnknown, kSplit, kWindow };
    Attribution attribution = Attribution::kUnknown;
  };

  void TickDevice(int dev, Device& d, const std::vector<Member>& members);
  // The device's windows closed after `since_us` if all of them were quiet
  // (see above) for kQuietSpanUs: the newest one's end and their mean
  // percent; end_us 0 if not.
  struct Quiet {
    uint64_t end_us = 0;
    double percent = 0;
  };
  Quiet QuietSince(int dev, uint64_t since_us);
  // Notes the attribution of the windows just read (`windows`: each one's
  // count of processes with a sample, and one of their pids) and switches
  // every estimator's options when it changes.
  void NoteAttribution(Device& d, const std::vector<std::pair<size_t, uint32_t>>& windows);
  // Records every live slot's launches at `now_real` (those it has seen
  // complete); returns how many of the live slots' launches are still queued.
  uint64_t RecordSlots(int dev, Device& d, const std::vector<Member>& members, int64_t now_real);

  GroupSegment& segment_;
  UtilizationSource& source_;
  DeviceBusySource* device_busy_;
  Members members_;
  Clocks clocks_;
  std::array<std::unique_ptr<Device>, kGroupMaxDevices> devices_{};
  bool warned_unavailable_ = false;
  bool warned_unmatched_ = false;
};

}  // namespace gpuslice::control
