#include "daemon/enforce/enforcer_choice.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

CgroupInfo In(const std::string& path, const std::string& pod = "") {
  CgroupInfo c;
  c.path = path;
  c.unified_path = path;
  c.pod_uid = pod;
  return c;
}

GpuFeatures R615() {
  GpuFeatures f;
  f.driver_version = "615.10";
  f.memory_limits_api = true;
  f.cgroup_v2 = true;
  return f;
}

ChoiceInput Input(GpuFeatures f) {
  ChoiceInput in;
  in.gpu_index = 1;
  in.features = std::move(f);
  in.cgroup_root = "/sys/fs/cgroup/";
  in.memory_limit_bytes = 2 * kGiB;
  in.memory_request_bytes = kGiB;
  in.compute_limit_percent = 40;
  in.member_cgroups = {In("/tenants/a")};
  return in;
}

TEST(EnforcerChoiceTest, AnR615NodeHoldsMemoryByTheDriverOnTheGroupsCgroup) {
  const EnforcerChoice c = ChooseEnforcers(Input(R615()));
  EXPECT_EQ(c.memory.enforcer, Enforcer::kDriver) << c.memory.reason;
  ASSERT_TRUE(c.driver_limit);
  EXPECT_EQ(*c.driver_limit, (DriverMemoryLimit{1, "/sys/fs/cgroup/tenants/a", kGiB, 2 * kGiB}));
  EXPECT_NE(c.memory.reason.find("second line"), std::string::npos) << c.memory.reason;
  EXPECT_EQ(c.compute.enforcer, Enforcer::kLimiter);
  const nlohmann::json j = EnforcerChoiceJson(c);
  EXPECT_EQ(j["memory"]["enforcer"], "driver");
  EXPECT_EQ(j["memory"]["cgroup"], "/sys/fs/cgroup/tenants/a");
  EXPECT_EQ(j["compute"]["enforcer"], "limiter");
  // A word for each why, for the metrics' label (and in the API).
  EXPECT_EQ(c.memory.code, "driver_hard_limit");
  EXPECT_EQ(c.compute.code, "limiter_time_caps");
  EXPECT_EQ(j["memory"]["reason_code"], "driver_hard_limit");
  EXPECT_EQ(j["compute"]["reason_code"], "limiter_time_caps");
}

TEST(EnforcerChoiceTest, AGroupInAMigInstanceIsHeldByMigInBothDimensions) {
  ChoiceInput in = Input(R615());
  in.features.mig = true;
  in.mig_profile = "1g.20gb";
  const EnforcerChoice c = ChooseEnforcers(in);
  EXPECT_EQ(c.memory.enforcer, Enforcer::kMig);
  EXPECT_EQ(c.compute.enforcer, Enforcer::kMig);
  EXPECT_FALSE(c.driver_limit) << "no driver limit inside a MIG instance";
  EXPECT_NE(c.memory.reason.find("1g.20gb"), std::string::npos) << c.memory.reason;
  const nlohmann::json j = EnforcerChoiceJson(c);
  EXPECT_EQ(j["memory"]["enforcer"], "mig");
  EXPECT_EQ(j["compute"]["reason_code"], "mig_instance");
}

TEST(EnforcerChoiceTest, ASoftLimitNeverExceedsTheHardOne) {
  ChoiceInput in = Input(R615());
  in.memory_request_bytes = 8 * kGiB;
  EXPECT_EQ(ChooseEnforcers(in).driver_limit->soft_bytes, 2 * kGiB);
  in.memory_request_bytes.reset();
  EXPECT_EQ(ChooseEnforcers(in).driver_limit->soft_bytes, 0u);
}

