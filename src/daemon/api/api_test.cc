#include "daemon/api/api.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

ApiResponse Tagged(const std::string& tag) {
  ApiResponse r;
  r.body = tag;
  return r;
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.Add("GET", "/v1/gpus", Access::kRead, [](const ApiRequest&) { return Tagged("list"); });
    router_.Add("GET", "/v1/gpus/{ids}/energy", Access::kRead,
                [](const ApiRequest&) { return Tagged("energy"); });
    router_.Add("PUT", "/v1/gpus/{ids}/{setting}", Access::kMutate, Dispatch::kBlocking,
                [](const ApiRequest&) { return Tagged("put"); });
    router_.Add("GET", "/v1/gpus/{ids}/{setting}", Access::kRead, Dispatch::kInline,
                [](const ApiRequest&) { return Tagged("get-setting"); });
  }
  std::string Call(std::string_view method, std::string_view path) {
    auto m = router_.Find(method, path);
    if (!m.ok()) return m.status().ToString();
    return (*m->handler)(ApiRequest{}).body;
  }
  ApiRouter router_;
};

TEST_F(RouterTest, MatchesLiteralPaths) { EXPECT_EQ(Call("GET", "/v1/gpus"), "list"); }

TEST_F(RouterTest, ExtractsParameters) {
  auto m = router_.Find("PUT", "/v1/gpus/0,2/power-limit");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->params.at("ids"), "0,2");
  EXPECT_EQ(m->params.at("setting"), "power-limit");
  EXPECT_EQ(m->access, Access::kMutate);
  EXPECT_EQ(m->dispatch, Dispatch::kBlocking);
}

TEST_F(RouterTest, MoreLiteralSegmentsWin) {
  EXPECT_EQ(Call("GET", "/v1/gpus/0/energy"), "energy");
  EXPECT_EQ(Call("GET", "/v1/gpus/0/power-limit"), "get-setting");
}

TEST_F(RouterTest, WrongMethodIsMethodNotAllowed) {
  auto m = router_.Find("DELETE", "/v1/gpus/0/power-limit");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("method not allowed"), std::string::npos);
}

TEST_F(RouterTest, UnknownPathIsNotFound) {
  EXPECT_EQ(router_.Find("GET", "/v1/nothing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(router_.Find("GET", "/v1/gpus/0/a/b").status().code(), StatusCode::kNotFound);
}

TEST(ApiResponseTest, FromStatusMapsCodesAndCarriesTheMessage) {
  EXPECT_EQ(ApiResponse::FromStatus(InvalidArgument("x")).status, 400);
  EXPECT_EQ(ApiResponse::FromStatus(NotFound("x")).status, 404);
  EXPECT_EQ(ApiResponse::FromStatus(PermissionDenied("x")).status, 403);
  EXPECT_EQ(ApiResponse::FromStatus(Unavailable("x")).status, 503);
  EXPECT_EQ(ApiResponse::FromStatus(Internal("x")).status, 500);
  auto body = nlohmann::json::parse(ApiResponse::FromStatus(NotFound("no GPU 7")).body);
  EXPECT_EQ(body["error"]["code"], "NOT_FOUND");
  EXPECT_EQ(body["error"]["message"], "no GPU 7");
}

// Found by tests/fuzz/http_request_fuzz (corpus/http_request_fuzz/non_utf8_path):
// a request path that is not UTF-8, echoed in the 404's message, made dump()
// throw out of the request handler (the daemon died).
TEST_F(RouterTest, AMessageThatIsNotUtf8IsAnsweredNotThrown) {
  auto m = router_.Find("DELETE", "/v1/tenants\xe0m_mhzs/050");
  ASSERT_FALSE(m.ok());
  ApiResponse r;
  ASSERT_NO_THROW(r = ApiResponse::FromStatus(m.status()));
  EXPECT_EQ(r.status, 404);
  auto body = nlohmann::json::parse(r.body);
  EXPECT_NE(body["error"]["message"].get<std::string>().find("m_mhzs"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
