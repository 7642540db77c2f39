#include "daemon/groups/group_controllers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "shm/launch_pacer.h"
#include "shm/ledger_eviction_testing.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon {
namespace {

constexpr pid_t kDaemonPid = 4242;  // not this process: claims are told apart from members'
constexpr int64_t kMs = 1'000'000;

// The GPU's busy samples, as the test scripts them (none unless it adds).
class ScriptedBusy final : public control::DeviceBusySource {
 public:
  StatusOr<std::vector<control::DeviceBusySample>> BusySince(std::string_view,
                                                             uint64_t since_us) override {
    std::vector<control::DeviceBusySample> out;
    for (const auto& s : samples) {
      if (s.timestamp_us > since_us) out.push_back(s);
    }
    return out;
  }
  std::vector<control::DeviceBusySample> samples;
};

class GroupControllersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-groupctl-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> Member(const char* group) {
    auto seg = GroupSegment::Open(dir_, group, true);
    EXPECT_TRUE(seg.ok());
    return seg.ok() ? std::move(seg).value() : nullptr;
  }
  // The daemon's word: `limits_of_` and `schedule_of_`, asked for at each
  // tick that needs them (`words_` counts the asks).
  std::unique_ptr<GroupControllers> Controllers(int64_t rescan_ns = 0, bool schedule = false) {
    return std::make_unique<GroupControllers>(
        GroupControllers::Options{
            .shm_dir = dir_, .self = kDaemonPid, .rescan_ns = rescan_ns, .schedule = schedule},
        busy_,
        [this] {
          ++words_;
          return GroupControllers::Word{.limits_of = limits_of_, .schedule_of = schedule_of_};
        },
        GroupControllers::Clocks{clock_, clock_});
  }

  // Scheduling: `schedules_` is the daemon's word per group (any GPU).
  std::unique_ptr<GroupControllers> Scheduling(int64_t rescan_ns = 0) {
    schedule_of_ = [this](const std::string& group,
                          const std::string&) -> std::optional<GroupSchedule> {
      auto it = schedules_.find(group);
      if (it == schedules_.end()) return std::nullopt;
      return it->second;
    };
    return Controllers(rescan_ns, /*schedule=*/true);
  }
  // What a saturating member's launch gate does to its counters in `ns`:
  // launches of 1 ms at `share` of the device, each measured by its markers
  // and seen complete, held back by its grant or its turn's end (waits and
  // cut-offs grow). The member joins a slot on its first launch.
  void Launch(GroupSegment& member, int64_t ns, double share, bool held = true) {
    auto [it, fresh] = slots_.try_emplace(&member, -1);
    if (fresh) it->second = *member.Join(getpid(), 1000 + slots_.size(), "member");
    ComputeBudget budget = member.usage().Budget(0, it->second);
    const auto n = static_cast<uint64_t>(share * static_cast<double>(ns) / 1e6);
    for (uint64_t i = 0; i < n; ++i) budget.CountLaunch();
    budget.Queued(static_cast<uint32_t>(n));
    budget.Completed(n);
    budget.AddBusy(static_cast<int64_t>(n) * 1'000'000, n);
    if (held) {  // by its turn's end (taking turns) or by its rate
      budget.CountCutOff();
      budget.CountWait(1);
    }
  }
  // Ticks the controllers every scheduler period for `ns`, each group in
  // `busy` launching at its grant (or at the share given) and held back.
  void Run(GroupControllers& controllers, int64_t ns, const std::map<GroupSegment*, double>& busy) {
    constexpr int64_t kPeriodNs = 100 * kMs;
    for (int64_t t = 0; t < ns; t += kPeriodNs) {
      clock_.Advance(kPeriodNs);
      for (auto [member, share] : busy) {
        Launch(*member, kPeriodNs,
               share > 0 ? share : member->schedule().ComputeGrant(0) / 10000.0);
      }
      controllers.Tick();
    }
  }
  static constexpr char kGpu[] = "GPU-00000000-1111-2222-3333-444444444444";

