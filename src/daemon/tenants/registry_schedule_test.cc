// TenantRegistry's scheduling parameters (issue 13): per-GPU request,
// priority and weight, the paused flag, admission (requests <= 100 per GPU,
// request <= limit), ScheduleOn for the scheduler, the checkpoint, and a
// registration's schedule.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "daemon/tenants/registry_fixture.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;
using namespace std::string_literals;

using testing::kPodA;

ScheduleEntry Request(uint32_t percent) {
  return ScheduleEntry{.request_percent = percent,
                       .priority = std::nullopt,
                       .weight = std::nullopt,
                       .memory_request_bytes = std::nullopt};
}

class RegistryScheduleTest : public testing::RegistryFixture {
 protected:
  RegistryScheduleTest() { node_gpus_ = {"GPU-0", "GPU-1"}; }

  StatusOr<Group> SetSchedule(const std::string& group, ScheduleSettings schedule) {
    return registry_->UpdateGroup(
        group, {.limits = std::nullopt, .tier = std::nullopt, .schedule = std::move(schedule)});
  }
};

TEST_F(RegistryScheduleTest, RequestsOnAGpuSumToAtMost100) {
  ASSERT_TRUE(SetSchedule("a", {{kAllGpus, Request(60)}}).ok());
  // 60 + 50 on every GPU: refused, naming a GPU and the current total.
  auto over = SetSchedule("b", {{kAllGpus, Request(50)}});
  ASSERT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("GPU GPU-0"), std::string::npos)
      << over.status().message();
  EXPECT_NE(over.status().message().find("would sum to 110%"), std::string::npos);
  EXPECT_NE(over.status().message().find("now 60% requested"), std::string::npos);
  EXPECT_FALSE(registry_->GroupOf("b").has_value());  // nothing changed, not even created
  ASSERT_TRUE(SetSchedule("b", {{kAllGpus, Request(40)}}).ok());
  EXPECT_EQ(registry_->RequestedOn("GPU-0"), 100u);
  // One GPU's own entry over its "all": refused on that GPU only.
  auto one = SetSchedule("b", {{kAllGpus, Request(40)}, {"GPU-1", Request(41)}});
  ASSERT_EQ(one.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(one.status().message().find("GPU GPU-1"), std::string::npos) << one.status().message();
  EXPECT_NE(one.status().message().find("now 100% requested, 40% of it by group \"b\""),
            std::string::npos)
      << one.status().message();
  EXPECT_EQ(ScheduleEntryOn(registry_->GroupOf("b")->schedule, "GPU-1").request_percent, 40u);
  // Lowering one GPU frees it for another group there, only there.
  ASSERT_TRUE(SetSchedule("a", {{kAllGpus, Request(60)}, {"GPU-1", Request(20)}}).ok());
  EXPECT_TRUE(SetSchedule("c", {{"GPU-1", Request(40)}}).ok());
  EXPECT_EQ(SetSchedule("c", {{"GPU-0", Request(1)}}).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(registry_->RequestedOn("GPU-1"), 100u);
}

TEST_F(RegistryScheduleTest, WithoutTheNodesGpusAllRequestsAreStillAdmittedTogether) {
  node_gpus_->clear();
  ASSERT_TRUE(SetSchedule("a", {{kAllGpus, Request(70)}}).ok());
  auto over = SetSchedule("b", {{kAllGpus, Request(40)}});
  ASSERT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("every GPU"), std::string::npos)
      << over.status().message();
  // A GPU a group names counts the "all" requests too.
  EXPECT_EQ(SetSchedule("b", {{"GPU-7", Request(31)}}).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(SetSchedule("b", {{"GPU-7", Request(30)}}).ok());
}

TEST_F(RegistryScheduleTest, ARequestAboveTheLimitAndOutOfRangeValuesAreInvalid) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {std::nullopt, 50}}}, std::nullopt).ok());
  auto above = SetSchedule("g", {{"GPU-1", Request(60)}});
  ASSERT_EQ(above.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(above.status().message().find("request of 60% on GPU GPU-1 is above its compute limit"),
            std::string::npos)
      << above.status().message();
  ASSERT_TRUE(SetSchedule("g", {{"GPU-1", Request(50)}}).ok());
  // Nor may the limit go below the request.
  EXPECT_EQ(registry_->SetGroup("g", {{"GPU-1", {std::nullopt, 40}}}, std::nullopt).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LimitOn(registry_->GroupOf("g")->limits, "GPU-1").compute_percent, 50u);
  EXPECT_EQ(SetSchedule("g", {{kAllGpus, Request(101)}}).status().code(),
            StatusCode::kInvalidArgument);
  ScheduleEntry heavy;
  heavy.weight = 1001;
  EXPECT_EQ(SetSchedule("g", {{kAllGpus, heavy}}).status().code(), StatusCode::kInvalidArgument);
  heavy.weight = 0;
  EXPECT_EQ(SetSchedule("g", {{kAllGpus, heavy}}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RegistryScheduleTest, ScheduleOnIsTheEffectiveValuesOnOneGpu) {
  EXPECT_FALSE(registry_->ScheduleOn("nobody", "GPU-0").has_value());
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {std::nullopt, 80}}}, std::nullopt).ok());
  ScheduleEntry all{.request_percent = 30,
                    .priority = Priority::kLatency,
                    .weight = 2,
                    .memory_request_bytes = std::nullopt};
  ScheduleEntry gpu1{.request_percent = 70,
                     .priority = std::nullopt,
                     .weight = std::nullopt,
                     .memory_request_bytes = std::nullopt};
  ASSERT_TRUE(SetSchedule("g", {{kAllGpus, all}, {"GPU-1", gpu1}}).ok());
  auto s0 = registry_->ScheduleOn("g", "GPU-0");
  ASSERT_TRUE(s0.has_value());
  EXPECT_EQ(s0->request_percent, 30u);
  EXPECT_EQ(s0->limit_percent, 80u);
  EXPECT_EQ(s0->priority, Priority::kLatency);
  EXPECT_EQ(s0->weight, 2u);
  EXPECT_FALSE(s0->paused);
  auto s1 = registry_->ScheduleOn("g", "GPU-1");
  EXPECT_EQ(s1->request_percent, 70u);  // its own entry over "all"
  EXPECT_EQ(s1->priority, Priority::kLatency);
  // A tenant's own lower limit lowers the limit, and the request with it.
  Registration r = Reg(100, 1000, "g");
  r.limits.compute_percent = 50;
  ASSERT_TRUE(registry_->Register(r).ok());
  s1 = registry_->ScheduleOn("g", "GPU-1");
  EXPECT_EQ(s1->limit_percent, 50u);
  EXPECT_EQ(s1->request_percent, 50u);
  // Defaults for a group with no word on its schedule.
  ASSERT_TRUE(registry_->SetGroup("plain", {}, std::nullopt).ok());
  auto d = registry_->ScheduleOn("plain", "GPU-0");
  EXPECT_EQ(d->request_percent, 0u);
  EXPECT_EQ(d->limit_percent, 100u);
  EXPECT_EQ(d->priority, Priority::kBatch);
  EXPECT_EQ(d->weight, 1u);
  // A view of the registry (what GroupControllers is given) answers the same.
  const RegistryView view = registry_->TakeView();
  EXPECT_EQ(view.ScheduleOn("g", "GPU-0")->request_percent, 30u);
  EXPECT_EQ(view.ScheduleOn("g", "GPU-1")->limit_percent, s1->limit_percent);
  EXPECT_FALSE(view.ScheduleOn("nobody", "GPU-0").has_value());
}

