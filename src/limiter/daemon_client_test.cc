#include "limiter/daemon_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

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
  r.limits = {{1ull << 30, 40}, {1ull << 30, 40}};
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

TEST(RegistrationBodyTest, LimitsThatDifferByDeviceAreKeyedByUuid) {
  RegistrationRequest r = Sample();
  r.limits = {{1000, 50}, {2000, std::nullopt}};
  auto body = RegistrationBody(r);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json::parse(*body)["limits"],
            json::parse(R"({"GPU-aaaa": {"memory": 1000, "compute_percent": 50},
                            "GPU-bbbb": {"memory": 2000}})"));
  // A limit on one device only: the other is left out.
  r.limits = {{std::nullopt, std::nullopt}, {2000, std::nullopt}};
  EXPECT_EQ(json::parse(*RegistrationBody(r))["limits"],
            json::parse(R"({"GPU-bbbb": {"memory": 2000}})"));
  // Every device unlimited: no limits at all.
  r.limits = {{}, {}};
  EXPECT_FALSE(json::parse(*RegistrationBody(r)).contains("limits"));
  // One entry and no devices (gpuslice run): every GPU.
  r.devices.clear();
  r.limits = {{std::nullopt, 30}};
  EXPECT_EQ(json::parse(*RegistrationBody(r))["limits"], json::parse(R"({"compute_percent": 30})"));
}

TEST(RegistrationBodyTest, SendsTheScheduleAndThePidOnlyWhenSet) {
  RegistrationRequest r = Sample();
  EXPECT_FALSE(json::parse(*RegistrationBody(r)).contains("schedule"));
  EXPECT_FALSE(json::parse(*RegistrationBody(r)).contains("pid"));
  r.schedule =
      ScheduleRequest{.request_percent = 30, .priority = "latency", .weight = std::nullopt};
  r.pid = 4242;
  const json j = json::parse(*RegistrationBody(r));
  EXPECT_EQ(j["schedule"], json::parse(R"({"request": 30, "priority": "latency"})"));
  EXPECT_EQ(j["pid"], 4242);
}

TEST(DaemonAddressTest, TheUnixSocketUnlessBothHypervisorVariablesAreSet) {
  auto from = [](const std::map<std::string, std::string, std::less<>>& vars) {
    return DaemonAddressFromEnv([vars](std::string_view name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  auto plain = from({});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tcp());
  EXPECT_EQ(plain->unix_path, kDefaultDaemonSocket);
  EXPECT_EQ(from({{"GPUSLICE_SOCKET", "/tmp/d.sock"}})->Describe(), "unix:/tmp/d.sock");
  auto tcp = from({{"HYPERVISOR_IP", "10.0.0.7"},
                   {"HYPERVISOR_PORT", " 8000 "},
                   {"GPUSLICE_DAEMON_TOKEN", "s3cret"},
                   {"GPUSLICE_SOCKET", "/tmp/d.sock"}});
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  EXPECT_TRUE(tcp->tcp());
  EXPECT_EQ(tcp->Describe(), "tcp:10.0.0.7:8000");
  EXPECT_EQ(tcp->token, "s3cret");
  EXPECT_EQ(from({{"HYPERVISOR_IP", "::1"}, {"HYPERVISOR_PORT", "9"}})->Describe(), "tcp:[::1]:9");
  for (const auto& [vars, message] :
       std::vector<std::pair<std::map<std::string, std::string, std::less<>>, std::string>>{
           {{{"HYPERVISOR_IP", "10.0.0.7"}}, "HYPERVISOR_PORT: not set"},
           {{{"HYPERVISOR_PORT", "80"}}, "HYPERVISOR_IP: not set"},
           {{{"HYPERVISOR_IP", "daemon.local"}, {"HYPERVISOR_PORT", "80"}},
            "HYPERVISOR_IP: 'daemon.local' is not a numeric"},
           {{{"HYPERVISOR_IP", "10.0.0.7"}, {"HYPERVISOR_PORT", "70000"}},
            "HYPERVISOR_PORT: '70000' is not a port"},
           {{{"HYPERVISOR_IP", "10.0.0.7"}, {"HYPERVISOR_PORT", "x"}},
            "HYPERVISOR_PORT: 'x' is not a port"},
       }) {
    auto e = from(vars);
    ASSERT_FALSE(e.ok()) << message;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(message), std::string::npos) << e.status().message();
  }
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

TEST(InterpretReplyTest, A201IsRegisteredWithTheEffectiveLimits) {
  const HttpReply reply{.status = 201, .headers = {}, .body = R"({"tenant": {"host_pid": 7},
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

TEST(InterpretReplyTest, A201CarriesTheEnvironmentAndAScheduleRefusal) {
  const HttpReply reply{
      .status = 201, .headers = {}, .body = R"({"env": {"CUDA_MPS_PIPE_DIRECTORY": "/run/mps/0",
                                        "BAD": 5, "A=B": "x"},
                                "schedule_refused": "the group exists"})"};
  const RegistrationResult r = InterpretReply(reply, "g");
  EXPECT_EQ(r.outcome, Outcome::kRegistered);
  EXPECT_EQ(r.env, (std::map<std::string, std::string>{{"CUDA_MPS_PIPE_DIRECTORY", "/run/mps/0"}}));
  EXPECT_EQ(r.schedule_refused, "the group exists");
}

TEST(InterpretReplyTest, A201WithABodyItCannotReadIsStillRegistered) {
  const RegistrationResult r = InterpretReply({201, {}, "not json"}, "g");
  EXPECT_EQ(r.outcome, Outcome::kRegistered);
  EXPECT_TRUE(r.effective_limits.empty());
}

TEST(InterpretReplyTest, RefusalsCarryTheDaemonsMessage) {
  const RegistrationResult r = InterpretReply(
      {403,
       {},
       R"({"error": {"code": "PERMISSION_DENIED", "message": "group \"g\" belongs to uid 0"}})"},
      "g");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.http_status, 403);
  EXPECT_EQ(r.message, "group \"g\" belongs to uid 0");

  const RegistrationResult bad = InterpretReply({400, {}, "plain\ntext"}, "g");
  EXPECT_EQ(bad.outcome, Outcome::kRefused);
  EXPECT_EQ(bad.message, "plain text");
}