  std::map<std::string, GroupSchedule> schedules_;
  std::map<GroupSegment*, int> slots_;  // each member's slot
  std::string dir_;
  ScriptedBusy busy_;
  GroupControllers::LimitsOf limits_of_;
  GroupControllers::ScheduleOf schedule_of_;
  int words_ = 0;
  SimulatedClock clock_{MonotonicNs() + 1000 * kMs};  // the segments' time base, after creation
};

TEST_F(GroupControllersTest, ClaimsAGroupAndControlsItOnceTheMemberYields) {
  auto member = Member("g");
  ASSERT_TRUE(
      member->control().TryBecomeController());  // a member keeps it, as before the daemon came
  auto controllers = Controllers();

  controllers->Tick();
  EXPECT_TRUE(member->control().DaemonClaims(clock_.NowNs()));
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  EXPECT_FALSE(controllers->Snapshot()[0].controlling);  // the member still holds the role

  member->control().ResignController();  // what a member's keeper does when it sees the claim
  clock_.Advance(50 * kMs);
  controllers->Tick();
  EXPECT_TRUE(controllers->Snapshot()[0].controlling);
  EXPECT_FALSE(member->control().TryBecomeController());
  EXPECT_EQ(member->LastAliveNs(), clock_.NowNs());  // the daemon's keeper beats
}

