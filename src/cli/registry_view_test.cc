#include "cli/registry_view.h"

#include <gtest/gtest.h>

#include "cli/group_report.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr char kGpu0[] = "GPU-aaaa1111-0000";
constexpr char kGpu1[] = "GPU-bbbb2222-0000";

// GET /v1/tenants as the daemon answers it (fields it sends that the CLI
// does not show are left out).
json TenantsBody() {
  return json::parse(R"({"tenants":[
    {"host_pid":4242,"container_pid":1,"group":"train","pod":"web-0","namespace":"prod",
     "container":"app","tier":"mps",
     "gpus":[{"index":0,"uuid":"GPU-aaaa1111-0000","memory_used_bytes":1073741824,"share":0.25,
              "limit":{"memory_bytes":null,"compute_percent":null}},
             {"index":1,"uuid":"GPU-bbbb2222-0000","memory_used_bytes":0,"share":null,
              "limit":{"memory_bytes":null,"compute_percent":null}}]},
    {"host_pid":77,"container_pid":77,"group":"solo","pod":"","namespace":"","container":"",
     "tier":"shared","gpus":[]}]})");
}

TEST(TenantsText, OneLinePerTenantWithPodMemoryAndShareByGpu) {
  const std::string text = TenantsText(TenantsBody());
  EXPECT_NE(text.find("HOST PID"), std::string::npos);
  EXPECT_NE(text.find("CONTAINER PID"), std::string::npos);
  const size_t first = text.find("\n4242");
  ASSERT_NE(first, std::string::npos) << text;
  const std::string line = text.substr(first + 1, text.find('\n', first + 1) - first - 1);
  EXPECT_NE(line.find(" 1 "), std::string::npos) << line;  // the container pid
  EXPECT_NE(line.find("train"), std::string::npos) << line;
  EXPECT_NE(line.find("prod/web-0"), std::string::npos) << line;
  EXPECT_NE(line.find("app"), std::string::npos) << line;
  EXPECT_NE(line.find("mps"), std::string::npos) << line;
  EXPECT_NE(line.find("0:1.00GiB 1:0B"), std::string::npos) << line;
  EXPECT_NE(line.find("0:25% 1:-"), std::string::npos) << line;
  const size_t second = text.find("\n77 ");
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_NE(text.find(" - ", second), std::string::npos);  // no pod, no container
}

TEST(TenantsText, EmptyAndMalformedAnswersStillPrint) {
  EXPECT_EQ(TenantsText(json::parse(R"({"tenants":[]})")), "no tenants\n");
  EXPECT_EQ(TenantsText(json::parse(R"({"oops":1})")), "no tenants\n");
  const std::string odd = TenantsText(json::parse(R"({"tenants":[{"host_pid":"x","gpus":3}]})"));
  EXPECT_NE(odd.find("\n0 "), std::string::npos) << odd;
}

TEST(GroupsText, LimitsPerGpuTierOwnerAndMembers) {
  const json groups = json::parse(R"([
    {"id":"train","tier":"shared","owner":{"uid":1000,"pod_uid":""},"members":[11,12],
     "limits":{"all":{"memory_bytes":4294967296,"compute_percent":null}},
     "gpus":[{"index":0,"uuid":"GPU-aaaa1111-0000","memory_used_bytes":536870912,"share":0.5,
              "limit":{"memory_bytes":4294967296,"compute_percent":60}},
             {"index":1,"uuid":"GPU-bbbb2222-0000","memory_used_bytes":0,"share":0,
              "limit":{"memory_bytes":null,"compute_percent":null}}]},
    {"id":"empty","tier":"mps","owner":{"uid":null,"pod_uid":""},"members":[],"gpus":[]}])");
  const std::string text = GroupsText(groups);
  EXPECT_NE(text.find("group train: tier shared, owner uid 1000, 2 member(s)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("4.00 GiB / 60%"), std::string::npos) << text;
  EXPECT_NE(text.find("512.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("unlimited / unlimited"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU-bbbb2222 "), std::string::npos) << text;
  EXPECT_NE(text.find("group empty: tier mps, owner admin, 0 member(s)"), std::string::npos)
      << text;
  EXPECT_EQ(GroupsText(json::array()), "no groups\n");
}

TEST(GroupPutBody, OneValueSetsAllAndClearsEachGpusOwn) {
  const json current = json::parse(R"({"all":{"memory_bytes":null,"compute_percent":50},
      "GPU-aaaa1111-0000":{"memory_bytes":1024,"compute_percent":null}})");
  GroupSetFlags flags;
  flags.memory = {{"", 4096}};
  auto body = GroupPutBody(current, flags, {});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ(*body, json::parse(R"({"limits":{"all":{"memory_bytes":4096,"compute_percent":50}}})"));
}

