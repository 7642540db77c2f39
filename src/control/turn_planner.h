// TurnPlanner: how one GPU's batch groups take turns, the last stage of the
// ShareScheduler (DESIGN.md section 4, docs/scheduling.md "Turns").
//
// The device time-slices contexts itself (2 ms slices and a 152 us switch on
// the H100 we measured), and then a group's share is the round-robin's, not
// its grant, and every figure measured beside other contexts is off by their
// slices. So while two or more batch groups are active, gpusliced gives the
// device to one at a time: a cycle of period P (kPeriodNs, kTurnPerGroupNs
// per group with many, long enough for any one launch with a quarter to
// spare, in whole kPeriodNs, changed only when that moves it by a quarter)
// holds one turn per group, back to back in a fixed order, each as
// long as the group's due; a group's launch gate queues work only within its
// turn and only work that completes by the turn's end (shm/launch_pacer.h
// TurnAt). Its share is then its turns' length, the device switches once per
// turn, and its launches' device time is measured alone (LaunchCostMeter).
//
// A group's due is its grant of device time over what it runs per unit of
// turn (its efficiency, learned while its turns' ends hold it back: switches
// at the turn's start, a program that waits for each launch; back toward 1
// while they do not, as a group that launches now and then runs all it has
// in its turn and its turn is no measure of it), and never more than its
// limit of the cycle (it cannot run more than it holds); dues
// that add up to more than the cycle are scaled down, beyond the groups'
// requests first, and a cycle left over while some group wants more is
// shared among those that do. Turns come in
// whole launches where a launch is long against the due (a 20 ms kernel in a
// 30 ms due): a deficit round-robin carries what a turn could not hold to
// the group's next, so that over a few cycles each gets its due.
//
// A turn holds what the group runs, not more: the device idles in a turn its
// holder has nothing for. One that its last turn's end did not cut off gets
// at most what it ran (over the last second, per unit of turn) with a
// quarter and kNeedSpareNs to spare; one that it did cut off, at most twice
// its last turn (kNeedSpareNs more at least), up to its due. A group with
// no turn last cycle (new, or back from idle) gets its due at once.
//
// A plan is for whole cycles: Tick plans the cycle that starts at the next
// boundary (once per cycle), and the caller writes it to take effect there
// (ComputeSchedule::SetTurns), so that no turn is cut short mid-cycle and every
// group has its plan before any group starts on it; a group that joins or
// leaves the takers while that cycle is still 20 ms or more ahead has it
// planned again (a joiner gets a turn in it), else it waits a cycle. A boundary less than
// 20 ms ahead is too close for that: the grid starts anew half a cycle
// ahead, so that the ticks fall mid-cycle. Only a lone group's turn is the
// whole cycle.
//
// Pure: time comes in through Tick. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "gpuslice/group_segment.h"

namespace gpuslice::control {

class TurnPlanner {
 public:
  static constexpr int64_t kPeriodNs = 100'000'000;
  // The cycle is at least this long per group (each turn's start costs a
  // context switch and a thread's wake-up), at most kMaxPeriodNs.
  static constexpr int64_t kTurnPerGroupNs = 5'000'000;
  static constexpr int64_t kMaxPeriodNs = 1'000'000'000;
  // A launch that takes more than this part of a group's due is long: its
  // turns come in whole launches.
  static constexpr double kLongLaunch = 0.25;
  // What a turn holds beyond its holder's need (see above).
  static constexpr int64_t kNeedSpareNs = 2'000'000;

  struct Taker {
    std::string group;          // unique
    uint32_t grant_bp = 0;      // device time it is due (Allocate)
    uint32_t request_bp = 0;    // of that, its request's part (guaranteed first)
    uint32_t limit_bp = 10000;  // never more
    bool wanting = false;       // wants more: held back within the last second, or new
    bool held = false;          // held back by its turn's end within the last second
    bool cut_off = false;       // ...and since the last Tick
    int64_t charge_ns = 0;      // one launch's device time (an upper bound if not measured)
    bool measured = true;       // ran_bp is measured (its launches' cost is known)
    uint32_t ran_bp = 0;        // what it ran over the last second (UsageMeter)
  };

  // The plans at `now_ns`, parallel to `takers`: each for the cycles from
  // plan.epoch_ns on (the next boundary when a cycle is planned now, else the
  // current cycle's); an empty turn for a taker the cycle in hand has none
  // for (it joined since, and waits for the next). Empty `takers`: nothing
  // (every group is paced by its rate).
  std::vector<TurnPlan> Tick(int64_t now_ns, const std::vector<Taker>& takers);

  // The current cycle length (0: no turns).
  int64_t period_ns() const { return period_ns_; }
  // A group's learned efficiency (device time per unit of turn, 0.3..1).
  double efficiency(const std::string& group) const;

 private:
  struct State {
    double efficiency = 1.0;
    int64_t credit_ns = 0;                         // deficit round-robin
    int64_t last_ns = -1;                          // its last turn; -1: none last cycle
    std::deque<std::pair<int64_t, double>> turns;  // (cycle start, share of the cycle), last 1 s
  };
  // Plans the cycle starting at `start_ns`.
  void Plan(int64_t start_ns, const std::vector<Taker>& takers);

  std::map<std::string, State> states_;
  std::map<std::string, State> prior_states_;  // as the last Plan found them
  int64_t epoch_ns_ = 0;                       // a boundary of the cycle grid
  int64_t period_ns_ = 0;
  int64_t planned_from_ns_ = -1;          // the start of the cycle planned last
  std::map<std::string, TurnPlan> plan_;  // that cycle's, by group
};

}  // namespace gpuslice::control