// A group whose first member attaches between rescans is adopted (and so
// scheduled) within adopt_ns, not at the next rescan: until then it runs on
// its provisional grant, queueing more than its share.
TEST_F(GroupControllersTest, AdoptsANewGroupWithinAnAdoptPeriodBetweenRescans) {
  auto controllers = Controllers(/*rescan_ns=*/60'000 * kMs);
  { auto gone = Member("idle"); }
  controllers->Tick();
  EXPECT_TRUE(controllers->Snapshot().empty());

  auto member = Member("new");
  clock_.Advance(50 * kMs);
  controllers->Tick();
  EXPECT_FALSE(member->control().DaemonClaims(clock_.NowNs()));  // not due yet
  clock_.Advance(50 * kMs);
  const int64_t next = controllers->Tick();
  EXPECT_TRUE(member->control().DaemonClaims(clock_.NowNs()));
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  EXPECT_EQ(controllers->Snapshot()[0].group, "new");
  EXPECT_LE(next, 100 * kMs);
}

// A claim's group lives in its own directory (shm/segment_dirs.h): adopted
// there, and preferred to a file of the same name in the shared directory.
TEST_F(GroupControllersTest, AdoptsGroupsInTheirClaimsOwnDirectory) {
  ASSERT_TRUE(MakeClaimSegmentDir(dir_, "claim-a").ok());
  auto in_claim = GroupSegment::Open(ClaimSegmentDir(dir_, "claim-a"), "claim-a", true);
  ASSERT_TRUE(in_claim.ok());
  auto squat = Member("claim-a");  // the same name in the shared directory
  auto local = Member("local");
  auto controllers = Controllers();
  controllers->Tick();
  ASSERT_EQ(controllers->Snapshot().size(), 2u);
  EXPECT_TRUE((*in_claim)->control().DaemonClaims(clock_.NowNs()));
  EXPECT_FALSE(squat->control().DaemonClaims(clock_.NowNs()));
  EXPECT_TRUE(local->control().DaemonClaims(clock_.NowNs()));
}

TEST_F(GroupControllersTest, LeavesIdleGroupsAloneAndReleasesGroupsThatGoIdle) {
  { auto gone = Member("idle"); }
  auto member = Member("busy");
  auto controllers = Controllers();
  controllers->Tick();
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  EXPECT_EQ(controllers->Snapshot()[0].group, "busy");

  member.reset();  // its last process detaches
  clock_.Advance(50 * kMs);
  controllers->Tick();
  EXPECT_TRUE(controllers->Snapshot().empty());
  auto observer = GroupSegment::Open(dir_, "busy", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_FALSE(
      (*observer)->control().DaemonClaims(clock_.NowNs()));  // nothing keeps it looking alive
}

TEST_F(GroupControllersTest, HoldsAGroupToTheDaemonsLimitsAndSetsBackAMembersChange) {
  constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";
  limits_of_ = [&](const std::string& group,
                   const std::string& uuid) -> std::optional<GroupControllers::DeviceLimit> {
    if (group != "ruled" || uuid != kUuid) return std::nullopt;
    return GroupControllers::DeviceLimit{.memory_bytes = 1u << 30, .compute_percent = {}};
  };
  auto ruled = Member("ruled");
  auto free = Member("free");
  ASSERT_TRUE(ruled->AttachDevice(kUuid).ok());
  ASSERT_TRUE(free->AttachDevice(kUuid).ok());
  free->SetMemoryLimit(0, 3ull << 30);
  ruled->SetComputeLimit(0, 40);  // a member's own word, where the daemon has none
  auto controllers = Controllers();
  controllers->Tick();
  EXPECT_EQ(ruled->MemoryLimit(0), 1u << 30);
  EXPECT_EQ(ruled->ComputeLimit(0), 40u);
  EXPECT_EQ(free->MemoryLimit(0), 3ull << 30);  // no word on it: its own limits stand

  ruled->SetMemoryLimit(0, kUnlimitedBytes);  // a member raises its group's limit
  clock_.Advance(1000 * kMs);
  controllers->Tick();
  EXPECT_EQ(ruled->MemoryLimit(0), 1u << 30);
}

// One instant's word per tick (the registry's view, taken once): a tick that
// applies every group's limits and schedules them all asks for it once; a
// tick with nothing due does not ask.
TEST_F(GroupControllersTest, ATickAsksForTheDaemonsWordOnceForEveryGroup) {
  limits_of_ = [](const std::string&,
                  const std::string&) -> std::optional<GroupControllers::DeviceLimit> {
    return GroupControllers::DeviceLimit{.memory_bytes = 1u << 30, .compute_percent = {}};
  };
  std::vector<std::unique_ptr<GroupSegment>> members;
  for (const char* name : {"a", "b", "c"}) {
    members.push_back(Member(name));
    ASSERT_TRUE(members.back()->AttachDevice(kGpu).ok());
  }
  std::set<std::string> scheduled;
  auto controllers = Controllers(/*rescan_ns=*/60'000 * kMs, /*schedule=*/true);
  schedule_of_ = [&](const std::string& group, const std::string&) -> std::optional<GroupSchedule> {
    scheduled.insert(group);
    return GroupSchedule{.request_percent = 10};
  };
  controllers->Tick();  // adopts, applies the limits and schedules: one word
  EXPECT_EQ(words_, 1);
  EXPECT_EQ(scheduled, (std::set<std::string>{"a", "b", "c"}));
  for (const auto& m : members) EXPECT_EQ(m->MemoryLimit(0), 1u << 30);
  controllers->Tick();  // no time has passed: nothing due, no word asked for
  EXPECT_EQ(words_, 1);
  clock_.Advance(100 * kMs);  // the next schedule is due: one word again
  controllers->Tick();
  EXPECT_EQ(words_, 2);
}

TEST_F(GroupControllersTest, StopHandsEveryGroupBackAtOnce) {
  auto member = Member("g");
  auto controllers = Controllers();
  controllers->Tick();
  ASSERT_TRUE(controllers->Snapshot()[0].controlling);
  controllers->Stop();
  EXPECT_FALSE(member->control().DaemonClaims(clock_.NowNs()));
  EXPECT_TRUE(member->control().TryBecomeController());
}

TEST_F(GroupControllersTest, AClaimGoesStaleWhenTheDaemonStopsBeating) {
  auto member = Member("g");
  auto controllers = Controllers();
  controllers->Tick();
  EXPECT_TRUE(member->control().DaemonClaims(clock_.NowNs() + kDaemonStaleNs - 1));
  EXPECT_FALSE(member->control().DaemonClaims(clock_.NowNs() + kDaemonStaleNs));
}

TEST_F(GroupControllersTest, SchedulesTheGroupsOfAGpuAndWritesTheirGrants) {
  auto a = Member("a");
  auto b = Member("b");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  ASSERT_TRUE(b->AttachDevice(kGpu).ok());
  schedules_["a"] = {.request_percent = 60};                  // "b": no word, the defaults
  auto controllers = Scheduling(/*rescan_ns=*/60'000 * kMs);  // segments snapshotted once
  controllers->Tick();
  Run(*controllers, 3000 * kMs, {{a.get(), 0}, {b.get(), 0}});
  const uint32_t ga = a->schedule().ComputeGrant(0), gb = b->schedule().ComputeGrant(0);
  EXPECT_GE(ga, 5400u);  // its request, of what the device can give
  EXPECT_GT(gb, 1000u);  // the surplus
  EXPECT_LE(ga + gb, 10000u);
  EXPECT_EQ(a->schedule().ComputeBurst(0), kPacerBurstNs);  // set: the gate bounds its queue
  EXPECT_FALSE(a->schedule().Paused());
  for (const auto& g : controllers->Snapshot()) {
    ASSERT_EQ(g.grants.size(), 1u) << g.group;
    EXPECT_EQ(g.grants[0].uuid, kGpu);
    EXPECT_EQ(g.grants[0].grant_bp, g.group == "a" ? ga : gb);
    ASSERT_EQ(g.segment.devices.size(), 1u);
    EXPECT_EQ(g.segment.devices[0].grant_bp, g.grants[0].grant_bp);  // fresh, not as of a rescan
    EXPECT_TRUE(g.grants[0].wants_more);
  }

  // Alone on the GPU, a group gets all of it (just below, so that its
  // launches stay counted): "b" stops launching (idle within about 2 s).
  Run(*controllers, 2500 * kMs, {{a.get(), 0}});
  EXPECT_EQ(a->schedule().ComputeGrant(0), kFullGrantBp - 1);
}

TEST_F(GroupControllersTest, PausesAGroupAndLendsItsShare) {
  auto a = Member("a");
  auto b = Member("b");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  ASSERT_TRUE(b->AttachDevice(kGpu).ok());
  schedules_["a"] = {.request_percent = 50};
  schedules_["b"] = {.request_percent = 20};
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 2000 * kMs, {{a.get(), 0}, {b.get(), 0}});
  EXPECT_LT(b->schedule().ComputeGrant(0), 6000u);

  schedules_["a"].paused = true;
  Run(*controllers, 100 * kMs, {{b.get(), 0}});
  EXPECT_TRUE(a->schedule().Paused());
  EXPECT_EQ(a->schedule().ComputeGrant(0), 0u);
  Run(*controllers, 1000 * kMs, {{b.get(), 0}});
  EXPECT_EQ(b->schedule().ComputeGrant(0), kFullGrantBp - 1);  // a's share is lent
  bool paused_in_snapshot = false;
  for (const auto& g : controllers->Snapshot()) {
    if (g.group == "a") paused_in_snapshot = g.paused;
  }
  EXPECT_TRUE(paused_in_snapshot);

  schedules_["a"].paused = false;
  Run(*controllers, 100 * kMs, {{a.get(), 0.01}, {b.get(), 0}});
  EXPECT_FALSE(a->schedule().Paused());
  EXPECT_GE(a->schedule().ComputeGrant(0), 4500u);  // its request back at once
}

// A resumed group is unpaused only once its grant is written: a paused
// group's grant is 0 ("no grant": paced by its limit alone, here none), and
// a launch that found it unpaused before the grant ran unpaced and uncounted
// (bench/scheduler's pause case: the driver's queue filled in that window).
// Seen from inside the tick: "b"'s schedule is asked for after "a"'s.
TEST_F(GroupControllersTest, AResumedGroupIsPacedAtEveryMomentOfTheTick) {
  auto a = Member("a");
  auto b = Member("b");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  ASSERT_TRUE(b->AttachDevice(kGpu).ok());
  schedules_["a"] = {.request_percent = 50};
  schedules_["b"] = {.request_percent = 20};
  bool unpaced = false;  // "a" seen unpaused and not paced
  schedule_of_ = [&](const std::string& group, const std::string&) -> std::optional<GroupSchedule> {
    if (!a->schedule().Paused() && (a->schedule().ComputeLimitedMask() & 1u) == 0) unpaced = true;
    return schedules_.at(group);
  };
  auto controllers = Controllers(0, /*schedule=*/true);
  controllers->Tick();
  Run(*controllers, 1000 * kMs, {{a.get(), 0}, {b.get(), 0}});
  schedules_["a"].paused = true;
  Run(*controllers, 500 * kMs, {{b.get(), 0}});
  ASSERT_TRUE(a->schedule().Paused());
  ASSERT_EQ(a->schedule().ComputeGrant(0), 0u);

  unpaced = false;
  schedules_["a"].paused = false;
  Run(*controllers, 100 * kMs, {{b.get(), 0}});
  EXPECT_FALSE(a->schedule().Paused());
  EXPECT_GT(a->schedule().ComputeGrant(0), 0u);
  EXPECT_FALSE(unpaced) << "unpaused before its grant was written";
}

// A pause (or resume, or a schedule changed) asked for through the API is
// written at the next tick, not at the scheduler's next period.
TEST_F(GroupControllersTest, APauseAskedForIsWrittenAtTheNextTick) {
  auto a = Member("a");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  schedules_["a"] = {.request_percent = 50};
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 500 * kMs, {{a.get(), 0}});
  schedules_["a"].paused = true;
  clock_.Advance(10 * kMs);  // within the period
  controllers->Tick();
  EXPECT_FALSE(a->schedule().Paused());  // not due yet
  controllers->ScheduleSoon();
  controllers->Tick();
  EXPECT_TRUE(a->schedule().Paused());
  EXPECT_EQ(a->schedule().ComputeGrant(0), 0u);
}

// Batch groups take turns; beside an active latency group their queues are
// bounded and the latency group has no turns. A new plan takes effect at the
// next cycle's start, the one in effect standing until then.
TEST_F(GroupControllersTest, BatchGroupsTakeTurnsAndBesideALatencyGroupTheirQueuesAreBounded) {
  auto lat = Member("lat");
  auto a = Member("a");
  auto b = Member("b");
  for (auto* m : {lat.get(), a.get(), b.get()}) ASSERT_TRUE(m->AttachDevice(kGpu).ok());
  schedules_["lat"] = {.request_percent = 10, .priority = Priority::kLatency};
  schedules_["a"] = {.request_percent = 60};
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 1000 * kMs, {{a.get(), 0.5}, {b.get(), 0.4}});
  const TurnPlan ta = a->schedule().TurnAt(0, clock_.NowNs());
  const TurnPlan tb = b->schedule().TurnAt(0, clock_.NowNs());
  ASSERT_GT(ta.period_ns, 0);
  EXPECT_EQ(ta.period_ns, tb.period_ns);
  EXPECT_GT(ta.length_ns, tb.length_ns);               // a's request
  EXPECT_EQ(ta.begin_ns + ta.length_ns, tb.begin_ns);  // back to back
  EXPECT_EQ(a->schedule().QueueBound(0), 0);           // no latency group active yet
  // Pending: the plan for the next cycle, from its boundary on.
  const auto [current, next] = a->schedule().Turns(0);
  if (next.epoch_ns != 0) {
    EXPECT_GT(next.epoch_ns, clock_.NowNs() - 100 * kMs);
  }
  // The latency group becomes active.
  Run(*controllers, 500 * kMs, {{lat.get(), 0.05}, {a.get(), 0.5}, {b.get(), 0.4}});
  EXPECT_EQ(a->schedule().QueueBound(0), control::ShareScheduler::kLatencyQueueNs);
  EXPECT_EQ(b->schedule().QueueBound(0), control::ShareScheduler::kLatencyQueueNs);
  EXPECT_EQ(lat->schedule().TurnAt(0, clock_.NowNs()).period_ns, 0);
  EXPECT_EQ(lat->schedule().QueueBound(0), 0);
  EXPECT_EQ(lat->schedule().ComputeBurst(0), kPacerBurstNs);
}

// What the scheduler says each group ran is in the group's segment, for
// readers (gpuslice status, a member's view), the same figure as Snapshot's.
TEST_F(GroupControllersTest, WhatAGroupRanIsPublishedInItsSegment) {
  auto a = Member("a");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  schedules_["a"] = {.request_percent = 50};
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 2000 * kMs, {{a.get(), 0.3}});
  const int32_t share = a->schedule().Counters(0).share_bp;
  EXPECT_NEAR(share, 3000, 150);
  ASSERT_EQ(controllers->Snapshot().size(), 1u);
  ASSERT_EQ(controllers->Snapshot()[0].grants.size(), 1u);
  EXPECT_EQ(static_cast<int32_t>(controllers->Snapshot()[0].grants[0].used_bp), share);
  EXPECT_EQ(a->schedule().Counters(0).charge_ns, 1'000'000);  // from its markers' evidence
}