TEST_F(RegistryScheduleTest, PauseAndResumeAreEventsOnceAndShowInScheduleOn) {
  EXPECT_EQ(registry_->SetPaused("g", true).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(registry_->SetGroup("g", {}, std::nullopt).ok());
  events_.clear();
  ASSERT_TRUE(registry_->SetPaused("g", true).ok());
  ASSERT_TRUE(registry_->SetPaused("g", true).ok());  // already: no second event
  EXPECT_TRUE(registry_->ScheduleOn("g", "GPU-0")->paused);
  EXPECT_TRUE(registry_->GroupOf("g")->paused);
  ASSERT_TRUE(registry_->SetPaused("g", false).ok());
  EXPECT_FALSE(registry_->ScheduleOn("g", "GPU-0")->paused);
  EXPECT_EQ(EventTypes(), (std::vector<std::string>{"group_paused", "group_resumed"}));
  EXPECT_EQ(events_[0].second["group"], "g");
}

TEST_F(RegistryScheduleTest, AScheduleChangeIsOneEventAndLeavesTheLimits) {
  ASSERT_TRUE(registry_->SetGroup("g", {{kAllGpus, {1ull << 30, 60}}}, std::nullopt).ok());
  events_.clear();
  ASSERT_TRUE(SetSchedule("g", {{kAllGpus, Request(20)}}).ok());
  ASSERT_TRUE(SetSchedule("g", {{kAllGpus, Request(20)}}).ok());  // the same: no event
  ASSERT_EQ(EventTypes(), (std::vector<std::string>{"group_schedule_changed"}));
  EXPECT_EQ(events_[0].second["group"], "g");
  EXPECT_EQ(events_[0].second["schedule"]["all"]["request"], 20);
  EXPECT_EQ(LimitOn(registry_->GroupOf("g")->limits, "GPU-0"), (GpuLimit{1ull << 30, 60}));
}

TEST_F(RegistryScheduleTest, TheScheduleAndPausedFlagSurviveARestart) {
  ScheduleEntry all{.request_percent = 25,
                    .priority = Priority::kLatency,
                    .weight = 3,
                    .memory_request_bytes = std::nullopt};
  ASSERT_TRUE(SetSchedule("g", {{kAllGpus, all}, {"GPU-1", Request(10)}}).ok());
  ASSERT_TRUE(registry_->SetPaused("g", true).ok());
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  auto g = registry_->GroupOf("g");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->schedule, (ScheduleSettings{{kAllGpus, all}, {"GPU-1", Request(10)}}));
  EXPECT_TRUE(g->paused);
  // Admission counts what was restored.
  EXPECT_EQ(SetSchedule("h", {{kAllGpus, Request(76)}}).status().code(),
            StatusCode::kResourceExhausted);
  // And the file holds it as documented.
  std::ifstream in(store_->PathOf("groups"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"("schedule":{"GPU-1":{"request":10},"all":{"priority":"latency",)"
                      R"("request":25,"weight":3}})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("paused":true)"), std::string::npos) << text;
}

