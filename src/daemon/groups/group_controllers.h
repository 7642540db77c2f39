// GroupControllers: gpusliced runs the controller of every group on the node
// (DESIGN.md sections 3-4): the same control::GroupKeeper a member runs, with
// a control::LaunchCostMeter as its compute half (the launch gates' timing
// markers, not NVML's per-process samples, say what each launch costs).
//
// Protocol with the members (include/gpuslice/group_segment.h): for each
// group a process is attached to, every tick it beats the segment's daemon
// heartbeat (its claim) and, once the member that held the controller role
// has given it up (members yield to a fresh claim within a keeper period),
// holds the role and steps the group's keeper. If the daemon dies the role's
// lock goes with it and members take over when the claim goes stale (2 s);
// Stop() ends every claim at once. After a restart it re-adopts every group.
//
// Limits: where the registry has a word on a group's limits, the daemon
// writes them into the segment (and sets them back if a member changes them).
//
// Scheduling (DESIGN.md section 4, docs/scheduling.md): every
// ShareScheduler::kPeriod it runs one control::ShareScheduler per GPU over
// the groups it controls that are attached to that GPU, with each group's
// GroupSchedule there (the Word's ScheduleOf; a group it has no word on: the
// defaults, limited by the segment's compute limit), its launch counters and
// the GPU's busy samples (DeviceBusySource), and writes the result into the
// segments: per device the compute grant, burst, queue bound and turns (a
// new plan takes effect at the next cycle boundary), what the group ran
// (its share, for readers), a latency group's charge; and the group's
// paused flag. Groups a member still controls are left out.
//
// Thread-compatible: Tick() and Stop() from one thread (the daemon's control
// loop); Snapshot() from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "control/device_busy.h"
#include "control/group_keeper.h"
#include "control/launch_cost_meter.h"
#include "control/share_scheduler.h"
#include "daemon/groups/group_schedule.h"
#include "shm/group_segment.h"

namespace gpuslice::daemon {

class GroupControllers {
 public:
  // The limits the daemon holds `group` to on the GPU with `uuid`, if it has
  // a word on them (the registry knows the group); nullopt: the segment's
  // limits stand. The daemon's word wins (DESIGN.md section 4): a member
  // that changes the segment's limits is set back within a rescan period.
  // An unset field: no word on it (the segment's value stands), so that a
  // limit a member set for itself is never raised.
  struct DeviceLimit {
    std::optional<uint64_t> memory_bytes;
    std::optional<uint32_t> compute_percent;
  };
  using LimitsOf =
      std::function<std::optional<DeviceLimit>(const std::string& group, const std::string& uuid)>;

  // How `group` shares the GPU with `uuid`; nullopt: no word (defaults).
  using ScheduleOf = std::function<std::optional<GroupSchedule>(const std::string& group,
                                                                const std::string& uuid)>;

  // The daemon's word on every group at one instant (the registry's view,
  // registry_view.h): a Tick that applies limits or schedules asks for it
  // once, so that every group's limits and schedule in that tick come from
  // the same instant.
  struct Word {
    LimitsOf limits_of;      // null: no word on limits (the segments' stand)
    ScheduleOf schedule_of;  // null: no word on any schedule (defaults)
  };
  using WordOf = std::function<Word()>;

  struct Options {
    std::string shm_dir;
    pid_t self = 0;                     // the daemon's pid, written in its claims
    int64_t rescan_ns = 1'000'000'000;  // how often every group is looked at again
    // How often the directory is listed for new groups between rescans (a
    // group is adopted, and scheduled, within about this long of its first
    // member attaching; files found idle are looked at again at rescans).
    int64_t adopt_ns = 100'000'000;
    // Runs one scheduler per GPU (off: grants, bursts and the paused flag
    // are left as they are).
    bool schedule = false;
  };
  struct Clocks {
    const Clock& realtime;   // NVML's sample time base
    const Clock& monotonic;  // the segments' time base
  };

  // REQUIRES: `busy`, the clocks, and whatever `word_of` uses outlive
  // this. `word_of` may be null (no word on any group).
  GroupControllers(Options options, control::DeviceBusySource& busy, WordOf word_of, Clocks clocks);
  ~GroupControllers();  // ends every claim (Stop)