TEST(GroupPutBody, PerGpuValuesByIndexOrUuidKeepOtherLimitsAndTier) {
  const json current = json::parse(R"({"all":{"compute_percent":50}})");
  GroupSetFlags flags;
  flags.memory = {{"1", 2048}, {"aaaa1111-0000", 1024}};
  flags.tier = "mps";
  auto body = GroupPutBody(current, flags, {kGpu0, kGpu1});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ(*body, json::parse(R"({"tier":"mps","limits":{"all":{"compute_percent":50},
      "GPU-bbbb2222-0000":{"memory_bytes":2048},"GPU-aaaa1111-0000":{"memory_bytes":1024}}})"));
}

TEST(GroupPutBody, UnlimitedRemovesALimitAndEmptyEntriesGo) {
  GroupSetFlags flags;
  flags.compute = {{"", kUnlimitedPercent}};
  auto body = GroupPutBody(json::parse(R"({"all":{"compute_percent":50}})"), flags, {});
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, json::parse(R"({"limits":{}})"));
  // A new group (no current limits).
  flags.compute = {{"0", 30}};
  body = GroupPutBody(nullptr, flags, {kGpu0});
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, json::parse(R"({"limits":{"GPU-aaaa1111-0000":{"compute_percent":30}}})"));
}

TEST(GroupPutBody, RefusesUnknownGpusAndLiftingOneGpuUnderAnAllLimit) {
  GroupSetFlags flags;
  flags.memory = {{"2", 1024}};
  auto body = GroupPutBody(json::object(), flags, {kGpu0, kGpu1});
  ASSERT_FALSE(body.ok());
  EXPECT_NE(body.status().message().find("no GPU 2"), std::string::npos);
  flags.memory = {{"GPU-cccc", 1024}};
  EXPECT_FALSE(GroupPutBody(json::object(), flags, {kGpu0, kGpu1}).ok());
  flags.memory = {{"0", kUnlimitedBytes}};
  body = GroupPutBody(json::parse(R"({"all":{"memory_bytes":1024}})"), flags, {kGpu0});
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseRegistry, GroupsWithTheirTenantsByHostPid) {
  auto groups = ParseRegistry(TenantsBody(), json::parse(R"({"groups":[
      {"id":"train","tier":"mps"},{"id":"idle","tier":"shared"}]})"));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  ASSERT_EQ(groups->size(), 3u);  // idle, solo (known from its tenant only), train
  EXPECT_EQ((*groups)[0].id, "idle");
  EXPECT_TRUE((*groups)[0].tenants.empty());
  EXPECT_EQ((*groups)[1].id, "solo");
  EXPECT_EQ((*groups)[1].tier, "shared");
  const RegistryGroup& train = (*groups)[2];
  ASSERT_EQ(train.tenants.size(), 1u);
  EXPECT_EQ(train.tenants[0].host_pid, 4242);
  EXPECT_EQ(train.tenants[0].container_pid, 1);
  EXPECT_EQ(train.tenants[0].pod, "prod/web-0");
  EXPECT_FALSE(ParseRegistry(json::parse("[]"), json::parse(R"({"groups":[]})")).ok());
}

