#include "limiter/daemon_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"

namespace gpuslice::limiter {
namespace {

using json = nlohmann::json;
using Outcome = RegistrationResult::Outcome;
using namespace std::chrono_literals;

RegistrationRequest Sample() {
  RegistrationRequest r;
  r.group = "train";
  r.devices = {"GPU-aaaa", "GPU-bbbb"};
  r.memory_bytes = 1ull << 30;
  r.compute_percent = 40;
  r.pod_name = "web-0";
  r.pod_namespace = "prod";
  r.container_name = "app";
  return r;
}

TEST(RegistrationBodyTest, SaysGroupDevicesLimitsAndHints) {
  auto body = RegistrationBody(Sample());
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  const json j = json::parse(*body);
  EXPECT_EQ(j, json::parse(R"({"group": "train", "devices": ["GPU-aaaa", "GPU-bbbb"],
      "limits": {"memory": 1073741824, "compute_percent": 40},
      "hints": {"pod_name": "web-0", "pod_namespace": "prod", "container_name": "app"}})"));
}

TEST(RegistrationBodyTest, LeavesOutWhatIsNotSet) {
  RegistrationRequest r;
  r.group = "g";
  r.devices = {"GPU-1"};
  auto body = RegistrationBody(r);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json::parse(*body), json::parse(R"({"group": "g", "devices": ["GPU-1"]})"));
}

TEST(RegistrationBodyTest, InvalidUtf8InAHintIsReplacedNotThrown) {
  RegistrationRequest r;
  r.group = "g";
  r.pod_name = "bad\xff";
  auto body = RegistrationBody(r);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json::parse(*body)["hints"]["pod_name"], "bad\xEF\xBF\xBD");
}

TEST(RequestLimitsTest, SendsALimitOnlyWhenEveryDeviceHasTheSame) {
  RegistrationRequest r;
  const DeviceLimits same[] = {{1000, 50}, {1000, 50}};
  RequestLimits(same, r);
  EXPECT_EQ(r.memory_bytes, 1000u);
  EXPECT_EQ(r.compute_percent, 50u);

  const DeviceLimits differ[] = {{1000, 50}, {2000, std::nullopt}};
  RequestLimits(differ, r);
  EXPECT_FALSE(r.memory_bytes);
  EXPECT_FALSE(r.compute_percent);

  const DeviceLimits one_only[] = {{1000, std::nullopt}, {std::nullopt, std::nullopt}};
  RequestLimits(one_only, r);
  EXPECT_FALSE(r.memory_bytes);
}

