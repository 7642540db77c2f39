#include "cli/group_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/clock.h"
#include "shm/ledger_eviction_testing.h"
#include "shm/raw_layout_testing.h"

namespace gpuslice::cli {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kUuid[] = "GPU-3430e1f2-1111-2222-3333-444444444444";

class GroupReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<GroupSegment> Open(bool create) {
    auto seg = GroupSegment::Open(dir_, "g1", create);
    EXPECT_TRUE(seg.ok()) << seg.status().ToString();
    return seg.ok() ? std::move(seg).value() : nullptr;
  }

  std::string dir_;
};

TEST_F(GroupReportTest, ShowsLimitsUsageAndLiveMembersSeenFromAnotherHandle) {
  auto member = Open(true);
  ASSERT_TRUE(member);
  ASSERT_EQ(*member->AttachDevice(kUuid), 0);
  member->SetMemoryLimit(0, 1024 * kMiB);
  member->SetComputeLimit(0, 40);
  int slot = *member->Join(getpid(), 1, "trainer");
  ASSERT_TRUE(member->ledger().Reserve(slot, 0, 300 * kMiB));

  auto reader = Open(false);  // like `gpuslice status`: its own open file description
  ASSERT_TRUE(reader);
  GroupReport r = ReadGroupReport(*reader, MonotonicNs());
  EXPECT_EQ(r.group, "g1");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].uuid, kUuid);
  EXPECT_EQ(r.devices[0].memory_used, 300 * kMiB);
  EXPECT_EQ(r.devices[0].memory_limit, 1024 * kMiB);
  EXPECT_EQ(r.devices[0].compute_limit, 40u);
  ASSERT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.members[0].pid, getpid());
  EXPECT_EQ(r.members[0].name, "trainer");
  EXPECT_EQ(r.members[0].memory, std::vector<uint64_t>{300 * kMiB});

  nlohmann::json j = StatusJson({r});
  const auto& g = j["groups"][0];
  EXPECT_EQ(g["group"], "g1");
  EXPECT_EQ(g["live"], true);
  EXPECT_TRUE(g["idle_seconds"].is_null());
  EXPECT_EQ(g["live_members"], 1);
  EXPECT_EQ(g["devices"][0]["index"], 0);
  EXPECT_EQ(g["devices"][0]["uuid"], kUuid);
  EXPECT_EQ(g["devices"][0]["memory_used_bytes"], 300 * kMiB);
  EXPECT_EQ(g["devices"][0]["memory_limit_bytes"], 1024 * kMiB);
  EXPECT_EQ(g["devices"][0]["compute_limit_percent"], 40);
  EXPECT_EQ(g["members"][0]["pid"], getpid());
  EXPECT_EQ(g["members"][0]["name"], "trainer");
  EXPECT_EQ(g["members"][0]["memory_bytes"], 300 * kMiB);
  EXPECT_EQ(g["members"][0]["devices"][0]["memory_bytes"], 300 * kMiB);

  const std::string text = StatusText({r});
  EXPECT_NE(text.find("0 GPU-3430e1f2"), std::string::npos) << text;
  EXPECT_NE(text.find("300.00 MiB / 1.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("40%"), std::string::npos) << text;
  EXPECT_NE(text.find("trainer"), std::string::npos) << text;
}

TEST_F(GroupReportTest, UnlimitedIsNullInJsonAndWordedInText) {
  auto seg = Open(true);
  ASSERT_TRUE(seg);
  ASSERT_TRUE(seg->AttachDevice(kUuid).ok());
  GroupReport r = ReadGroupReport(*seg, MonotonicNs());
  EXPECT_TRUE(r.members.empty());
  nlohmann::json j = StatusJson({r});
  EXPECT_TRUE(j["groups"][0]["devices"][0]["memory_limit_bytes"].is_null());
  EXPECT_TRUE(j["groups"][0]["devices"][0]["compute_limit_percent"].is_null());
  EXPECT_EQ(j["groups"][0]["live_members"], 0);
  const std::string text = StatusText({r});
  EXPECT_NE(text.find("0 B / unlimited"), std::string::npos) << text;
}

TEST_F(GroupReportTest, ShowsTheMeasuredComputeShare) {
  auto seg = Open(true);
  ASSERT_TRUE(seg);
  ASSERT_TRUE(seg->AttachDevice(kUuid).ok());
  seg->SetComputeLimit(0, 30);
  DeviceCompute& c = testing::RawCompute(*seg, 0);
  c.share_bp = 2975;
  c.measured_at_ns = 1;
  c.charge_ns = 2'000'000;
  c.launches = 900;
  c.waits = 880;
  c.wait_ns = 1'500'000'000;
  GroupReport r = ReadGroupReport(*seg, MonotonicNs());
  EXPECT_DOUBLE_EQ(r.devices[0].compute_share_percent, 29.75);
  const nlohmann::json status = StatusJson({r});
  const auto& d = status["groups"][0]["devices"][0];
  EXPECT_DOUBLE_EQ(d["compute_share_percent"].get<double>(), 29.75);
  EXPECT_EQ(d["launch_charge_ns"], 2'000'000);
  EXPECT_EQ(d["launches"], 900);
  EXPECT_EQ(d["throttled_launches"], 880);
  EXPECT_DOUBLE_EQ(d["throttled_seconds"].get<double>(), 1.5);
  const std::string text = StatusText({r});
  EXPECT_NE(text.find("30% (29.8% used)"), std::string::npos) << text;
}

TEST_F(GroupReportTest, AShareNeverMeasuredIsNull) {
  auto seg = Open(true);
  ASSERT_TRUE(seg);
  ASSERT_TRUE(seg->AttachDevice(kUuid).ok());
  const nlohmann::json status = StatusJson({ReadGroupReport(*seg, MonotonicNs())});
  const auto& d = status["groups"][0]["devices"][0];
  EXPECT_TRUE(d["compute_share_percent"].is_null());
  EXPECT_TRUE(d["launch_charge_ns"].is_null());
}

TEST_F(GroupReportTest, AGroupNobodyIsAttachedToShowsHowLongItHasBeenIdle) {
  int64_t last_alive = 0;
  {
    auto member = Open(true);
    ASSERT_TRUE(member);
    ASSERT_TRUE(member->AttachDevice(kUuid).ok());
    last_alive = member->LastAliveNs();
  }
  auto reader = Open(false);
  ASSERT_TRUE(reader);
  GroupReport r = ReadGroupReport(*reader, last_alive + 754'000'000'000);
  EXPECT_FALSE(r.live);
  EXPECT_EQ(r.idle_ns, 754'000'000'000);
  const nlohmann::json j = StatusJson({r});
  EXPECT_EQ(j["groups"][0]["live"], false);
  EXPECT_EQ(j["groups"][0]["idle_seconds"], 754);
  const std::string text = StatusText({r});
  EXPECT_NE(text.find("none, idle 12m"), std::string::npos) << text;
}

// A member stopped or dead inside the group's ledger lock was evicted: the
// status says so (in JSON always, in text once it happened).
TEST_F(GroupReportTest, CountsMembersEvictedFromTheLedgerLock) {
  auto member = Open(true);
  ASSERT_TRUE(member);
  ASSERT_TRUE(member->AttachDevice(kUuid).ok());
  EXPECT_EQ(StatusJson({ReadGroupReport(*member, MonotonicNs())})["groups"][0]["ledger_evictions"],
            0);
  EXPECT_EQ(StatusText({ReadGroupReport(*member, MonotonicNs())}).find("ledger lock"),
            std::string::npos);
  ASSERT_TRUE(testing::EvictADeadLedgerHolder(*member, dir_, "g1"));
  auto reader = Open(false);
  ASSERT_TRUE(reader);
  const GroupReport r = ReadGroupReport(*reader, MonotonicNs());
  EXPECT_EQ(r.ledger_evictions, 1u);
  EXPECT_EQ(StatusJson({r})["groups"][0]["ledger_evictions"], 1);
  const std::string text = StatusText({r});
  EXPECT_NE(text.find("ledger lock: 1 holder(s) evicted"), std::string::npos) << text;
}

TEST(IdleText, PicksAReadableUnit) {
  constexpr int64_t kS = 1'000'000'000;
  EXPECT_EQ(IdleText(45 * kS), "45s");
  EXPECT_EQ(IdleText(119 * kS), "119s");
  EXPECT_EQ(IdleText(kS * 12 * 60), "12m");
  EXPECT_EQ(IdleText(kS * 5 * 3600), "5h");
  EXPECT_EQ(IdleText(kS * 3 * 86400), "3d");
}

TEST(StatusText, NoGroups) {
  EXPECT_EQ(StatusText({}), "no groups\n");
  EXPECT_EQ(StatusJson({}).dump(), R"({"daemon":null,"groups":[]})");  // daemon: not asked
}

TEST(ShortUuid, FirstGroup) {
  EXPECT_EQ(ShortUuid("GPU-3430e1f2-1111-2222"), "GPU-3430e1f2");
  EXPECT_EQ(ShortUuid("GPU-3430e1f2"), "GPU-3430e1f2");
  EXPECT_EQ(ShortUuid("MIG-abcd-ef"), "MIG-abcd");
}

}  // namespace
}  // namespace gpuslice::cli