// Each GPU's enforcer of a group, as `status` shows it (GPUs where neither
// dimension has one are left out).
TEST(ParseRegistry, GroupsCarryTheirEnforcersPerGpu) {
  auto groups = ParseRegistry(json::parse(R"({"tenants":[]})"), json::parse(R"({"groups":[
      {"id":"train","tier":"shared","gpus":[
        {"index":0,"uuid":"GPU-0","enforcer":{
          "memory":{"enforcer":"driver","reason":"driver hard limit"},
          "compute":{"enforcer":"limiter","reason":"time caps"}}},
        {"index":1,"uuid":"GPU-1","enforcer":{
          "memory":{"enforcer":"none","reason":"no memory limit"},
          "compute":{"enforcer":"none","reason":"no compute limit"}}},
        {"index":2,"uuid":"GPU-2","enforcer":null}]}]})"));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  ASSERT_EQ(groups->size(), 1u);
  const RegistryGroup& train = (*groups)[0];
  ASSERT_EQ(train.enforcers.size(), 1u);
  EXPECT_EQ(train.enforcers[0].gpu, 0);
  EXPECT_EQ(train.enforcers[0].memory, "driver");
  EXPECT_EQ(EnforcerText(train.enforcers),
            "  enforcer GPU 0: memory driver (driver hard limit); compute limiter (time caps)\n");
}

TEST(ParseRegistry, AMigGroupCarriesItsInstance) {
  auto groups = ParseRegistry(json::parse(R"({"tenants":[]})"), json::parse(R"({"groups":[
      {"id":"train","tier":"mig","gpus":[],
       "mig":{"profile":"1g.20gb","uuid":"MIG-1","gpu":"GPU-0"}},
      {"id":"idle","tier":"mig","gpus":[],"mig":null}]})"));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].mig, "");  // "idle" sorts first
  EXPECT_EQ((*groups)[1].mig, "1g.20gb MIG-1 on GPU-0");
}

GroupReport Report(const std::string& group, std::vector<int32_t> pids) {
  GroupReport r{.group = group,
                .path = "/dev/shm/gpuslice/" + group,
                .devices = {},
                .members = {},
                .registry = std::nullopt};
  r.live = !pids.empty();
  for (size_t i = 0; i < pids.size(); ++i) {
    r.members.push_back({static_cast<int>(i), pids[i], "p", {}, std::nullopt});
  }
  return r;
}

TEST(MergeRegistry, MembersMatchByHostPidThenUniqueContainerPid) {
  std::vector<GroupReport> reports = {Report("train", {500, 1, 7})};
  std::vector<RegistryGroup> registry = {{"train",
                                          "shared",
                                          {{500, 500, "", "", "shared"},
                                           {9001, 1, "ns/a", "c", "shared"},
                                           {9002, 7, "ns/b", "c", "shared"},
                                           {9003, 7, "ns/c", "c", "shared"},
                                           {9004, 3, "", "", "shared"}},
                                          {},
                                          ""},
                                         {"other", "mps", {{600, 600, "", "", "mps"}}, {}, ""}};
  auto only = MergeRegistry(registry, reports);
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0].id, "other");
  const GroupReport& g = reports[0];
  ASSERT_TRUE(g.registry.has_value());
  EXPECT_EQ(g.registry->tenants.size(), 5u);
  ASSERT_TRUE(g.members[0].tenant.has_value());
  EXPECT_EQ(g.members[0].tenant->host_pid, 500);
  ASSERT_TRUE(g.members[1].tenant.has_value());
  EXPECT_EQ(g.members[1].tenant->host_pid, 9001);
  EXPECT_FALSE(g.members[2].tenant.has_value());  // pid 7 in two containers: ambiguous

  DaemonView daemon{.used = true,
                    .socket = "/s",
                    .answered = true,
                    .error = "",
                    .socket_exists = true,
                    .registry_only = only};
  json j = StatusJson(reports, daemon);
  EXPECT_EQ(j["daemon"]["answered"], true);
  EXPECT_EQ(j["groups"][0]["tier"], "shared");
  EXPECT_EQ(j["groups"][0]["members"][1]["tenant"]["host_pid"], 9001);
  EXPECT_TRUE(j["groups"][0]["members"][2]["tenant"].is_null());
  int attached = 0;
  for (const json& t : j["groups"][0]["tenants"]) attached += t["attached"].get<bool>() ? 1 : 0;
  EXPECT_EQ(attached, 2);
  EXPECT_EQ(j["registry_only_groups"][0]["group"], "other");
  EXPECT_EQ(j["registry_only_groups"][0]["tenants"][0]["host_pid"], 600);

  const std::string text = StatusText(reports, daemon);
  EXPECT_NE(text.find("tenant: host pid 9001 (pid 1 inside) pod ns/a container c"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("host pid 9004 (pid 3 inside), not attached"), std::string::npos) << text;
  EXPECT_NE(text.find("other"), std::string::npos) << text;
  EXPECT_NE(text.find("1 registered, no segment"), std::string::npos) << text;
}

