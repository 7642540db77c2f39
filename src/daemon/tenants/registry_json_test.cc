#include "daemon/tenants/registry_json.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

TEST(RegistryJsonTest, ACheckpointOfOneRequestedLimitReadsAsEveryGpus) {
  const json old = {{"host_pid", 5},
                    {"container_pid", 5},
                    {"start_time", 9},
                    {"uid", 0},
                    {"group", "g"},
                    {"tier", "shared"},
                    {"requested_limits", {{"memory_bytes", 1024u}, {"compute_percent", nullptr}}}};
  auto t = TenantFromJson(old);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(LimitOn(t->requested, "GPU-0"), (GpuLimit{1024, {}}));
  json bad = old;
  bad["requested_limits"] = {{"GPU-0", 3}};
  EXPECT_FALSE(TenantFromJson(bad).ok());
}

TEST(RegistryJsonTest, AGroupReadBackIsTheGroupWritten) {
  Group g;
  g.id = "train";
  g.limits = {{kAllGpus, {8ull << 30, 50}}, {"GPU-1", {{}, 20}}};
  g.schedule = {{"GPU-1",
                 {.request_percent = 10,
                  .priority = Priority::kLatency,
                  .weight = 3,
                  .memory_request_bytes = 1ull << 30}}};
  g.paused = true;
  g.tier = Tier::kMps;
  g.owner_uid = 1000;
  g.owner_pod_uid = "pod-1";
  g.created_at_ns = 42;
  g.forget_when_empty = true;
  auto back = GroupFromJson(GroupJson(g));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, g.id);
  EXPECT_EQ(back->limits, g.limits);
  EXPECT_EQ(back->schedule, g.schedule);
  EXPECT_EQ(back->paused, g.paused);
  EXPECT_EQ(back->tier, g.tier);
  EXPECT_EQ(back->owner_uid, g.owner_uid);
  EXPECT_EQ(back->owner_pod_uid, g.owner_pod_uid);
  EXPECT_EQ(back->created_at_ns, g.created_at_ns);
  EXPECT_EQ(back->forget_when_empty, g.forget_when_empty);
  // What the API shows of a limit: null for none.
  EXPECT_EQ(GpuLimitJson(GpuLimit{{}, 20}),
            (json{{"memory_bytes", nullptr}, {"compute_percent", 20}}));
}

TEST(RegistryJsonTest, ATenantReadBackIsTheTenantWritten) {
  Tenant t;
  t.host_pid = 100;
  t.container_pid = 1;
  t.start_time = 777;
  t.uid = 1000;
  t.group = "train";
  t.cgroup.container_id = "abc";
  t.cgroup.runtime = "podman";
  t.tier = Tier::kMps;
  t.devices = {"GPU-0", "GPU-1"};
  t.requested = {{"GPU-1", {1ull << 30, {}}}};
  t.registered_at_ns = 5;
  auto back = TenantFromJson(TenantJson(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host_pid, t.host_pid);
  EXPECT_EQ(back->container_pid, t.container_pid);
  EXPECT_EQ(back->start_time, t.start_time);
  EXPECT_EQ(back->uid, t.uid);
  EXPECT_EQ(back->group, t.group);
  EXPECT_EQ(back->cgroup.container_id, "abc");
  EXPECT_EQ(back->cgroup.runtime, "podman");
  EXPECT_EQ(back->tier, t.tier);
  EXPECT_EQ(back->devices, t.devices);
  EXPECT_EQ(back->requested, t.requested);
  EXPECT_EQ(back->registered_at_ns, t.registered_at_ns);
}

TEST(RegistryJsonTest, MalformedRecordsAreRefusedSayingWhat) {
  EXPECT_EQ(TenantFromJson(json::array()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TenantFromJson(json{{"host_pid", "x"}}).status().code(), StatusCode::kInvalidArgument);
  json g = GroupJson(Group{.id = "g",
                           .limits = {},
                           .schedule = {},
                           .paused = false,
                           .tier = Tier::kShared,
                           .owner_uid = std::nullopt,
                           .owner_pod_uid = "",
                           .created_at_ns = 0,
                           .forget_when_empty = false});
  g["limits"] = {{"GPU-0", {{"memory_bytes", -1}}}};
  const auto bad = GroupFromJson(g);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("GPU-0"), std::string::npos) << bad.status().message();
  g["limits"] = json::object();
  g["schedule"] = {{"all", {{"weight", 5000}}}};
  EXPECT_FALSE(GroupFromJson(g).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
