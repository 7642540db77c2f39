#include "cli/mps_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/fake_daemon_transport.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

struct Request {
  std::string method, path;
  json body;
};

// Runs `gpuslice <args>` with the mps commands against canned replies.
class MpsCommandTest : public ::testing::Test {
 protected:
  // Parses and runs; the exit code (0, or what the command or CLI11 gave).
  int Run(const std::string& args) {
    CLI::App app{"test", "gpuslice"};
    app.require_subcommand(1);
    AddMpsCommands(
        app,
        FakeClient([this](const std::string& method, const std::string& path,
                          const std::string& body) -> StatusOr<HttpReply> {
          requests_.push_back({method, path, body.empty() ? json() : json::parse(body)});
          if (!reachable_) return Unavailable("connect /run/gpuslice.sock: No such file");
          auto it = replies_.find(path);
          if (it == replies_.end()) {
            return HttpReply{
                .status = 404, .headers = {}, .body = R"({"error":{"message":"no route"}})"};
          }
          return HttpReply{.status = it->second.status, .headers = {}, .body = it->second.body};
        }),
        MpsCliIo{&out_, &err_, [this](int code) { exit_code_ = code; }});
    try {
      app.parse(args, /*program_name_included=*/false);
    } catch (const CLI::ParseError& e) {
      err_ << e.what();
      return kExitUsage;
    }
    return exit_code_;
  }

  struct Canned {
    int status;
    std::string body;
  };
  std::map<std::string, Canned> replies_;  // by path
  std::vector<Request> requests_;
  bool reachable_ = true;
  std::ostringstream out_, err_;
  int exit_code_ = 0;
};

TEST_F(MpsCommandTest, AcquireSendsSettingsAndPrintsTheEnvironment) {
  replies_["/v1/mps/acquire"] = {200, json{{"tenant", "t1"},
                                           {"tier", "mps"},
                                           {"env",
                                            {{"CUDA_MPS_PIPE_DIRECTORY", "/mps/GPU-1/pipe"},
                                             {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"}}},
                                           {"gpus", json::array()}}
                                          .dump()};
  ASSERT_EQ(Run("mps acquire --tenant t1 --gpus 0 --threads 30 --pinned-memory 4G --priority 1"), 0)
      << err_.str();
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].method, "POST");
  EXPECT_EQ(requests_[0].body, (json{{"tenant", "t1"},
                                     {"gpus", "0"},
                                     {"active_thread_percentage", 30},
                                     {"pinned_memory_limit", "4G"},
                                     {"client_priority", 1}}));
  EXPECT_THAT(out_.str(), HasSubstr("tenant t1: tier mps\n"));
  EXPECT_THAT(out_.str(), HasSubstr("  CUDA_MPS_PIPE_DIRECTORY=/mps/GPU-1/pipe\n"));
}

TEST_F(MpsCommandTest, AcquireEnvPrintsExportsForEval) {
  replies_["/v1/mps/acquire"] = {
      200,
      json{{"tier", "shared"}, {"reason", "x"}, {"env", {{"CUDA_VISIBLE_DEVICES", "a'b"}}}}.dump()};
  ASSERT_EQ(Run("mps acquire --tenant t1 --gpus 0 --env"), 0);
  EXPECT_EQ(out_.str(), "export CUDA_VISIBLE_DEVICES='a'\\''b'\n");
}

TEST_F(MpsCommandTest, SharedTierShowsTheReason) {
  replies_["/v1/mps/acquire"] = {200, json{{"tenant", "t"},
                                           {"tier", "shared"},
                                           {"reason", "MPS unavailable: no binary"},
                                           {"env", {{"CUDA_VISIBLE_DEVICES", "GPU-1"}}}}
                                          .dump()};
  ASSERT_EQ(Run("mps acquire --tenant t --gpus 0"), 0);
  EXPECT_THAT(out_.str(), HasSubstr("tier shared (MPS unavailable: no binary)"));
}

TEST_F(MpsCommandTest, JsonPrintsTheReply) {
  const json reply = {{"tenant", "t"}, {"tier", "mps"}, {"env", json::object()}};
  replies_["/v1/mps/acquire"] = {200, reply.dump()};
  ASSERT_EQ(Run("mps acquire --tenant t --gpus 0 --json"), 0);
  EXPECT_EQ(json::parse(out_.str()), reply);
}

TEST_F(MpsCommandTest, StatusShowsDaemonsAndTenants) {
  replies_["/v1/mps"] = {200, json{{"available", true},
                                   {"control_binary", "/usr/bin/nvidia-cuda-mps-control"},
                                   {"root", "/run/gpuslice/mps"},
                                   {"gpus",
                                    {{{"index", 0},
                                      {"uuid", "GPU-abc"},
                                      {"running", true},
                                      {"control_pid", 4321},
                                      {"health", "healthy"},
                                      {"restarts", 1},
                                      {"tenants", {"a", "b"}},
                                      {"sm_partitions", {{"a", 32}}}}}}}
                                  .dump()};
  replies_["/v1/mps/tenants"] = {
      200, json{{"tenants",
                 {{{"name", "a"},
                   {"tier", "mps"},
                   {"gpus", {0}},
                   {"settings",
                    {{"active_thread_percentage", 30}, {"pinned_memory_limit", 1073741824}}}}}}}
               .dump()};
  ASSERT_EQ(Run("mps status"), 0) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("MPS: available (control /usr/bin/nvidia-cuda-mps-control"));
  EXPECT_THAT(out, HasSubstr("GPU-abc"));
  EXPECT_THAT(out, HasSubstr("4321"));
  EXPECT_THAT(out, HasSubstr("a,b"));
  EXPECT_THAT(out, HasSubstr("30%"));
  EXPECT_THAT(out, HasSubstr("1.00 GiB"));
  EXPECT_THAT(out, HasSubstr("SM partitions: a 32 SMs"));

  out_.str("");
  ASSERT_EQ(Run("mps status --json"), 0);
  json combined = json::parse(out_.str());
  EXPECT_EQ(combined["gpus"][0]["control_pid"], 4321);
  EXPECT_EQ(combined["tenants"][0]["name"], "a");
}