// A member that dies holding its group's ledger lock is evicted by the next
// locker; the daemon reports the eviction (API, metrics) from the segment.
TEST_F(GroupControllersTest, CountsTheGroupsLedgerEvictions) {
  auto a = Member("a");
  ASSERT_TRUE(a->AttachDevice(kGpu).ok());
  auto controllers = Controllers();
  controllers->Tick();
  EXPECT_EQ(controllers->LedgerEvictionsOf("a"), 0u);
  EXPECT_EQ(controllers->LedgerEvictionsOf("none"), std::nullopt);

  ASSERT_TRUE(testing::EvictADeadLedgerHolder(*a, dir_, "a"));
  clock_.Advance(100 * kMs);
  controllers->Tick();
  EXPECT_EQ(controllers->LedgerEvictionsOf("a"), 1u);
}

TEST_F(GroupControllersTest, LeavesGroupsAMemberControlsAloneAndClearsGrantsOnStop) {
  auto mine = Member("mine");
  auto theirs = Member("theirs");
  ASSERT_TRUE(mine->AttachDevice(kGpu).ok());
  ASSERT_TRUE(theirs->AttachDevice(kGpu).ok());
  ASSERT_TRUE(theirs->control().TryBecomeController());  // a member keeps the role
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 500 * kMs, {{mine.get(), 0}, {theirs.get(), 0.3}});
  EXPECT_EQ(theirs->schedule().ComputeGrant(0), 0u);
  EXPECT_GT(mine->schedule().ComputeGrant(0), 0u);
  controllers->Stop();
  EXPECT_EQ(mine->schedule().ComputeGrant(0), 0u);  // self-control: the limits alone
}

