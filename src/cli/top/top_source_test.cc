#include "cli/top/top_source.h"

#include <gtest/gtest.h>

#include <map>

#include "cli/fake_daemon_transport.h"

namespace gpuslice::cli::top {
namespace {

using json = nlohmann::json;

// The daemon's answers as docs/api.md shows them (two GPUs; group "train"
// with the scheduler's fields, group "nb" without: an older daemon).
json GpusBody() {
  return json::parse(R"({"gpus": [
    {"index": 0, "uuid": "GPU-aaaa", "name": "Sim H100",
     "memory": {"total_bytes": 8589934592, "used_bytes": 1073741824},
     "utilization": {"gpu_percent": 73}, "power": {"draw_watts": 250.5, "limit_watts": 700}},
    {"index": 1, "uuid": "GPU-bbbb", "name": "Sim H100"}]})");
}
json GroupsBody() {
  return json::parse(R"({"groups": [
    {"id": "train", "paused": false, "members": [100, 101],
     "gpus": [{"index": 0, "uuid": "GPU-aaaa", "memory_used_bytes": 1048576, "share": 0.45,
               "limit": {"compute_percent": 60, "memory_bytes": 2097152},
               "schedule": {"request": 30, "limit": 60, "priority": "batch", "weight": 1,
                            "paused": false},
               "grant_percent": 45.5},
              {"index": 1, "uuid": "GPU-bbbb", "memory_used_bytes": 0, "share": 0,
               "limit": {"compute_percent": 60}}]},
    {"id": "nb", "members": [],
     "gpus": [{"index": 0, "uuid": "GPU-aaaa", "memory_used_bytes": 0, "share": 0,
               "limit": {}},
              {"index": 1, "uuid": "GPU-bbbb", "memory_used_bytes": 0, "share": 0,
               "limit": {}}]}]})");
}
json TenantsBody() {
  return json::parse(R"({"tenants": [
    {"host_pid": 100, "group": "train", "pod": "web-0", "namespace": "prod",
     "gpus": [{"index": 0, "memory_used_bytes": 1048576, "share": 0.25}]},
    {"host_pid": 101, "group": "train", "container": "sidecar", "gpus": []}]})");
}

// A fake daemon: answers from `bodies` by target while `up`.
struct FakeDaemon {
  bool up = true;
  std::map<std::string, json> bodies = {
      {"/v1/gpus", GpusBody()}, {"/v1/groups", GroupsBody()}, {"/v1/tenants", TenantsBody()}};
  std::vector<std::string> calls;
  DaemonClient Fetch() {
    return FakeClient([this](const std::string& method, const std::string& target,
                             const std::string&) -> StatusOr<HttpReply> {
      calls.push_back(method + " " + target);
      if (!up) return Unavailable("cannot connect to /fake.sock");
      auto it = bodies.find(target);
      if (it == bodies.end()) return HttpReply{404, {}, R"({"error":{"message":"no"}})"};
      return HttpReply{200, {}, it->second.dump()};
    });
  }
};

// A segment of "train" on GPU-aaaa (measured 41%, paused, throttled 7) and
// one of "solo", which only the segments know.
std::vector<GroupSnapshot> Segments() {
  GroupSnapshot train;
  train.group = "train";
  train.paused = true;
  train.devices.push_back({.index = 0,
                           .uuid = "GPU-aaaa",
                           .memory_used = 3 << 20,
                           .memory_limit = 4 << 20,
                           .memory_peak = 0,
                           .alloc_failures = 0,
                           .compute_limit = 60,
                           .grant_bp = 0,
                           .burst_ns = 0,
                           .share_bp = 4100,
                           .charge_ns = 0,
                           .launches = 10,
                           .throttled = 7,
                           .throttled_ns = 0});
  train.members.push_back({0, 9, "python", {3 << 20}});
  GroupSnapshot solo;
  solo.group = "solo";
  solo.devices.push_back({.index = 0,
                          .uuid = "GPU-cccc",
                          .memory_used = 1 << 20,
                          .memory_limit = kUnlimitedBytes,
                          .memory_peak = 0,
                          .alloc_failures = 0,
                          .compute_limit = kUnlimitedPercent,
                          .grant_bp = 2500,
                          .burst_ns = 0,
                          .share_bp = -1,
                          .charge_ns = 0,
                          .launches = 0,
                          .throttled = 0,
                          .throttled_ns = 0});
  solo.members.push_back({0, 42, "bench", {1 << 20}});
  solo.members.push_back({1, 43, "bench", {0}});
  return {train, solo};
}