  // Adopts new groups (at most once per adopt_ns), drops groups whose segment
  // is gone, claims and steps every adopted group, and schedules every GPU
  // when due. Returns the nanoseconds until it is next due.
  int64_t Tick();
  // Ends every claim and gives up every role: members control their groups
  // again at once. Idempotent.
  void Stop();
  // Schedules at the next Tick instead of at the next period: a group paused,
  // resumed or rescheduled through the API takes effect as soon as the
  // control loop runs (ControlLoop::Wake), not up to a period later. Any
  // thread.
  void ScheduleSoon() { schedule_soon_.store(true, std::memory_order_release); }

  // What the scheduler decided for a group on one GPU, as of its last tick.
  struct DeviceGrant {
    std::string uuid;
    uint32_t grant_bp = 0;    // share of the device granted, basis points; 0: paused
    int64_t burst_ns = 0;     // 0: the pacer's default
    uint32_t used_bp = 0;     // what it ran over the last second (UsageMeter)
    bool wants_more = false;  // held back by its grant or its turn
    uint32_t turn_bp = 0;     // its turn's share of the cycle; 0: no turns (paced by its rate)
  };
  struct GroupControl {
    std::string group;
    bool controlling;                      // holds the controller role (else a member still does)
    GroupSnapshot segment;                 // as of the last rescan
    bool paused = false;                   // as the scheduler last wrote it
    std::vector<DeviceGrant> grants = {};  // per GPU it is scheduled on; empty: not scheduled
  };
  // The scheduler's current grant to `group` on GPU `uuid` (basis points;
  // 0: paused); nullopt: not scheduled there. Any thread.
  std::optional<uint32_t> GrantOf(const std::string& group, const std::string& uuid) const;
  // What `group` ran of GPU `uuid` over the last second, basis points: the
  // scheduler's figure where it schedules the group, else what the member
  // that controls it published (as of the last rescan); nullopt: the group
  // is not on that GPU or not known. Any thread.
  std::optional<int32_t> ShareOf(const std::string& group, const std::string& uuid) const;
  // Holders of `group`'s ledger lock evicted for holding it past the
  // deadline (as of the last rescan); nullopt: no segment of it adopted.
  // Any thread.
  std::optional<uint64_t> LedgerEvictionsOf(const std::string& group) const;
  // The adopted groups, for the API and metrics (segment counters refreshed
  // once per rescan).
  std::vector<GroupControl> Snapshot() const;

 private:
  struct Group {
    std::unique_ptr<GroupSegment> segment;
    std::unique_ptr<control::LaunchCostMeter> compute;
    std::unique_ptr<control::GroupKeeper> keeper;
    ino_t inode = 0;  // of the file adopted; another inode: the segment was replaced
  };
  void Rescan();
  // Adopts the groups of the directory not adopted yet that have a process
  // attached; skips those found idle since the last rescan unless `all`.
  // True if it adopted one.
  bool Adopt(bool all);
  // Runs every GPU's scheduler and writes the results into the segments.
  void Schedule(const Word& word);
  // Holds `g` to the daemon's limits, where it has a word on them.
  void ApplyLimits(const std::string& name, GroupSegment& segment, const Word& word);
  // The busy windows of GPU `uuid` closed since the last call, on the
  // monotonic clock (empty where the node has no such figure).
  std::vector<control::UsageMeter::BusyWindow> BusyWindows(const std::string& uuid);

  const Options options_;
  control::DeviceBusySource& busy_;
  WordOf word_of_;
  Clocks clocks_;
  std::map<std::string, Group> groups_;
  std::map<std::string, std::unique_ptr<control::ShareScheduler>> schedulers_;  // by GPU UUID
  // Per GPU UUID: the newest busy sample read (CLOCK_REALTIME us) and whether
  // the node has the figure.
  std::map<std::string, uint64_t> busy_seen_us_;
  std::set<std::string> busy_unavailable_;
  int64_t next_schedule_ns_ = 0;
  std::atomic<bool> schedule_soon_{false};
  // The scheduler's last word per group, for Snapshot().
  std::map<std::string, std::pair<bool, std::vector<DeviceGrant>>> grants_ GUARDED_BY(snapshot_mu_);
  int64_t last_scan_ns_ = 0;
  int64_t last_adopt_ns_ = 0;
  std::set<std::string> idle_files_;  // found idle since the last rescan
  bool scanned_ = false;
  mutable Mutex snapshot_mu_;
  std::vector<GroupControl> snapshot_ GUARDED_BY(snapshot_mu_);
};

}  // namespace gpuslice::daemon