TEST(InterpretReplyTest, A409MeansKnownUnlessInAnotherGroup) {
  EXPECT_EQ(
      InterpretReply({409, {}, R"({"error": {"message": "already registered"}})"}, "g").outcome,
      Outcome::kRegistered);
  EXPECT_EQ(
      InterpretReply(
          {409, {}, R"({"error": {"message": "process 7 is registered in group \"g\""}})"}, "g")
          .outcome,
      Outcome::kRegistered);
  const RegistrationResult other = InterpretReply(
      {409,
       {},
       R"({"error": {"message": "process 7 is registered in group \"h\"; DELETE first"}})"},
      "g");
  EXPECT_EQ(other.outcome, Outcome::kRefused);
  EXPECT_NE(other.message.find("group \"h\""), std::string::npos);
}

TEST(InterpretReplyTest, ServerErrorsAreUnavailable) {
  EXPECT_EQ(InterpretReply({503, {}, R"({"error": {"message": "cannot save"}})"}, "g").outcome,
            Outcome::kUnavailable);
  EXPECT_EQ(InterpretReply({500, {}, ""}, "g").outcome, Outcome::kUnavailable);
}

// A Unix socket server on a temporary path, one connection at a time, run by
// a thread: it reads a request (headers and Content-Length bytes) and answers
// `reply`, or holds the connection without answering when `reply` is empty.
// On TCP it answers one connection per reply given, in order.
class FakeDaemon {
 public:
  FakeDaemon(std::string path, std::string reply, bool accept = true)
      : path_(std::move(path)), replies_{std::move(reply)} {
    unlink(path_.c_str());
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    EXPECT_EQ(listen(fd_, 4), 0);
    if (accept) thread_ = std::thread([this] { Serve(); });
  }
  // The same on TCP, 127.0.0.1 and a port the kernel picks (port()).
  explicit FakeDaemon(std::vector<std::string> replies) : replies_(std::move(replies)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    socklen_t len = sizeof addr;
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(fd_, 4), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
    if (!path_.empty()) unlink(path_.c_str());
  }
  uint16_t port() const { return port_; }
  // The request the last connection sent (valid after the exchange returned).
  std::string request() {
    std::lock_guard lock(mu_);
    return requests_.empty() ? "" : requests_.back();
  }
  // Every request, in order.
  std::vector<std::string> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    for (const std::string& reply : replies_) Answer(reply);
  }
  void Answer(const std::string& reply) {
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
      requests_.push_back(got);
    }
    if (!reply.empty()) {
      (void)!write(c, reply.data(), reply.size());
    } else {
      // Never answers: waits until the client gives up and closes.
      while (read(c, buf, sizeof buf) > 0) {
      }
    }
    close(c);
  }

  std::string path_;
  std::vector<std::string> replies_;
  uint16_t port_ = 0;
  int fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
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