TEST_F(RegistryScheduleTest, AGroupsFileFromBeforeSchedulingStillLoads) {
  // A groups record as the daemon wrote it before issue 13: no schedule, no paused.
  ASSERT_TRUE(store_
                  ->Save("groups", json::parse(R"({"groups": [{"id": "old", "tier": "shared",
                        "limits": {"all": {"memory_bytes": 1024, "compute_percent": 40}},
                        "owner": {"uid": 1000, "pod_uid": ""}, "created_at_ns": 5}]})"))
                  .ok());
  ASSERT_TRUE(registry_->Restore().ok());
  auto g = registry_->GroupOf("old");
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(g->schedule.empty());
  EXPECT_FALSE(g->paused);
  EXPECT_EQ(LimitOn(g->limits, "GPU-0"), (GpuLimit{1024, 40}));
  auto s = registry_->ScheduleOn("old", "GPU-0");
  EXPECT_EQ(s->request_percent, 0u);
  EXPECT_EQ(s->limit_percent, 40u);
  EXPECT_EQ(s->weight, 1u);
  // A malformed schedule in a file skips that group only (logged), not the others.
  ASSERT_TRUE(store_
                  ->Save("groups", json::parse(R"({"groups": [
                        {"id": "bad", "tier": "shared", "schedule": {"all": {"weight": 0}}},
                        {"id": "good", "tier": "shared", "schedule": {"all": {"request": 5}}}]})"))
                  .ok());
  registry_ = MakeRegistry();
  ASSERT_TRUE(registry_->Restore().ok());
  EXPECT_FALSE(registry_->GroupOf("bad").has_value());
  EXPECT_EQ(registry_->ScheduleOn("good", "GPU-0")->request_percent, 5u);
}