TEST(EnforcerChoiceTest, WhatTheNodeLacksFallsBackToTheLimiterSayingWhat) {
  struct Case {
    std::function<void(ChoiceInput&)> change;
    std::string says;
    std::string code;
  };
  const std::vector<Case> cases = {
      {[](ChoiceInput& in) {
         in.features.memory_limits_api = false;
         in.features.driver_version = "580.65.06";
       },
       "driver 580.65.06 has no per-cgroup memory limits", "driver_without_memory_limits"},
      {[](ChoiceInput& in) { in.features.mig = true; }, "MIG", "mig"},
      {[](ChoiceInput& in) { in.features.cgroup_v2 = false; }, "no cgroup v2", "no_cgroup_v2"},
      {[](ChoiceInput& in) { in.member_cgroups.clear(); }, "no member", "no_member"},
      {[](ChoiceInput& in) { in.member_cgroups = {In("/")}; }, "root cgroup", "root_cgroup"},
      {[](ChoiceInput& in) { in.member_cgroups = {In("")}; }, "no cgroup v2 path",
       "member_without_cgroup_v2"},
      {[](ChoiceInput& in) {
         in.member_cgroups = {In("/a"), In("/b")};
       },
       "different cgroups", "members_in_different_cgroups"},
  };
  for (const Case& c : cases) {
    ChoiceInput in = Input(R615());
    c.change(in);
    const EnforcerChoice choice = ChooseEnforcers(in);
    EXPECT_EQ(choice.memory.enforcer, Enforcer::kLimiter) << c.says;
    EXPECT_FALSE(choice.driver_limit) << c.says;
    EXPECT_NE(choice.memory.reason.find(c.says), std::string::npos) << choice.memory.reason;
    EXPECT_EQ(choice.memory.code, c.code) << c.says;
  }
}

TEST(EnforcerChoiceTest, NoLimitNoEnforcerAndMpsHoldsComputeForMpsGroups) {
  ChoiceInput in = Input(R615());
  in.memory_limit_bytes.reset();
  in.compute_limit_percent.reset();
  EnforcerChoice c = ChooseEnforcers(in);
  EXPECT_EQ(c.memory.enforcer, Enforcer::kNone);
  EXPECT_EQ(c.compute.enforcer, Enforcer::kNone);
  EXPECT_EQ(c.memory.code, "no_limit");
  EXPECT_EQ(c.compute.code, "no_limit");
  in.mps_granted = true;
  in.features.mps_protocol = 3;
  c = ChooseEnforcers(in);
  EXPECT_EQ(c.compute.enforcer, Enforcer::kMps);
  EXPECT_NE(c.compute.reason.find("v3"), std::string::npos);
  EXPECT_EQ(c.compute.code, "mps_v3_namespace");
  // With a static SM partition (v3 only), the partition holds it.
  in.mps_partition_sms = 32;
  c = ChooseEnforcers(in);
  EXPECT_EQ(c.compute.code, "mps_v3_sm_partition");
  EXPECT_NE(c.compute.reason.find("partition of 32 SMs"), std::string::npos) << c.compute.reason;
  in.features.mps_protocol = 2;
  EXPECT_EQ(ChooseEnforcers(in).compute.reason.find("v3"), std::string::npos);
  EXPECT_EQ(ChooseEnforcers(in).compute.code, "mps_thread_percentage");
}

TEST(EnforcerChoiceTest, TheGroupsCgroupIsItsPodsOrTheOneItsMembersShare) {
  std::string why;
  EXPECT_EQ(GroupCgroup({In("/a/b"), In("/a/b")}, &why), "/a/b");
  // One pod's containers: the pod's cgroup.
  EXPECT_EQ(GroupCgroup({In("/kubepods/podX/c1", "X"), In("/kubepods/podX/c2", "X")}, &why),
            "/kubepods/podX");
  EXPECT_EQ(GroupCgroup({In("/kubepods/podX/c1", "X")}, &why), "/kubepods/podX/c1");
  // Not one pod: the same cgroup or nothing.
  EXPECT_FALSE(GroupCgroup({In("/kubepods/podX/c1", "X"), In("/kubepods/podY/c1", "Y")}, &why));
  EXPECT_FALSE(GroupCgroup({In("/a/b"), In("/a")}, &why));
  EXPECT_NE(why.find("different cgroups"), std::string::npos) << why;
  EXPECT_FALSE(GroupCgroup({In("/x", "X"), In("/y", "X")}, &why));
  EXPECT_NE(why.find("root cgroup"), std::string::npos) << why;
}

}  // namespace
}  // namespace gpuslice::daemon