TEST_F(RegisterTest, OverTcpTheTokenAndThePidAreSent) {
  const std::string body =
      R"({"tenant": {}, "effective_limits": {}, "env": {"CUDA_MPS_PIPE_DIRECTORY": "/p"}})";
  FakeDaemon daemon({"HTTP/1.1 201 Created\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body});
  DaemonAddress endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = daemon.port();
  endpoint.token = "s3cret";
  RegistrationRequest request = Sample();
  request.pid = 4242;
  const RegistrationResult r = Register(endpoint, request, 2s);
  EXPECT_EQ(r.outcome, Outcome::kRegistered) << r.message;
  EXPECT_EQ(r.env.at("CUDA_MPS_PIPE_DIRECTORY"), "/p");
  const std::string sent = daemon.request();
  EXPECT_NE(sent.find("\r\nAuthorization: Bearer s3cret\r\n"), std::string::npos) << sent;
  const json sent_body = json::parse(sent.substr(sent.find("\r\n\r\n") + 4));
  EXPECT_EQ(sent_body["pid"], 4242);
  EXPECT_EQ(sent_body["group"], "train");
  // The Unix socket never carries the token.
  auto unix_request = RegistrationHttpRequest(Sample());
  ASSERT_TRUE(unix_request.ok());
  EXPECT_EQ(unix_request->find("Authorization"), std::string::npos);
}

TEST_F(RegisterTest, ATcpDaemonThatRefusesOrIsAbsentIsSaidSo) {
  const std::string body = R"({"error": {"message": "registering over TCP needs a valid token"}})";
  FakeDaemon daemon({"HTTP/1.1 403 Forbidden\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body});
  DaemonAddress endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = daemon.port();
  const RegistrationResult refused = Register(endpoint, Sample(), 2s);
  EXPECT_EQ(refused.outcome, Outcome::kRefused);
  EXPECT_EQ(refused.message, "registering over TCP needs a valid token");
  // A port nobody listens on: refused at connect, at once.
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(probe);  // bound, never listening, now free
  endpoint.port = ntohs(addr.sin_port);
  const RegistrationResult absent = Register(endpoint, Sample(), 5s);
  EXPECT_EQ(absent.outcome, Outcome::kUnavailable);
  EXPECT_NE(absent.message.find("connect"), std::string::npos) << absent.message;
}

TEST_F(RegisterTest, ADaemonThatDoesNotKnowScheduleIsAskedAgainWithoutIt) {
  auto reply = [](int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) +
           " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  FakeDaemon daemon(std::vector<std::string>{
      reply(400, R"({"error": {"message": "unknown field \"schedule\""}})"),
      reply(201, R"({"tenant": {}, "effective_limits": {}})")});
  DaemonAddress endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = daemon.port();
  RegistrationRequest request = Sample();
  request.schedule = ScheduleRequest{.request_percent = 20, .priority = {}, .weight = {}};
  const RegistrationResult r = Register(endpoint, request, 2s);
  EXPECT_EQ(r.outcome, Outcome::kRegistered) << r.message;
  EXPECT_NE(r.schedule_refused.find("does not take a schedule"), std::string::npos);
  const std::vector<std::string> sent = daemon.requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_NE(sent[0].find(R"("schedule":{"request":20})"), std::string::npos) << sent[0];
  EXPECT_EQ(sent[1].find("schedule"), std::string::npos) << sent[1];
}

}  // namespace
}  // namespace gpuslice::limiter