TEST(MergeRegistry, WithoutADaemonTheJsonHasNoRegistryFieldsButSaysWhy) {
  std::vector<GroupReport> reports = {Report("g", {5})};
  json plain = StatusJson(reports);
  EXPECT_TRUE(plain["daemon"].is_null());
  EXPECT_FALSE(plain["groups"][0].contains("tenants"));
  EXPECT_FALSE(plain["groups"][0]["members"][0].contains("tenant"));
  DaemonView down{.used = true,
                  .socket = "/s",
                  .answered = false,
                  .error = "cannot reach gpusliced at /s",
                  .socket_exists = true,
                  .registry_only = {}};
  json j = StatusJson(reports, down);
  EXPECT_EQ(j["daemon"]["answered"], false);
  EXPECT_EQ(j["daemon"]["error"], "cannot reach gpusliced at /s");
  EXPECT_TRUE(j["groups"][0]["tenants"].is_null());
  EXPECT_NE(
      StatusText(reports, down).find("gpusliced: cannot reach gpusliced at /s (segments only)"),
      std::string::npos);
  down.socket_exists = false;  // no daemon installed: the text is as without one
  EXPECT_EQ(StatusText(reports, down), StatusText(reports));
}

TEST(GroupScheduleBody, OneValueSetsAllPerGpuValuesGoByUuidAndOtherFieldsStay) {
  const json current = json::parse(R"({"all":{"request":30,"priority":"latency"},
      "GPU-aaaa1111-0000":{"request":10,"weight":4}})");
  GroupSetFlags flags;
  flags.request = {{"", 20}};
  flags.weight = {{"1", 2}};
  EXPECT_TRUE(flags.HasSchedule());
  auto body = GroupScheduleBody(current, flags, {kGpu0, kGpu1});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  // The request for every GPU clears GPU 0's own; its weight stays.
  EXPECT_EQ(*body, json::parse(R"({"all":{"request":20,"priority":"latency"},
      "GPU-aaaa1111-0000":{"weight":4},"GPU-bbbb2222-0000":{"weight":2}})"));
  flags = GroupSetFlags{};
  flags.priority = {{"bbbb2222-0000", "batch"}};
  body = GroupScheduleBody(json(), flags, {kGpu0, kGpu1});
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, json::parse(R"({"GPU-bbbb2222-0000":{"priority":"batch"}})"));
  flags.priority = {{"5", "batch"}};
  EXPECT_EQ(GroupScheduleBody(json(), flags, {kGpu0, kGpu1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(GroupSetFlags{}.HasSchedule());
}

TEST(GroupsText, ShowsTheSchedulePerGpuAndPaused) {
  const json groups = json::parse(R"([
    {"id":"web","tier":"shared","owner":{"uid":null},"members":[],"paused":true,
     "gpus":[{"index":0,"uuid":"GPU-aaaa1111-0000","memory_used_bytes":0,
              "limit":{"memory_bytes":null,"compute_percent":60},
              "schedule":{"request":30,"limit":60,"priority":"latency","weight":2,"paused":true},
              "grant_percent":45.5},
             {"index":1,"uuid":"GPU-bbbb2222-0000","memory_used_bytes":0,
              "limit":{"memory_bytes":null,"compute_percent":null}}]}])");
  const std::string text = GroupsText(groups);
  EXPECT_NE(text.find("group web: tier shared, owner admin, 0 member(s), PAUSED\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("REQUEST LIMIT PRIORITY WEIGHT GRANT"), std::string::npos) << text;
  EXPECT_NE(text.find("30%     60%   latency  2      45.5%\n"), std::string::npos) << text;
  // An older daemon sends no schedule: dashes, not an exception.
  EXPECT_NE(text.find("-       -     -        -      -\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpuslice::cli
