// The registry's typed events (RegistryObserver): what a fake observer is
// told, with which fields, beside the JSON form the fixture's sink records.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/tenants/registry.h"
#include "daemon/tenants/registry_fixture.h"

namespace gpuslice::daemon {
namespace {

// Keeps every event it is told of, in order.
class RecordingObserver final : public RegistryObserver {
 public:
  void OnTenantRegistered(const TenantRegistered& e) override {
    registered.push_back(e);
    order.emplace_back("registered");
  }
  void OnRegistrationRefused(const RegistrationRefused& e) override {
    refused.push_back(e);
    order.emplace_back("refused");
  }
  void OnTenantExited(const TenantExited& e) override {
    exited.push_back(e);
    order.emplace_back("exited");
  }
  void OnLimitsChanged(const GroupLimitsChanged& e) override {
    limits.push_back(e);
    order.emplace_back("limits");
  }
  void OnScheduleChanged(const GroupScheduleChanged& e) override {
    schedules.push_back(e);
    order.emplace_back("schedule");
  }
  void OnPauseChanged(const GroupPauseChanged& e) override {
    pauses.push_back(e);
    order.emplace_back("pause");
  }
  void OnGroupForgotten(const GroupForgotten& e) override {
    forgotten.push_back(e);
    order.emplace_back("forgotten");
  }

  std::vector<TenantRegistered> registered;
  std::vector<RegistrationRefused> refused;
  std::vector<TenantExited> exited;
  std::vector<GroupLimitsChanged> limits;
  std::vector<GroupScheduleChanged> schedules;
  std::vector<GroupPauseChanged> pauses;
  std::vector<GroupForgotten> forgotten;
  std::vector<std::string> order;
};

class RegistryObserverTest : public testing::RegistryFixture {
 protected:
  void SetUp() override {
    RegistryFixture::SetUp();
    registry_->AddObserver(&observer_);
  }
  RecordingObserver observer_;
};

TEST_F(RegistryObserverTest, ARegistrationAndItsExitCarryTheTenantAndTheGroup) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "train")).ok());
  ASSERT_EQ(observer_.registered.size(), 1u);
  EXPECT_EQ(observer_.registered[0].tenant.host_pid, 100);
  EXPECT_EQ(observer_.registered[0].tenant.group, "train");
  EXPECT_EQ(observer_.registered[0].tenant.devices, (std::vector<std::string>{"GPU-0", "GPU-1"}));

  registry_->OnExited({100, 4242});  // 4242 is no tenant: no event
  ASSERT_EQ(observer_.exited.size(), 1u);
  EXPECT_EQ(observer_.exited[0].host_pid, 100);
  EXPECT_EQ(observer_.exited[0].group, "train");
  EXPECT_EQ(observer_.exited[0].reason, ExitReason::kExited);
  // The JSON form, from the same event.
  EXPECT_EQ(events_.back().first, "tenant_exited");
  EXPECT_EQ(events_.back().second,
            (nlohmann::json{{"host_pid", 100}, {"group", "train"}, {"reason", "exited"}}));

  ASSERT_TRUE(registry_->Register(Reg(101, 1000, "train")).ok());
  ASSERT_TRUE(registry_->Unregister(101).ok());
  ASSERT_EQ(observer_.exited.size(), 2u);
  EXPECT_EQ(observer_.exited[1].host_pid, 101);
  EXPECT_EQ(observer_.exited[1].reason, ExitReason::kUnregistered);
  EXPECT_EQ(events_.back().second["reason"], "unregistered");
}

TEST_F(RegistryObserverTest, ARefusalSaysWhoAndWhy) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "train")).ok());
  EXPECT_FALSE(registry_->Register(Reg(300, 65534, "train")).ok());
  ASSERT_EQ(observer_.refused.size(), 1u);
  EXPECT_EQ(observer_.refused[0].pid, 300);
  EXPECT_EQ(observer_.refused[0].uid, 65534u);
  EXPECT_EQ(observer_.refused[0].group, "train");
  EXPECT_EQ(observer_.refused[0].why.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(events_.back().first, "registration_refused");
  EXPECT_EQ(events_.back().second["code"], "PERMISSION_DENIED");
  EXPECT_EQ(events_.back().second["uid"], 65534);
}

TEST_F(RegistryObserverTest, GroupChangesCarryTheGroupAsItIsNow) {
  const Limits limits{{kAllGpus, {1ull << 30, 40}}};
  ASSERT_TRUE(
      registry_
          ->UpdateGroup("g", {.limits = limits, .tier = std::nullopt, .schedule = std::nullopt})
          .ok());
  ASSERT_EQ(observer_.limits.size(), 1u);
  EXPECT_EQ(observer_.limits[0].group.id, "g");
  EXPECT_EQ(observer_.limits[0].group.limits, limits);
  EXPECT_TRUE(observer_.schedules.empty()) << "the schedule did not change";
  EXPECT_EQ(events_.back().first, "group_limits_changed");
  EXPECT_EQ(events_.back().second["id"], "g");

  ScheduleEntry entry;
  entry.request_percent = 30;
  const ScheduleSettings schedule{{"GPU-0", entry}};
  ASSERT_TRUE(
      registry_
          ->UpdateGroup("g", {.limits = std::nullopt, .tier = std::nullopt, .schedule = schedule})
          .ok());
  ASSERT_EQ(observer_.schedules.size(), 1u);
  EXPECT_EQ(observer_.schedules[0].group.id, "g");
  EXPECT_EQ(observer_.schedules[0].group.schedule, schedule);
  EXPECT_FALSE(observer_.schedules[0].group.paused);
  EXPECT_EQ(observer_.limits.size(), 1u) << "neither limits nor tier given";
  EXPECT_EQ(events_.back().first, "group_schedule_changed");
  EXPECT_EQ(events_.back().second["group"], "g");
  EXPECT_EQ(events_.back().second["paused"], false);

  ASSERT_TRUE(registry_->SetPaused("g", true).ok());
  ASSERT_TRUE(registry_->SetPaused("g", true).ok());  // no change: no event
  ASSERT_TRUE(registry_->SetPaused("g", false).ok());
  ASSERT_EQ(observer_.pauses.size(), 2u);
  EXPECT_EQ(observer_.pauses[0].group, "g");
  EXPECT_TRUE(observer_.pauses[0].paused);
  EXPECT_FALSE(observer_.pauses[1].paused);
  EXPECT_EQ(events_.back().first, "group_resumed");

  ASSERT_TRUE(registry_->ForgetGroup("g").ok());
  ASSERT_EQ(observer_.forgotten.size(), 1u);
  EXPECT_EQ(observer_.forgotten[0].group, "g");
  EXPECT_EQ(observer_.order,
            (std::vector<std::string>{"limits", "schedule", "pause", "pause", "forgotten"}));
}

TEST_F(RegistryObserverTest, ARemovedObserverIsToldNothingMore) {
  ASSERT_TRUE(registry_->Register(Reg(100, 1000, "train")).ok());
  registry_->RemoveObserver(&observer_);
  registry_->OnExited({100});
  EXPECT_EQ(observer_.order, (std::vector<std::string>{"registered"}));
  EXPECT_EQ(events_.back().first, "tenant_exited") << "the JSON form still is";
}

}  // namespace
}  // namespace gpuslice::daemon