TEST(RegistrationHttpRequestTest, IsAPostWithContentLengthAndConnectionClose) {
  auto req = RegistrationHttpRequest(Sample());
  ASSERT_TRUE(req.ok());
  auto body = RegistrationBody(Sample());
  ASSERT_TRUE(body.ok());
  EXPECT_TRUE(req->starts_with("POST /v1/tenants HTTP/1.1\r\n")) << *req;
  EXPECT_NE(req->find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_NE(req->find("\r\nContent-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(req->find("\r\nContent-Length: " + std::to_string(body->size()) + "\r\n"),
            std::string::npos);
  EXPECT_TRUE(req->ends_with("\r\n\r\n" + *body));
}

TEST(ParseHttpReplyTest, ReadsTheBodyByContentLength) {
  const std::string raw = "HTTP/1.1 201 Created\r\ncontent-length: 2\r\nX: y\r\n\r\n{}";
  auto r = ParseHttpReply(raw, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, 201);
  EXPECT_EQ((*r)->body, "{}");
  // Every prefix is incomplete, not an error.
  for (size_t n = 0; n < raw.size(); ++n) {
    auto partial = ParseHttpReply(std::string_view(raw).substr(0, n), false);
    ASSERT_TRUE(partial.ok()) << n;
    EXPECT_FALSE(partial->has_value()) << n;
  }
}

TEST(ParseHttpReplyTest, WithoutContentLengthTheBodyRunsToTheEnd) {
  const std::string raw = "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy";
  auto more = ParseHttpReply(raw, false);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(more->has_value());
  auto done = ParseHttpReply(raw, true);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ((*done)->status, 503);
  EXPECT_EQ((*done)->body, "busy");
}

TEST(ParseHttpReplyTest, RefusesWhatItCannotRead) {
  for (const char* raw : {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 20x OK\r\n\r\n",
                          "HTTP/1.1 201 Created\r\nContent-Length: 1x\r\n\r\n",
                          "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}"}) {
    EXPECT_FALSE(ParseHttpReply(raw, false).ok()) << raw;
  }
  // Closed early.
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\n{}", true).ok());
  EXPECT_FALSE(ParseHttpReply("HTTP/1.1 201", true).ok());
  EXPECT_FALSE(ParseHttpReply(std::string(size_t{70} * 1024, 'x'), false).ok());
}

TEST(InterpretReplyTest, A201IsRegisteredWithTheEffectiveLimits) {
  const HttpReply reply{201, R"({"tenant": {"host_pid": 7},
      "effective_limits": {"GPU-aaaa": {"memory_bytes": 1024, "compute_percent": 30},
                           "GPU-bbbb": {"memory_bytes": null, "compute_percent": null},
                           "GPU-cccc": "junk"}})"};
  const RegistrationResult r = InterpretReply(reply, "train");
  EXPECT_EQ(r.outcome, Outcome::kRegistered);
  EXPECT_EQ(r.http_status, 201);
  ASSERT_EQ(r.effective_limits.size(), 2u);
  EXPECT_EQ(r.effective_limits[0].uuid, "GPU-aaaa");
  EXPECT_EQ(r.effective_limits[0].memory_bytes, 1024u);
  EXPECT_EQ(r.effective_limits[0].compute_percent, 30u);
  EXPECT_EQ(r.effective_limits[1].uuid, "GPU-bbbb");
  EXPECT_FALSE(r.effective_limits[1].memory_bytes);
  EXPECT_FALSE(r.effective_limits[1].compute_percent);
}

TEST(InterpretReplyTest, A201WithABodyItCannotReadIsStillRegistered) {
  const RegistrationResult r = InterpretReply({201, "not json"}, "g");
  EXPECT_EQ(r.outcome, Outcome::kRegistered);
  EXPECT_TRUE(r.effective_limits.empty());
}

TEST(InterpretReplyTest, RefusalsCarryTheDaemonsMessage) {
  const RegistrationResult r = InterpretReply(
      {403,
       R"({"error": {"code": "PERMISSION_DENIED", "message": "group \"g\" belongs to uid 0"}})"},
      "g");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.http_status, 403);
  EXPECT_EQ(r.message, "group \"g\" belongs to uid 0");

  const RegistrationResult bad = InterpretReply({400, "plain\ntext"}, "g");
  EXPECT_EQ(bad.outcome, Outcome::kRefused);
  EXPECT_EQ(bad.message, "plain text");
}

TEST(InterpretReplyTest, A409MeansKnownUnlessInAnotherGroup) {
  EXPECT_EQ(InterpretReply({409, R"({"error": {"message": "already registered"}})"}, "g").outcome,
            Outcome::kRegistered);
  EXPECT_EQ(InterpretReply(
                {409, R"({"error": {"message": "process 7 is registered in group \"g\""}})"}, "g")
                .outcome,
            Outcome::kRegistered);
  const RegistrationResult other = InterpretReply(
      {409, R"({"error": {"message": "process 7 is registered in group \"h\"; DELETE first"}})"},
      "g");
  EXPECT_EQ(other.outcome, Outcome::kRefused);
  EXPECT_NE(other.message.find("group \"h\""), std::string::npos);
}

TEST(InterpretReplyTest, ServerErrorsAreUnavailable) {
  EXPECT_EQ(InterpretReply({503, R"({"error": {"message": "cannot save"}})"}, "g").outcome,
            Outcome::kUnavailable);
  EXPECT_EQ(InterpretReply({500, ""}, "g").outcome, Outcome::kUnavailable);
}

// A Unix socket server on a temporary path, one connection at a time, run by
// a thread: it reads a request (headers and Content-Length bytes) and answers
// `reply`, or holds the connection without answering when `reply` is empty.
class FakeDaemon {
 public:
  FakeDaemon(std::string path, std::string reply, bool accept = true)
      : path_(std::move(path)), reply_(std::move(reply)) {
    unlink(path_.c_str());
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    EXPECT_EQ(listen(fd_, 4), 0);
    if (accept) thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
    unlink(path_.c_str());
  }
  // The request the last connection sent (valid after the exchange returned).
  std::string request() {
    std::lock_guard lock(mu_);
    return request_;
  }