const GroupOnGpu* Find(const Sample& s, const std::string& group, const std::string& uuid) {
  for (const GroupOnGpu& g : s.groups) {
    if (g.group == group && g.uuid == uuid) return &g;
  }
  return nullptr;
}

TEST(TopSourceTest, ParsesTheDaemonsGpusGroupsAndTenants) {
  const auto gpus = ParseGpus(GpusBody());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "Sim H100");
  EXPECT_EQ(gpus[0].util_percent, 73);
  EXPECT_EQ(gpus[0].memory_total, 8589934592u);
  EXPECT_EQ(gpus[0].power_watts, 250.5);
  EXPECT_FALSE(gpus[1].util_percent);

  const auto groups = ParseGroups(GroupsBody(), gpus);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].group, "train");
  EXPECT_EQ(groups[0].compute_limit, 60u);
  EXPECT_EQ(groups[0].request_percent, 30);
  EXPECT_EQ(groups[0].grant_percent, 45.5);
  EXPECT_DOUBLE_EQ(*groups[0].share_percent, 45);
  EXPECT_EQ(groups[0].memory_limit, 2097152u);
  EXPECT_EQ(groups[0].members, 2);
  // An older daemon: no schedule, no grant.
  EXPECT_FALSE(groups[2].request_percent);
  EXPECT_FALSE(groups[2].grant_percent);
  EXPECT_FALSE(groups[2].compute_limit);

  const auto tenants = ParseTenants(TenantsBody());
  ASSERT_EQ(tenants.size(), 2u);
  EXPECT_EQ(tenants[0].name, "prod/web-0");
  EXPECT_DOUBLE_EQ(*tenants[0].share_percent, 25);
  EXPECT_EQ(tenants[1].name, "sidecar");
  EXPECT_FALSE(tenants[1].share_percent);
}

TEST(TopSourceTest, MigInstancesJoinTheirGpu) {
  auto gpus = ParseGpus(GpusBody());
  const json mig = json::parse(R"([
    {"uuid": "GPU-nope", "mode": "enabled", "instances": [{"profile": "7g.80gb"}]},
    {"uuid": ")" + gpus[0].uuid +
                               R"(", "mode": "enabled", "instances": [
      {"profile": "1g.20gb", "owner": "group/train", "memory_used_bytes": 5,
       "memory_bytes": 21474836480},
      {"profile": "2g.20gb", "owner": null, "memory_used_bytes": null, "memory_bytes": 1}]},
    {"uuid": ")" + gpus[1].uuid +
                               R"(", "mode": "disabled"}])");
  AddMigInstances(mig, gpus);
  ASSERT_EQ(gpus[0].mig.size(), 2u);
  EXPECT_EQ(gpus[0].mig[0].profile, "1g.20gb");
  EXPECT_EQ(gpus[0].mig[0].owner, "group/train");
  EXPECT_EQ(gpus[0].mig[0].memory_used, 5u);
  EXPECT_EQ(gpus[0].mig[0].memory_total, 21474836480u);
  EXPECT_EQ(gpus[0].mig[1].owner, "");
  EXPECT_FALSE(gpus[0].mig[1].memory_used);
  EXPECT_TRUE(gpus[1].mig.empty());
}

TEST(TopSourceTest, AGroupTheDaemonPausedIsPaused) {
  json groups = GroupsBody();
  groups["groups"][1]["paused"] = true;                         // nb, as a whole
  groups["groups"][0]["gpus"][0]["schedule"]["paused"] = true;  // train, per GPU
  const auto rows = ParseGroups(groups, ParseGpus(GpusBody()));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(rows[0].paused);
  EXPECT_FALSE(rows[1].paused);
  EXPECT_TRUE(rows[2].paused);
  EXPECT_TRUE(rows[3].paused);
  TopModel m;
  Sample s;
  s.groups = rows;
  m.Update(s);
  EXPECT_EQ(m.Rows(SortKey::kGroup, "nb")[0].state, GroupState::kPaused);
}