// The CPU a tick costs with 100 groups on one GPU, all scheduled (printed;
// no bound asserted).
TEST_F(GroupControllersTest, TickCpuWithAHundredGroups) {
  std::vector<std::unique_ptr<GroupSegment>> members;
  std::map<GroupSegment*, double> busy;
  for (int i = 0; i < 100; ++i) {
    const std::string name = "g" + std::to_string(i);
    members.push_back(Member(name.c_str()));
    ASSERT_TRUE(members.back()->AttachDevice(kGpu).ok());
    schedules_[name] = {.request_percent = 1};
    busy[members.back().get()] = 0;
  }
  auto controllers = Scheduling();
  controllers->Tick();
  Run(*controllers, 1000 * kMs, busy);
  constexpr int kTicks = 50;
  auto cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  };
  int64_t spent = 0;
  for (int t = 0; t < kTicks; ++t) {
    clock_.Advance(100 * kMs);
    for (auto [member, share] : busy)
      Launch(*member, 100 * kMs, member->schedule().ComputeGrant(0) / 1e4);
    const int64_t start = cpu_ns();
    controllers->Tick();
    spent += cpu_ns() - start;
  }
  for (const auto& m : members) EXPECT_GE(m->schedule().ComputeGrant(0), 80u);  // ~1 % each
  std::printf("GroupControllers::Tick, 100 groups on one GPU, scheduling: %.1f us CPU per tick\n",
              static_cast<double>(spent) / kTicks / 1000);
}

}  // namespace
}  // namespace gpuslice::daemon
