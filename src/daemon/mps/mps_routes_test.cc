#include "daemon/mps/mps_routes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/mps/fake_mps.h"

namespace gpuslice::daemon::mps {
namespace {

using json = nlohmann::json;
using testing::FakeGpus;
using testing::FakeHost;
using ::testing::HasSubstr;

class MpsRoutesTest : public ::testing::Test {
 protected:
  MpsRoutesTest() : gpus_(2), host_(clock_), manager_({.root = "/mps"}, gpus_, host_, clock_) {
    EXPECT_TRUE(manager_.Start().ok());
  }

  static ApiRequest Post(const std::string& body) {
    ApiRequest r;
    r.method = "POST";
    r.body = body;
    return r;
  }
  static json Body(const ApiResponse& r) { return json::parse(r.body); }

  SimulatedClock clock_;
  FakeGpus gpus_;
  FakeHost host_;
  MpsManager manager_;
};

TEST_F(MpsRoutesTest, AcquireReturnsTierAndEnvironment) {
  ApiResponse r =
      HandleAcquire(manager_, Post(R"({"tenant": "t1", "gpus": "0", "active_thread_percentage": 30,
                         "pinned_memory_limit": "4G", "client_priority": 0})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json body = Body(r);
  EXPECT_EQ(body["tier"], "mps");
  EXPECT_EQ(body["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(body["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4G");
  EXPECT_EQ(body["env"]["CUDA_MPS_CLIENT_PRIORITY"], "0");
  EXPECT_EQ(body["env"]["CUDA_MPS_PIPE_DIRECTORY"], MpsGpuDir("/mps", gpus_.uuids[0]) + "/pipe");
  EXPECT_EQ(body["gpus"][0]["uuid"], gpus_.uuids[0]);
  EXPECT_FALSE(body.contains("reason"));

  json status = Body(HandleStatus(manager_, {}));
  EXPECT_EQ(status["available"], true);
  EXPECT_EQ(status["gpus"][0]["running"], true);
  EXPECT_EQ(status["gpus"][0]["tenants"], json::array({"t1"}));
  EXPECT_EQ(status["gpus"][0]["health"], "healthy");

  json tenants = Body(HandleTenants(manager_, {}));
  EXPECT_EQ(tenants["tenants"][0]["name"], "t1");
  EXPECT_EQ(tenants["tenants"][0]["settings"]["pinned_memory_limit"], uint64_t{4} << 30);

  EXPECT_EQ(HandleRelease(manager_, Post(R"({"tenant": "t1"})")).status, 200);
  EXPECT_TRUE(Body(HandleStatus(manager_, {}))["gpus"].empty());
}

TEST_F(MpsRoutesTest, NumericGpuIsAccepted) {
  ApiResponse r = HandleAcquire(manager_, Post(R"({"tenant": "t1", "gpus": 1})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["gpus"][0]["index"], 1);
}

TEST_F(MpsRoutesTest, SharedTierCarriesTheReason) {
  host_.binary_installed = false;
  MpsManager manager({.root = "/other"}, gpus_, host_, clock_);
  ASSERT_TRUE(manager.Start().ok());
  json body = Body(HandleAcquire(manager, Post(R"({"tenant": "t", "gpus": "0"})")));
  EXPECT_EQ(body["tier"], "shared");
  EXPECT_THAT(body["reason"].get<std::string>(), HasSubstr("not found"));
  json status = Body(HandleStatus(manager, {}));
  EXPECT_EQ(status["available"], false);
  EXPECT_THAT(status["reason"].get<std::string>(), HasSubstr("not found"));
}

TEST_F(MpsRoutesTest, BadRequestsGetClearErrors) {
  struct Case {
    std::string body;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {"not json", 400, "not JSON"},
      {"[1]", 400, "JSON object"},
      {R"({"gpus": "0"})", 400, "'tenant' is required"},
      {R"({"tenant": 5, "gpus": "0"})", 400, "must be a string"},
      {R"({"tenant": "t"})", 400, "'gpus'"},
      {R"({"tenant": "t", "gpus": "0", "colour": 1})", 400, "unknown field 'colour'"},
      {R"({"tenant": "t", "gpus": "7"})", 404, "no GPU 7"},
      {R"({"tenant": "t", "gpus": "0", "active_thread_percentage": 150})", 400, "1-100"},
      {R"({"tenant": "t", "gpus": "0", "active_thread_percentage": "30"})", 400, "1-100"},
      {R"({"tenant": "t", "gpus": "0", "pinned_memory_limit": "lots"})", 400,
       "pinned_memory_limit"},
      {R"({"tenant": "t", "gpus": "0", "client_priority": 9})", 400, "client_priority"},
      {R"({"tenant": "../x", "gpus": "0"})", 400, "not a tenant name"},
  };
  for (const Case& c : cases) {
    ApiResponse r = HandleAcquire(manager_, Post(c.body));
    EXPECT_EQ(r.status, c.status) << c.body;
    json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr(c.message)) << c.body;
  }
  EXPECT_EQ(host_.starts, 0);
  json e = Body(HandleRelease(manager_, Post(R"({"tenant": "ghost"})")));
  EXPECT_EQ(e["error"]["code"], "NOT_FOUND");
}

TEST_F(MpsRoutesTest, SettingsUpdateTheTenant) {
  ASSERT_EQ(HandleAcquire(manager_, Post(R"({"tenant": "t", "gpus": "0"})")).status, 200);
  ApiRequest r = Post(R"({"active_thread_percentage": 25})");
  r.params["tenant"] = "t";
  ApiResponse resp = HandleSettings(manager_, r);
  ASSERT_EQ(resp.status, 200) << resp.body;
  EXPECT_EQ(Body(resp)["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
  r.params["tenant"] = "nobody";
  EXPECT_EQ(HandleSettings(manager_, r).status, 404);
  r.params["tenant"] = "t";
  r.body = R"({"active_thread_percentage": 0})";
  EXPECT_EQ(HandleSettings(manager_, r).status, 400);
}

TEST_F(MpsRoutesTest, TerminateChecksItsArguments) {
  ASSERT_EQ(HandleAcquire(manager_, Post(R"({"tenant": "t", "gpus": "0"})")).status, 200);
  host_.servers[MpsGpuDir("/mps", gpus_.uuids[0]) + "/pipe"][50] = {60};
  EXPECT_EQ(HandleTerminate(manager_, Post(R"({"gpu": 0, "client_pid": 60})")).status, 200);
  EXPECT_EQ(host_.CountCommands("terminate_client 50 60"), 1);
  EXPECT_EQ(HandleTerminate(manager_, Post(R"({"gpu": "0", "client_pid": 61})")).status, 404);
  EXPECT_EQ(HandleTerminate(manager_, Post(R"({"gpu": "0", "client_pid": -1})")).status, 400);
  EXPECT_EQ(HandleTerminate(manager_, Post(R"({"gpu": "0"})")).status, 400);
  EXPECT_EQ(HandleTerminate(manager_, Post(R"({"client_pid": 60})")).status, 400);
}

}  // namespace
}  // namespace gpuslice::daemon::mps
