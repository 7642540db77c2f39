#include "daemon/kube/kube_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;

json Pod(const std::string& name, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}}},
          {"spec", {{"nodeName", node}}}};
}

class KubeClientTest : public FakeApiTest {};

TEST_F(KubeClientTest, CrudOverTlsWithTheBearerToken) {
  auto created = client_->Post("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["namespace"], "ns");
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());

  auto got = client_->Get("/api/v1/namespaces/ns/pods/a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["spec"]["nodeName"], "n1");

  auto patched = client_->Patch("/api/v1/namespaces/ns/pods/a",
                                {{"metadata", {{"annotations", {{"k", "v"}}}}}});
  ASSERT_TRUE(patched.ok());
  EXPECT_EQ((*patched)["metadata"]["annotations"]["k"], "v");

  json stale = *got;  // the resourceVersion before the patch
  stale["spec"]["nodeName"] = "n2";
  auto conflict = client_->Put("/api/v1/namespaces/ns/pods/a", stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(conflict.status().message().find("409 conflict"), std::string::npos);

  json fresh = *patched;
  fresh["spec"]["nodeName"] = "n2";
  ASSERT_TRUE(client_->Put("/api/v1/namespaces/ns/pods/a", fresh).ok());
  ASSERT_TRUE(client_->Delete("/api/v1/namespaces/ns/pods/a").ok());
  auto gone = client_->Get("/api/v1/namespaces/ns/pods/a");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("pods \"a\" not found"), std::string::npos);

  for (const auto& r : api_->Requests()) EXPECT_EQ(r.token, "token-1") << r.path;
}

TEST_F(KubeClientTest, MapsStatusCodes) {
  struct Case {
    int code;
    StatusCode want;
  } cases[] = {{403, StatusCode::kPermissionDenied},
               {410, StatusCode::kFailedPrecondition},
               {422, StatusCode::kInvalidArgument},
               {500, StatusCode::kUnavailable},
               {429, StatusCode::kUnavailable}};
  for (const Case& c : cases) {
    api_->FailNextRequests(1, c.code);
    auto r = client_->Get("/api/v1/nodes");
    ASSERT_FALSE(r.ok()) << c.code;
    EXPECT_EQ(r.status().code(), c.want) << c.code << " " << r.status().ToString();
    EXPECT_NE(r.status().message().find("HTTP " + std::to_string(c.code)), std::string::npos);
    EXPECT_NE(r.status().message().find("injected failure"), std::string::npos);
  }
}

TEST_F(KubeClientTest, ARotatedTokenIsUsedWithoutARestart) {
  ASSERT_TRUE(client_->Get("/api/v1/nodes").ok());
  api_->AcceptToken("token-2");  // the server moved on; our file still has token-1
  auto refused = client_->Get("/api/v1/nodes");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("401 unauthorized"), std::string::npos);
  WriteFile(token_file_, "token-2\n");  // the kubelet rotates the projected token
  auto ok = client_->Get("/api/v1/nodes");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(api_->Requests().back().token, "token-2");
}

TEST_F(KubeClientTest, AServerOutsideTheCaBundleIsRefused) {
  TempDir other;
  auto other_api = testing::FakeKubeApi::Start(other.path());
  ASSERT_TRUE(other_api.ok());
  // Our client trusts the first server's CA only.
  auto config = ExplicitConfig((*other_api)->url(), api_->ca_file(), token_file_);
  KubeClient client(*config);
  auto r = client.Get("/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE((*other_api)->Requests().empty());
}

TEST_F(KubeClientTest, ASlowServerTimesOut) {
  auto config = ExplicitConfig(api_->url(), api_->ca_file(), token_file_);
  config->request_timeout_ms = 200;
  KubeClient client(*config);
  api_->SetDelay(std::chrono::milliseconds(5'000));
  auto r = client.Get("/api/v1/nodes");
  api_->SetDelay(std::chrono::milliseconds(0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
}

TEST_F(KubeClientTest, NoServerIsUnavailable) {
  auto config = ExplicitConfig("https://127.0.0.1:1", api_->ca_file(), token_file_);
  KubeClient client(*config);
  EXPECT_EQ(client.Get("/api/v1/nodes").status().code(), StatusCode::kUnavailable);
}

TEST_F(KubeClientTest, StreamDeliversLinesUntilCancelled) {
  api_->Create("/api/v1/namespaces/ns/pods", Pod("a", "n1"));
  const std::string rv = std::to_string(api_->resource_version() - 1);
  std::vector<std::string> lines;
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    ASSERT_TRUE(api_->WaitForOpenWatches(1, std::chrono::seconds(10)));
    api_->Create("/api/v1/namespaces/ns/pods", Pod("b", "n1"));
  });
  auto r = client_->Stream(
      "/api/v1/pods?watch=1&resourceVersion=" + rv,
      [&](std::string_view line) {
        lines.emplace_back(line);
        if (lines.size() == 2) cancel = true;
        return true;
      },
      [&] { return cancel.load(); }, 0, 10'000);
  t.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(json::parse(lines[0])["object"]["metadata"]["name"], "a");
  EXPECT_EQ(json::parse(lines[1])["object"]["metadata"]["name"], "b");
}

}  // namespace
}  // namespace gpuslice::daemon::kube
