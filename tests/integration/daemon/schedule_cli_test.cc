// `gpuslice group set --request/--limit/--priority/--weight`, `group pause`
// and `group resume` against the real gpusliced on a private simulated node
// of two GPUs (issue 13; docs/scheduling.md "Scheduling"): what the daemon holds
// after each command, the 409 of an overcommit and the 400 of a request
// above the limit as exit codes with the daemon's message, the admin-only
// rule, and the schedule and paused flag kept across a daemon restart.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_cli_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::WaitFor;
using namespace std::chrono_literals;

using ScheduleCliTest = testing::DaemonCliTest;

TEST_F(ScheduleCliTest, GroupSetRequestIsHeldAndAnOvercommitExits3WithTheTotal) {
  StartDaemon();
  Result set = RunCli({"group", "set", "train", "--request", "30", "--limit", "60", "--priority",
                       "latency", "--weight", "2"});
  ASSERT_EQ(set.code, 0) << set.err;
  // `group set` prints the group as `group show` does: its schedule per GPU.
  EXPECT_NE(set.out.find("REQUEST LIMIT PRIORITY WEIGHT GRANT"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("30%     60%   latency  2"), std::string::npos) << set.out;
  json g = Get("/v1/groups/train");
  EXPECT_EQ(g["schedule"]["all"], json::parse(R"({"request":30,"priority":"latency","weight":2})"));
  EXPECT_EQ(g["limits"]["all"]["compute_percent"], 60);  // --limit is the compute limit
  for (const json& gpu : g["gpus"]) {
    EXPECT_EQ(gpu["schedule"]["request"], 30) << gpu.dump();
    EXPECT_EQ(gpu["schedule"]["limit"], 60) << gpu.dump();
  }

  // One GPU only: the other keeps its request, the weight and priority stay.
  Result one = RunCli({"group", "set", "train", "--gpu", "1", "--request", "50"});
  ASSERT_EQ(one.code, 0) << one.err;
  g = Get("/v1/groups/train");
  EXPECT_EQ(g["gpus"][0]["schedule"]["request"], 30);
  EXPECT_EQ(g["gpus"][1]["schedule"]["request"], 50);
  EXPECT_EQ(g["gpus"][1]["schedule"]["weight"], 2);

  // 50 requested on GPU 1: another group asking 60 there is refused (409).
  Result over = RunCli({"group", "set", "eval", "--request", "60"});
  EXPECT_EQ(over.code, 3) << over.out << over.err;
  EXPECT_NE(over.err.find("group set eval: requests on GPU GPU-"), std::string::npos) << over.err;
  EXPECT_NE(over.err.find("would sum to 110% (now 50% requested"), std::string::npos) << over.err;
  EXPECT_TRUE(Get("/v1/groups/eval").contains("error"));  // not created
  Result fits = RunCli({"group", "set", "eval", "--request", "50"});
  EXPECT_EQ(fits.code, 0) << fits.err;

  // A request above the group's limit: the daemon's 400, exit 4.
  Result above = RunCli({"group", "set", "train", "--request", "70"});
  EXPECT_EQ(above.code, 4) << above.out << above.err;
  EXPECT_NE(above.err.find("above its compute limit"), std::string::npos) << above.err;
  // Bad values never reach the daemon (exit 2).
  EXPECT_EQ(RunCli({"group", "set", "train", "--request", "101"}).code, 2);
  EXPECT_EQ(RunCli({"group", "set", "train", "--priority", "urgent"}).code, 2);
  EXPECT_EQ(RunCli({"group", "set", "train", "--weight", "0"}).code, 2);
  EXPECT_EQ(RunCli({"group", "set", "train", "--limit", "50", "--compute", "40"}).code, 2);
  EXPECT_EQ(RunCli({"group", "set", "train", "--gpu", "7", "--request", "5"}).code, 2);
  EXPECT_EQ(Get("/v1/groups/train")["gpus"][0]["schedule"]["request"], 30);
}

TEST_F(ScheduleCliTest, PauseAndResumeAreHeldAcrossARestartAndAdminsOnly) {
  StartDaemon();
  ASSERT_EQ(RunCli({"group", "set", "train", "--request", "20"}).code, 0);
  Result pause = RunCli({"group", "pause", "train"});
  ASSERT_EQ(pause.code, 0) << pause.err;
  EXPECT_EQ(pause.out, "group train paused\n");
  EXPECT_EQ(Get("/v1/groups/train")["paused"], true);
  Result show = RunCli({"group", "show", "train"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("0 member(s), PAUSED"), std::string::npos) << show.out;

  // The checkpoint keeps the schedule and the flag.
  StopDaemon();
  StartDaemon();
  json g = Get("/v1/groups/train");
  EXPECT_EQ(g["paused"], true) << g.dump();
  EXPECT_EQ(g["gpus"][1]["schedule"]["request"], 20) << g.dump();
  EXPECT_EQ(g["gpus"][1]["schedule"]["paused"], true) << g.dump();

  if (geteuid() == 0) {  // another user may neither resume nor change it (403, exit 1)
    Result other = RunCli({"group", "resume", "train"}, /*nobody=*/true);
    EXPECT_EQ(other.code, 1) << other.out << other.err;
    EXPECT_NE(other.err.find("uid 65534 may not change settings"), std::string::npos) << other.err;
    EXPECT_EQ(RunCli({"group", "set", "train", "--request", "10"}, /*nobody=*/true).code, 1);
    EXPECT_EQ(Get("/v1/groups/train")["paused"], true);
    EXPECT_EQ(Get("/v1/groups/train")["gpus"][0]["schedule"]["request"], 20);
  }
  Result resume = RunCli({"group", "resume", "train", "--json"});
  ASSERT_EQ(resume.code, 0) << resume.err;
  EXPECT_EQ(json::parse(resume.out), json::parse(R"({"group":"train","paused":false})"));
  EXPECT_EQ(Get("/v1/groups/train")["paused"], false);
  Result missing = RunCli({"group", "pause", "nobody-here"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no group \"nobody-here\""), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace gpuslice
