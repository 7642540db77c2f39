#include "daemon/kube/kube_config.h"

#include <gtest/gtest.h>

#include <map>

#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

std::function<const char*(const char*)> Env(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

TEST(InClusterConfigTest, ReadsTheServiceAccountAndTheServiceAddress) {
  TempDir dir;
  WriteFile(dir.path() + "/token", "abc\n");
  WriteFile(dir.path() + "/ca.crt", "PEM");
  WriteFile(dir.path() + "/namespace", "gpuslice-system\n");
  auto c = InClusterConfig(
      Env({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}),
      dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://10.0.0.1:443");
  EXPECT_EQ(c->token_file, dir.path() + "/token");
  EXPECT_EQ(c->ca_file, dir.path() + "/ca.crt");
  EXPECT_EQ(c->namespace_, "gpuslice-system");
}

TEST(InClusterConfigTest, BracketsAnIpv6Host) {
  TempDir dir;
  WriteFile(dir.path() + "/token", "abc");
  WriteFile(dir.path() + "/ca.crt", "PEM");
  auto c = InClusterConfig(
      Env({{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}}),
      dir.path());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->server, "https://[fd00::1]:6443");
}

TEST(InClusterConfigTest, OutsideAPodSaysSo) {
  TempDir dir;
  auto c = InClusterConfig(Env({}), dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

TEST(InClusterConfigTest, AMissingTokenIsNamed) {
  TempDir dir;
  WriteFile(dir.path() + "/ca.crt", "PEM");
  auto c = InClusterConfig(
      Env({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}),
      dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(dir.path() + "/token"), std::string::npos);
}

TEST(ExplicitConfigTest, RefusesANonUrlAndTrimsTheSlash) {
  EXPECT_FALSE(ExplicitConfig("10.0.0.1:443", "", "").ok());
  auto c = ExplicitConfig("https://k8s:6443/", "/ca", "/tok");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->server, "https://k8s:6443");
}

TEST(TokenFileTest, RereadsOnlyWhenTheFileChanges) {
  TempDir dir;
  const std::string path = dir.path() + "/token";
  WriteFile(path, " first\n");
  TokenFile token(path);
  EXPECT_EQ(*token.Get(), "first");
  EXPECT_EQ(*token.Get(), "first");
  EXPECT_EQ(token.reads(), 1u);
  WriteFile(path, "second-token");  // a new inode, as the kubelet's atomic writer makes
  EXPECT_EQ(*token.Get(), "second-token");
  EXPECT_EQ(token.reads(), 2u);
  token.Invalidate();
  EXPECT_EQ(*token.Get(), "second-token");
  EXPECT_EQ(token.reads(), 3u);
}

TEST(TokenFileTest, AGoneOrEmptyTokenIsAnError) {
  TempDir dir;
  const std::string path = dir.path() + "/token";
  TokenFile token(path);
  EXPECT_EQ(token.Get().status().code(), StatusCode::kUnavailable);
  WriteFile(path, "\n");
  EXPECT_EQ(token.Get().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpuslice::daemon::kube