 private:
  void Serve() {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string got;
    char buf[4096];
    for (;;) {
      const size_t end = got.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t at = got.find("Content-Length: ");
        const size_t length = at == std::string::npos ? 0 : std::stoul(got.substr(at + 16));
        if (got.size() >= end + 4 + length) break;
      }
      const ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    {
      std::lock_guard lock(mu_);
      request_ = got;
    }
    if (!reply_.empty()) {
      (void)!write(c, reply_.data(), reply_.size());
    } else {
      // Never answers: waits until the client gives up and closes.
      while (read(c, buf, sizeof buf) > 0) {
      }
    }
    close(c);
  }

  std::string path_;
  std::string reply_;
  int fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::string request_;
};

class RegisterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gs-reg." + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/d.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, path_;
};

TEST_F(RegisterTest, SendsTheRequestAndReadsTheGrant) {
  const std::string body =
      R"({"tenant": {}, "effective_limits": {"GPU-aaaa": {"memory_bytes": 512, "compute_percent": null}}})";
  FakeDaemon daemon(path_,
                    "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
  const RegistrationResult r = Register(path_, Sample(), 2s);
  EXPECT_EQ(r.outcome, Outcome::kRegistered) << r.message;
  ASSERT_EQ(r.effective_limits.size(), 1u);
  EXPECT_EQ(r.effective_limits[0].memory_bytes, 512u);
  auto expected = RegistrationHttpRequest(Sample());
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(daemon.request(), *expected);
}

TEST_F(RegisterTest, ARefusalOverTheSocketIsRefused) {
  const std::string body = R"({"error": {"code": "PERMISSION_DENIED", "message": "not yours"}})";
  FakeDaemon daemon(path_, "HTTP/1.1 403 Forbidden\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
  const RegistrationResult r = Register(path_, Sample(), 2s);
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.message, "not yours");
}

TEST_F(RegisterTest, ADaemonThatNeverAnswersCostsTheDeadlineAndNoMore) {
  FakeDaemon daemon(path_, /*reply=*/"");
  const auto start = std::chrono::steady_clock::now();
  const RegistrationResult r = Register(path_, Sample(), 100ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.outcome, Outcome::kUnavailable);
  EXPECT_NE(r.message.find("no answer in time"), std::string::npos) << r.message;
  EXPECT_GE(took, 100ms);  // it waited for the deadline (a hang is ctest's timeout)
}

TEST_F(RegisterTest, ADaemonThatNeverAcceptsCostsTheDeadlineAndNoMore) {
  // The kernel queues the connection in the backlog; nobody reads it.
  FakeDaemon daemon(path_, "", /*accept=*/false);
  const RegistrationResult r = Register(path_, Sample(), 100ms);
  EXPECT_EQ(r.outcome, Outcome::kUnavailable);  // ended by the deadline, not a hang
}

TEST_F(RegisterTest, NoSocketOrAStaleOneIsUnavailableAtOnce) {
  const RegistrationResult none = Register(path_, Sample(), 5s);
  EXPECT_EQ(none.outcome, Outcome::kUnavailable);
  EXPECT_EQ(none.message.find("no answer in time"), std::string::npos) << none.message;
  {
    // A socket file nobody listens on (a daemon killed without cleaning up).
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    close(fd);
  }
  const RegistrationResult stale = Register(path_, Sample(), 5s);
  EXPECT_EQ(stale.outcome, Outcome::kUnavailable);
  // Refused at connect, not timed out: neither waited for the deadline.
  EXPECT_NE(stale.message.find("connect"), std::string::npos) << stale.message;
  EXPECT_EQ(stale.message.find("no answer in time"), std::string::npos) << stale.message;
  EXPECT_EQ(Register(std::string(200, 'x'), Sample(), 5s).outcome, Outcome::kUnavailable);
}

TEST_F(RegisterTest, AGarbledReplyIsUnavailable) {
  FakeDaemon daemon(path_, "garbage\r\n\r\n");
  const RegistrationResult r = Register(path_, Sample(), 2s);
  EXPECT_EQ(r.outcome, Outcome::kUnavailable);
  EXPECT_NE(r.message.find("not an HTTP"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace gpuslice::limiter
