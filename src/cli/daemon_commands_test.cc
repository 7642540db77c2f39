// The daemon commands (gpu, tenants, group, status, mps) through the one
// client on a fake transport: what they send, what they print, how they end.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/fake_daemon_transport.h"
#include "cli/gpu_commands.h"
#include "cli/mps_command.h"
#include "cli/registry_commands.h"
#include "cli/status_command.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;

// A fake daemon behind every client the connector gives: answers by
// "METHOD target", records the --socket flag each command asked for.
struct FakeNode {
  std::map<std::string, HttpReply> answers;
  std::shared_ptr<FakeDaemonTransport> transport = std::make_shared<FakeDaemonTransport>(
      [this](const std::string& method, const std::string& target,
             const std::string&) -> StatusOr<HttpReply> {
        auto it = answers.find(method + " " + target);
        if (it == answers.end()) {
          return HttpReply{404, {}, R"({"error": {"message": "no such endpoint"}})"};
        }
        return it->second;
      });
  std::vector<std::string> sockets;
  DaemonConnector Connector() {
    return [this](const std::string& socket_flag, std::chrono::milliseconds) {
      sockets.push_back(socket_flag);
      return DaemonClient(transport);
    };
  }
};

HttpReply Ok(const json& body) { return HttpReply{200, {}, body.dump()}; }

// Runs `line` through an app with the daemon commands; its stdout.
std::string RunCli(FakeNode& node, const std::string& line) {
  CLI::App app("gpuslice");
  AddGpuCommands(app, node.Connector());
  AddRegistryCommands(app, node.Connector());
  AddStatusCommand(app, node.Connector());
  ::testing::internal::CaptureStdout();
  app.parse(line, /*program_name_included=*/false);
  fflush(stdout);
  return ::testing::internal::GetCapturedStdout();
}

json Group(const std::string& id, int compute) {
  return json{{"id", id},
              {"owner_uid", 0},
              {"tier", "shared"},
              {"paused", false},
              {"members", json::array()},
              {"limits", {{"all", {{"compute_percent", compute}}}}},
              {"gpus", json::array()}};
}

TEST(DaemonCommandsTest, GroupShowAsksTheSocketItIsGiven) {
  FakeNode node;
  node.answers["GET /v1/groups/train"] = Ok(Group("train", 40));
  const std::string out = RunCli(node, "group show train --json --socket /elsewhere.sock");
  EXPECT_EQ(json::parse(out)["limits"]["all"]["compute_percent"], 40) << out;
  EXPECT_EQ(node.transport->requests(), std::vector<std::string>{"GET /v1/groups/train"});
  EXPECT_EQ(node.sockets, std::vector<std::string>{"/elsewhere.sock"});
}

TEST(DaemonCommandsTest, GroupSetKeepsTheOtherLimitsAndPutsTheNewOne) {
  FakeNode node;
  json current = Group("train", 40);
  current["limits"]["all"]["memory_bytes"] = 1024;
  node.answers["GET /v1/groups/train"] = Ok(current);
  json changed = Group("train", 30);
  node.answers["PUT /v1/groups/train"] = Ok(changed);
  RunCli(node, "group set train --compute 30");
  const auto requests = node.transport->requests();
  ASSERT_GE(requests.size(), 2u);
  EXPECT_EQ(requests[0], "GET /v1/groups/train");
  EXPECT_EQ(requests[1], "PUT /v1/groups/train");
  const json put = json::parse(node.transport->bodies()[1]);
  EXPECT_EQ(put["limits"]["all"]["compute_percent"], 30) << put.dump();
  EXPECT_EQ(put["limits"]["all"]["memory_bytes"], 1024) << put.dump();
  EXPECT_TRUE(node.sockets[0].empty());  // no --socket: the default
}

TEST(DaemonCommandsTest, GpuListPrintsTheDaemonsJson) {
  FakeNode node;
  node.answers["GET /v1/gpus"] = Ok({{"gpus", json::array({{{"index", 0}, {"uuid", "GPU-a"}}})}});
  const std::string out = RunCli(node, "gpu list --json");
  EXPECT_EQ(json::parse(out)["gpus"][0]["uuid"], "GPU-a") << out;
}

// A GPU of GET /v1/gpus as `gpu list` reads it, with `features`.
json ListedGpu(int index, const json& features) {
  return json{{"index", index},
              {"uuid", "GPU-" + std::to_string(index)},
              {"name", "NVIDIA H100 80GB HBM3"},
              {"memory", {{"used_bytes", 0}, {"total_bytes", 85899345920}}},
              {"utilization", {{"gpu_percent", 0}}},
              {"power", {{"draw_watts", 70.0}, {"limit_watts", 700.0}}},
              {"clocks", {{"locked_gpu", nullptr}}},
              {"persistence", false},
              {"compute_mode", "DEFAULT"},
              {"mps", "off"},
              {"features", features}};
}