TEST_F(MpsCommandTest, StatusWhenUnavailable) {
  replies_["/v1/mps"] = {
      200, json{{"available", false}, {"reason", "MPS runs on Linux only"}, {"gpus", json::array()}}
               .dump()};
  replies_["/v1/mps/tenants"] = {200, R"({"tenants": []})"};
  ASSERT_EQ(Run("mps status"), 0);
  EXPECT_THAT(out_.str(), HasSubstr("MPS: unavailable: MPS runs on Linux only"));
  EXPECT_THAT(out_.str(), HasSubstr("no MPS daemons running"));
}

TEST_F(MpsCommandTest, DaemonErrorsAreReportedWithExitOne) {
  replies_["/v1/mps/release"] = {
      404, R"({"error": {"code": "NOT_FOUND", "message": "no MPS tenant 'ghost'"}})"};
  EXPECT_EQ(Run("mps release --tenant ghost"), kExitFailure);
  EXPECT_EQ(err_.str(), "gpuslice: no MPS tenant 'ghost'\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(MpsCommandTest, UnreachableDaemon) {
  reachable_ = false;
  EXPECT_EQ(Run("mps status"), kExitFailure);
  EXPECT_THAT(err_.str(), HasSubstr("cannot reach gpusliced"));
}

TEST_F(MpsCommandTest, NonJsonReplyIsAnError) {
  replies_["/v1/mps/release"] = {200, "<html>"};
  EXPECT_EQ(Run("mps release --tenant t"), kExitFailure);
  EXPECT_THAT(err_.str(), HasSubstr("not a JSON object"));
}

TEST_F(MpsCommandTest, SetAndTerminateBuildTheirRequests) {
  replies_["/v1/mps/tenants/t1/settings"] = {
      200, json{{"tenant", "t1"}, {"tier", "mps"}, {"env", json::object()}}.dump()};
  ASSERT_EQ(Run("mps set --tenant t1 --pinned-memory 512M"), 0) << err_.str();
  EXPECT_EQ(requests_.back().body, (json{{"pinned_memory_limit", "512M"}}));

  replies_["/v1/mps/terminate"] = {200, R"({"terminated": true})"};
  ASSERT_EQ(Run("mps terminate --gpu 1 --pid 4242"), 0);
  EXPECT_EQ(requests_.back().path, "/v1/mps/terminate");
  EXPECT_EQ(requests_.back().body, (json{{"gpu", "1"}, {"client_pid", 4242}}));
  EXPECT_THAT(out_.str(), HasSubstr("terminated MPS client 4242 on GPU 1"));
}

TEST_F(MpsCommandTest, BadCommandLinesAreUsageErrors) {
  EXPECT_EQ(Run("mps"), kExitUsage);
  EXPECT_EQ(Run("mps acquire --gpus 0"), kExitUsage);                         // no tenant
  EXPECT_EQ(Run("mps acquire --tenant t"), kExitUsage);                       // no gpus
  EXPECT_EQ(Run("mps acquire --tenant t --gpus 0 --threads 0"), kExitUsage);  // range
  EXPECT_EQ(Run("mps acquire --tenant t --gpus 0 --threads 101"), kExitUsage);
  EXPECT_EQ(Run("mps acquire --tenant t --gpus 0 --pinned-memory lots"), kExitUsage);
  EXPECT_EQ(Run("mps acquire --tenant t --gpus 0 --priority 2"), kExitUsage);
  EXPECT_EQ(Run("mps acquire --tenant ../x --gpus 0"), kExitUsage);
  EXPECT_EQ(Run("mps acquire --tenant t --gpus 0 --json --env"), kExitUsage);
  EXPECT_EQ(Run("mps terminate --gpu 0 --pid -5"), kExitUsage);
  EXPECT_EQ(Run("mps terminate --gpu 0 --pid abc"), kExitUsage);
  EXPECT_TRUE(requests_.empty());
  EXPECT_EQ(Run("mps set --tenant t"), kExitUsage);  // nothing to set
  EXPECT_THAT(err_.str(), HasSubstr("give --threads"));
  EXPECT_TRUE(requests_.empty());
}

}  // namespace
}  // namespace gpuslice::cli