TEST(TopSourceTest, MergesTheSegmentsIntoTheDaemonsView) {
  FakeDaemon daemon;
  const DaemonClient fetch = daemon.Fetch();
  const Sample s = Collect(&fetch, "/fake.sock", Segments, 7);
  EXPECT_TRUE(s.daemon_answered);
  EXPECT_EQ(s.at_ns, 7);
  const GroupOnGpu* train = Find(s, "train", "GPU-aaaa");
  ASSERT_NE(train, nullptr);
  EXPECT_DOUBLE_EQ(*train->share_percent, 41);  // the segment's measurement
  EXPECT_TRUE(train->paused);
  EXPECT_EQ(train->throttled, 7u);
  EXPECT_EQ(train->memory_used, 3u << 20);
  EXPECT_EQ(train->memory_limit, 2097152u);  // the daemon's limit wins
  EXPECT_EQ(train->compute_limit, 60u);
  EXPECT_EQ(train->request_percent, 30);
  EXPECT_EQ(train->grant_percent, 45.5);  // the daemon's
  EXPECT_EQ(train->members, 2);
  // A group on a GPU it does not use is left out; an unused group keeps one row.
  EXPECT_EQ(Find(s, "train", "GPU-bbbb"), nullptr);
  EXPECT_NE(Find(s, "nb", "GPU-aaaa"), nullptr);
  EXPECT_EQ(Find(s, "nb", "GPU-bbbb"), nullptr);
  // Only a segment has it: added, with its GPU and its members as tenants.
  const GroupOnGpu* solo = Find(s, "solo", "GPU-cccc");
  ASSERT_NE(solo, nullptr);
  EXPECT_EQ(solo->gpu_index, -1);
  EXPECT_EQ(solo->grant_percent, 25);
  EXPECT_FALSE(solo->compute_limit);
  EXPECT_EQ(solo->members, 2);
  EXPECT_EQ(s.gpus.size(), 3u);
  int solo_tenants = 0;
  int train_tenants = 0;
  for (const TenantInfo& t : s.tenants) {
    solo_tenants += t.group == "solo";
    train_tenants += t.group == "train";
  }
  EXPECT_EQ(solo_tenants, 2);
  EXPECT_EQ(train_tenants, 2);  // the daemon's, not the segment's member again
}

TEST(TopSourceTest, FallsBackToTheSegmentsWhenTheDaemonGoesAway) {
  FakeDaemon daemon;
  const DaemonClient fetch = daemon.Fetch();
  TopModel model;
  model.Update(Collect(&fetch, "/fake.sock", Segments, 1));
  EXPECT_EQ(model.sample().gpus.size(), 3u);
  EXPECT_NE(model.sample().gpus[0].name, "");

  daemon.up = false;
  model.Update(Collect(&fetch, "/fake.sock", Segments, 2));
  const Sample& s = model.sample();
  EXPECT_FALSE(s.daemon_answered);
  EXPECT_EQ(s.daemon_error, "cannot connect to /fake.sock");
  EXPECT_TRUE(model.daemon_lost());
  EXPECT_NE(model.SourceLine().find("stopped answering"), std::string::npos);
  // What the segments say is still there, and its history goes on.
  const auto rows = model.Rows(SortKey::kGroup, "");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].group.group, "solo");
  EXPECT_EQ(rows[1].group.group, "train");
  EXPECT_EQ(rows[1].history, (std::vector<double>{41, 41}));
  EXPECT_EQ(rows[1].state, GroupState::kPaused);
  EXPECT_FALSE(rows[1].group.request_percent);     // only the daemon knows it
  EXPECT_EQ(model.TenantsOf("train").size(), 1u);  // the segment's member now
}

TEST(TopSourceTest, ADaemonAnsweringAnErrorIsNotADaemonAnswer) {
  FakeDaemon daemon;
  daemon.bodies.erase("/v1/tenants");  // 404
  const DaemonClient fetch = daemon.Fetch();
  const Sample s = Collect(&fetch, "/fake.sock", Segments, 1);
  EXPECT_FALSE(s.daemon_answered);
  EXPECT_NE(s.daemon_error.find("HTTP 404"), std::string::npos) << s.daemon_error;
  EXPECT_EQ(s.groups.size(), 2u);
}

TEST(TopSourceTest, ASegmentWithoutMembersUsesNoShare) {
  auto segments = Segments();
  segments[0].members.clear();  // train: its last measurement (41%) is stale
  Sample s;
  MergeSegments(segments, s);
  const GroupOnGpu* train = Find(s, "train", "GPU-aaaa");
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->share_percent, 0.0);
  EXPECT_EQ(train->memory_limit, 4u << 20);  // no daemon: the segment's limits
  EXPECT_EQ(train->members, 0);
  EXPECT_FALSE(Find(s, "solo", "GPU-cccc")->share_percent);  // members, never measured
}

TEST(TopSourceTest, NoDaemonAsksNothing) {
  const Sample s = Collect(nullptr, "", Segments, 1);
  EXPECT_FALSE(s.daemon_used);
  EXPECT_EQ(s.groups.size(), 2u);
  TopModel m;
  m.Update(s);
  EXPECT_EQ(m.SourceLine(), "source: group segments (--no-daemon)");
}

}  // namespace
}  // namespace gpuslice::cli::top