// `gpu list` names what holds memory on each GPU's node: the driver only
// where it has the per-cgroup limits API, cgroup v2 and no MIG.
TEST(DaemonCommandsTest, GpuListSaysWhereTheDriversMemoryLimitsApply) {
  auto gpu = [](int index, const std::string& driver, bool api, bool cgroup_v2, bool mig) {
    return ListedGpu(index,
                     {{"driver_version", driver},
                      {"memory_limits", api},
                      {"cgroup_v2", cgroup_v2},
                      {"mig", mig},
                      {"mps", {{"available", true}, {"protocol", api ? 3 : 2}, {"reason", ""}}}});
  };
  FakeNode node;
  node.answers["GET /v1/gpus"] =
      Ok({{"gpus",
           json::array({gpu(0, "615.10", true, true, false), gpu(1, "615.10", true, true, true),
                        gpu(2, "615.10", true, false, false),
                        gpu(3, "580.65.06", false, true, false)})}});
  const std::string out = RunCli(node, "gpu list");
  std::map<int, std::string> lines;  // the features table's line of each GPU
  std::istringstream in(out.substr(out.find("MEMORY LIMITS")));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && isdigit(static_cast<unsigned char>(line[0]))) lines[line[0] - '0'] = line;
  }
  ASSERT_EQ(lines.size(), 4u) << out;
  EXPECT_NE(lines[0].find(" driver "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" v3"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("limiter (MIG)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("limiter (no cgroup v2)"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("limiter (pre-r615)"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("580.65.06"), std::string::npos) << lines[3];
  for (int i = 1; i < 4; ++i) EXPECT_EQ(lines[i].find(" driver "), std::string::npos) << lines[i];
}

// `gpu list` shows the instances of a GPU in MIG mode, with the group each
// was made for.
TEST(DaemonCommandsTest, GpuListShowsMigInstancesAndTheirOwners) {
  const json gpu = ListedGpu(0, {{"mig", true}});
  auto instance = [](int gi, const std::string& profile, int start, const json& owner) {
    return json{{"gpu_instance_id", gi},
                {"profile", profile},
                {"placement", {{"start", start}, {"size", 2}}},
                {"memory_bytes", 21474836480},
                {"memory_used_bytes", gi == 1 ? json(1073741824) : json()},
                {"uuid", "MIG-" + std::to_string(gi)},
                {"owner", owner}};
  };
  FakeNode node;
  node.answers["GET /v1/gpus"] = Ok({{"gpus", json::array({gpu})}});
  node.answers["GET /v1/mig"] =
      Ok({{"gpus",
           json::array({{{"index", 0},
                         {"uuid", "GPU-0"},
                         {"mode", "enabled"},
                         {"instances", json::array({instance(1, "1g.20gb", 0, "group/train"),
                                                    instance(2, "2g.20gb", 2, nullptr)})}}})}});
  const std::string out = RunCli(node, "gpu list");
  const size_t table = out.find("MIG DEVICE");
  ASSERT_NE(table, std::string::npos) << out;
  EXPECT_NE(out.find("1g.20gb   0+2       1024MiB/20480MiB     MIG-1", table), std::string::npos)
      << out;
  EXPECT_NE(out.find("-/20480MiB", table), std::string::npos) << "no reading: " << out;
  EXPECT_NE(out.find("group/train", table), std::string::npos) << out;
  EXPECT_NE(out.find("MIG-2                                        -", table), std::string::npos)
      << out;
  EXPECT_EQ(json::parse(RunCli(node, "gpu list --json"))["mig"][0]["instances"].size(), 2u);
}

TEST(DaemonCommandsTest, StatusShowsTheRegistryGroupsFromTheClient) {
  FakeNode node;
  node.answers["GET /v1/tenants"] = Ok({{"tenants", json::array()}});
  node.answers["GET /v1/groups"] = Ok({{"groups", json::array({Group("reg-only", 25)})}});
  const std::string dir = ::testing::TempDir() + "/gs-status-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  // --all: a group without tenants is idle, hidden otherwise.
  const std::string out = RunCli(node, "status --json --all --shm-dir " + dir);
  std::filesystem::remove_all(dir);
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["daemon"]["answered"], true) << out;
  EXPECT_EQ(node.transport->requests(),
            (std::vector<std::string>{"GET /v1/tenants", "GET /v1/groups"}));
  EXPECT_NE(out.find("reg-only"), std::string::npos) << out;
}

TEST(DaemonCommandsTest, StatusWithoutAnAnswerSaysWhyAndShowsSegments) {
  FakeNode node;
  node.transport = std::make_shared<FakeDaemonTransport>();  // nothing answers
  const std::string dir = ::testing::TempDir() + "/gs-status-none-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string out = RunCli(node, "status --json --shm-dir " + dir);
  std::filesystem::remove_all(dir);
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["daemon"]["answered"], false) << out;
}

using DaemonCommandsDeathTest = ::testing::Test;

TEST(DaemonCommandsDeathTest, ARefusalExitsWithTheDaemonsMessage) {
  FakeNode node;
  node.answers["GET /v1/tenants"] =
      HttpReply{403, {}, R"({"error": {"message": "reading tenants needs root"}})"};
  EXPECT_EXIT(RunCli(node, "tenants"), ::testing::ExitedWithCode(1),
              "gpuslice: reading tenants needs root");
}

TEST(DaemonCommandsDeathTest, NoDaemonExitsNamingIt) {
  FakeNode node;
  node.transport = std::make_shared<FakeDaemonTransport>();
  EXPECT_EXIT(RunCli(node, "gpu list"), ::testing::ExitedWithCode(1),
              "cannot reach gpusliced at /fake.sock");
}

TEST(DaemonCommandsTest, MpsTakesItsSocketFlagToTheClient) {
  FakeNode node;
  node.answers["GET /v1/mps"] =
      Ok({{"available", false}, {"reason", "no MPS here"}, {"gpus", json::array()}});
  node.answers["GET /v1/mps/tenants"] = Ok({{"tenants", json::array()}});
  std::ostringstream out, err;
  int code = 0;
  CLI::App app("gpuslice");
  AddMpsCommands(app, node.Connector(), MpsCliIo{&out, &err, [&](int c) { code = c; }});
  app.parse("mps status --json --socket /mps.sock", false);
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_EQ(node.sockets, std::vector<std::string>{"/mps.sock"});
  EXPECT_EQ(node.transport->requests().at(0), "GET /v1/mps");
  EXPECT_NE(out.str().find("no MPS here"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace gpuslice::cli