TEST_F(RegistryScheduleTest, ARegistrationsScheduleAppliesOnlyToTheGroupItCreates) {
  Registration first = Reg(100, 1000, "train");
  first.schedule = ScheduleEntry{.request_percent = 30,
                                 .priority = Priority::kLatency,
                                 .weight = std::nullopt,
                                 .memory_request_bytes = std::nullopt};
  std::string refused = "stale";
  ASSERT_TRUE(registry_->Register(first, &refused).ok());
  EXPECT_EQ(refused, "");
  EXPECT_EQ(registry_->ScheduleOn("train", "GPU-0")->request_percent, 30u);
  EXPECT_EQ(registry_->ScheduleOn("train", "GPU-1")->priority, Priority::kLatency);
  EXPECT_EQ(registry_->ScheduleOn("train", "GPU-2")->request_percent, 0u);  // not its GPU
  EXPECT_EQ(EventTypes(),
            (std::vector<std::string>{"tenant_registered", "group_schedule_changed"}));
  // A later member's schedule is not applied; it still registers.
  Registration second = Reg(101, 1000, "train");
  second.schedule = Request(50);
  ASSERT_TRUE(registry_->Register(second, &refused).ok());
  EXPECT_NE(refused.find("group \"train\" exists"), std::string::npos) << refused;
  EXPECT_EQ(registry_->ScheduleOn("train", "GPU-0")->request_percent, 30u);
  // A first registrant whose request does not fit: registered, its group has none.
  ASSERT_TRUE(SetSchedule("big", {{kAllGpus, Request(60)}}).ok());
  Registration third = Reg(300, 65534, "eval");
  third.schedule = Request(20);
  ASSERT_TRUE(registry_->Register(third, &refused).ok());
  EXPECT_NE(refused.find("would sum to 110%"), std::string::npos) << refused;
  EXPECT_TRUE(registry_->GroupOf("eval")->schedule.empty());
  EXPECT_EQ(registry_->MemberCount("eval"), 1u);
}

TEST_F(RegistryScheduleTest, ARegistrationAskingForTheScheduleInEffectIsNotRefused) {
  // Two more processes of pod A (the group's owner) and one of pod B.
  proc_.Add(102, "102\t3", 1000, 13, Cgroup(kPodA, "4"));
  proc_.Add(103, "103\t4", 1000, 14, Cgroup(kPodA, "5"));
  proc_.Add(201, "201\t2", 1000, 22, Cgroup(testing::kPodB, "6"));
  // `gpuslice run` registers the command (the group is made with its
  // schedule), then the command's limiter registers the same pid asking the same.
  Registration run = Reg(100, 1000, "train");
  run.schedule = Request(30);
  run.schedule->priority = Priority::kLatency;
  std::string refused = "stale";
  ASSERT_TRUE(registry_->Register(run, &refused).ok());
  EXPECT_EQ(refused, "");
  ASSERT_TRUE(registry_->Register(run, &refused).ok());
  EXPECT_EQ(refused, "") << "the same process asking again for the schedule it applied";
  // A second member started the same way; one asking only for a part that is
  // the group's, or for a default the group has (weight 1).
  Registration second = run;
  second.pid = 101;
  ASSERT_TRUE(registry_->Register(second, &refused).ok());
  EXPECT_EQ(refused, "");
  Registration part = Reg(102, 1000, "train");
  part.schedule = ScheduleEntry{.request_percent = std::nullopt,
                                .priority = Priority::kLatency,
                                .weight = 1,
                                .memory_request_bytes = std::nullopt};
  ASSERT_TRUE(registry_->Register(part, &refused).ok());
  EXPECT_EQ(refused, "");
  // Asking for something else is refused, as before; on one GPU where the
  // group's own entry differs too.
  Registration other = Reg(103, 1000, "train");
  other.schedule = Request(40);
  ASSERT_TRUE(registry_->Register(other, &refused).ok());
  EXPECT_NE(refused.find("group \"train\" exists"), std::string::npos) << refused;
  ASSERT_TRUE(SetSchedule("eval", {{kAllGpus, Request(10)}, {"GPU-1", Request(20)}}).ok());
  Registration on_gpu0 = Reg(200, 1000, "eval");
  on_gpu0.devices = {"GPU-0"};
  on_gpu0.schedule = Request(10);
  ASSERT_TRUE(registry_->Register(on_gpu0, &refused).ok());
  EXPECT_EQ(refused, "");
  Registration everywhere = Reg(201, 1000, "eval");
  everywhere.schedule = Request(10);
  ASSERT_TRUE(registry_->Register(everywhere, &refused).ok());
  EXPECT_NE(refused.find("exists"), std::string::npos) << "GPU-1's request is 20: " << refused;
  EXPECT_EQ(registry_->ScheduleOn("eval", "GPU-1")->request_percent, 20u);
}

}  // namespace
}  // namespace gpuslice::daemon
