#include "daemon/http/http_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace gpuslice::daemon {
namespace {

TEST(ParseTargetTest, SplitsAndDecodes) {
  auto t = ParseTarget("/v1/gpus/0/power-limit?wait=false&holder=a%2Fb+c&flag");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->path, "/v1/gpus/0/power-limit");
  EXPECT_EQ(t->query.at("wait"), "false");
  EXPECT_EQ(t->query.at("holder"), "a/b c");
  EXPECT_EQ(t->query.at("flag"), "");
  EXPECT_FALSE(ParseTarget("/x?a=%zz").ok());
  EXPECT_FALSE(ParseTarget("http://host/x").ok());
}

TEST(AuthorizeTest, MutationsNeedRootTheAdminGroupOrAToken) {
  AuthPolicy policy{1234, [](uid_t uid, gid_t, gid_t group) { return uid == 42 && group == 1234; }};
  const Caller root{0, 0, 1, false, false};
  const Caller member{42, 100, 1, false, false};
  const Caller other{65534, 65534, 1, false, false};
  EXPECT_TRUE(Authorize(other, Access::kRead, policy).ok());
  EXPECT_TRUE(Authorize(root, Access::kMutate, policy).ok());
  EXPECT_TRUE(Authorize(member, Access::kMutate, policy).ok());
  Status denied = Authorize(other, Access::kMutate, policy);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("uid 65534"), std::string::npos);
  EXPECT_FALSE(Authorize(member, Access::kMutate, AuthPolicy{}).ok());
  Caller tcp{std::nullopt, std::nullopt, std::nullopt, true, false};
  EXPECT_TRUE(Authorize(tcp, Access::kRead, policy).ok());
  EXPECT_FALSE(Authorize(tcp, Access::kMutate, policy).ok());
  tcp.token_ok = true;
  EXPECT_TRUE(Authorize(tcp, Access::kMutate, policy).ok());
}

TEST(CheckSameOriginTest, RefusesAnotherSitesPageButNotThePagesOwnHost) {
  EXPECT_TRUE(CheckSameOrigin("http://127.0.0.1:8080", "127.0.0.1:8080").ok());
  EXPECT_TRUE(CheckSameOrigin("https://Node-7:443", "node-7:443").ok());
  EXPECT_TRUE(CheckSameOrigin("http://localhost", "localhost").ok());
  Status s = CheckSameOrigin("http://evil.example", "localhost:8080");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("evil.example"), std::string::npos);
  EXPECT_FALSE(CheckSameOrigin("http://localhost:8081", "localhost:8080").ok());
  EXPECT_FALSE(CheckSameOrigin("null", "localhost:8080").ok());  // sandboxed, file://
  EXPECT_FALSE(
      CheckSameOrigin("localhost:8080", "localhost:8080").ok());  // no scheme: not an origin
  EXPECT_FALSE(CheckSameOrigin("http://localhost:8080", "").ok());
}

TEST(TokensTest, LoadsAndChecksBearerTokens) {
  const std::string path = ::testing::TempDir() + "/tokens." + std::to_string(getpid());
  {
    std::ofstream out(path);
    out << "# operators\n\nsecret-one\n  secret-two  \n";
  }
  auto tokens = LoadTokens(path);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 2u);
  EXPECT_TRUE(BearerTokenValid("Bearer secret-two", *tokens));
  EXPECT_FALSE(BearerTokenValid("Bearer secret", *tokens));
  EXPECT_FALSE(BearerTokenValid("secret-one", *tokens));
  std::remove(path.c_str());
  EXPECT_FALSE(LoadTokens(path).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
