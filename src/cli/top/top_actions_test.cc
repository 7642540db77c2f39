#include "cli/top/top_actions.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/fake_daemon_transport.h"

namespace gpuslice::cli::top {
namespace {

using json = nlohmann::json;

// A daemon that records the requests and answers `status` with `body`
// (GET /v1/groups/{id} answers `group`).
struct FakeDaemon {
  int status = 200;
  std::string body = "{}";
  json group = json::parse(R"({"id": "nb", "limits": {"all": {"memory_bytes": 1024,
                                 "compute_percent": 20}, "GPU-b": {"compute_percent": 10}}})");
  std::vector<std::string> calls;
  std::vector<std::string> bodies;
  DaemonClient Fetch() {
    return FakeClient([this](const std::string& method, const std::string& target,
                             const std::string& sent) -> StatusOr<HttpReply> {
      calls.push_back(method + " " + target);
      bodies.push_back(sent);
      if (method == "GET") return HttpReply{200, {}, group.dump()};
      return HttpReply{status, {}, body};
    });
  }
};

TEST(TopActionsTest, PausesAndResumesThroughTheDaemon) {
  FakeDaemon d;
  const DaemonClient fetch = d.Fetch();
  EXPECT_EQ(Perform({KeyAction::Kind::kPause, "nb", 0}, &fetch, true), "pause nb: done");
  EXPECT_EQ(Perform({KeyAction::Kind::kResume, "nb", 0}, &fetch, true), "resume nb: done");
  EXPECT_EQ(d.calls,
            (std::vector<std::string>{"POST /v1/groups/nb/pause", "POST /v1/groups/nb/resume"}));
}

TEST(TopActionsTest, ARefusalIsTheDaemonsMessageInTheStatusLine) {
  FakeDaemon d;
  const DaemonClient fetch = d.Fetch();
  d.status = 403;
  d.body = R"({"error": {"code": "PERMISSION_DENIED", "message": "admins only"}})";
  EXPECT_EQ(Perform({KeyAction::Kind::kPause, "nb", 0}, &fetch, true),
            "pause nb: HTTP 403: admins only");
  d.body = R"({"error": {"message": 7}})";  // not the daemon's shape: the body as it is
  EXPECT_EQ(Perform({KeyAction::Kind::kResume, "nb", 0}, &fetch, true),
            std::string("resume nb: HTTP 403: ") + d.body);
  d.status = 404;
  d.body = "not json\n";
  EXPECT_EQ(Perform({KeyAction::Kind::kSetLimit, "nb", 30}, &fetch, true),
            "compute limit of nb to 30%: HTTP 404: not json");
}

TEST(TopActionsTest, ALimitChangeKeepsTheGroupsOtherLimits) {
  FakeDaemon d;
  const DaemonClient fetch = d.Fetch();
  EXPECT_EQ(Perform({KeyAction::Kind::kSetLimit, "nb", 35}, &fetch, true),
            "compute limit of nb to 35%: done");
  ASSERT_EQ(d.calls, (std::vector<std::string>{"GET /v1/groups/nb", "PUT /v1/groups/nb"}));
  const json sent = json::parse(d.bodies[1]);
  EXPECT_EQ(sent["limits"]["all"]["compute_percent"], 35);
  EXPECT_EQ(sent["limits"]["all"]["memory_bytes"], 1024);  // kept
  EXPECT_FALSE(sent["limits"].contains("GPU-b"));          // one value for every GPU
}

TEST(TopActionsTest, NothingIsSentWithoutADaemon) {
  FakeDaemon d;
  const DaemonClient fetch = d.Fetch();
  EXPECT_EQ(Perform({KeyAction::Kind::kPause, "nb", 0}, nullptr, false),
            "pause nb: needs gpusliced (--no-daemon is set)");
  EXPECT_EQ(Perform({KeyAction::Kind::kPause, "nb", 0}, &fetch, false),
            "pause nb: needs gpusliced, which is not answering");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(Perform({KeyAction::Kind::kNone, "", 0}, &fetch, true), "");
}

}  // namespace
}  // namespace gpuslice::cli::top
