#include "cli/daemon_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/fake_daemon_transport.h"

namespace gpuslice::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

TEST(SseParserTest, SplitsEventsAcrossReadsAndSkipsComments) {
  SseParser p;
  EXPECT_TRUE(p.Feed(": connected\n\nid: 7\nevent: sam").empty());
  auto events = p.Feed("ple\ndata: {\"a\":\r\ndata: 1}\n\nevent: x\n\ndata: plain\n\n");
  ASSERT_EQ(events.size(), 2u);  // "event: x" without data is no event
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].type, "sample");
  EXPECT_EQ(events[0].data, "{\"a\":\n1}");
  EXPECT_EQ(events[1].type, "message");
  EXPECT_EQ(events[1].data, "plain");
}

TEST(DaemonClientTest, GetJsonSaysWhyThereIsNoObject) {
  const DaemonClient client = FakeClient(
      [](const std::string&, const std::string& target, const std::string&) -> StatusOr<HttpReply> {
        if (target == "/ok") return HttpReply{200, {}, R"({"x": 1})"};
        if (target == "/refused") {
          return HttpReply{403, {}, R"({"error": {"message": "not an admin"}})"};
        }
        if (target == "/text") return HttpReply{200, {}, "hello"};
        return Unavailable("cannot reach gpusliced at /fake.sock");
      });
  auto ok = client.GetJson("/ok");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["x"], 1);
  auto refused = client.GetJson("/refused");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "gpusliced at /fake.sock answered HTTP 403 to GET /refused: not an admin");
  EXPECT_FALSE(client.GetJson("/text").ok());
  auto gone = client.GetJson("/none");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kUnavailable);
}

TEST(DaemonClientTest, EventsDeliversEventsAndTicksUntilToldToStop) {
  auto transport = std::make_shared<FakeDaemonTransport>();
  transport->AddStream({{"event: a\ndata: 1\n\nevent: b\ndata: 2\n\n", "event: c\ndata: 3\n\n"}});
  const DaemonClient client(transport);
  std::vector<std::string> seen;
  const Status s = client.Events(10ms, 1s, [&](const SseEvent* e) {
    seen.push_back(e == nullptr ? "tick" : e->type + "=" + e->data);
    return seen.size() < 4;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();  // stopped by the callback
  EXPECT_EQ(seen, (std::vector<std::string>{"a=1", "b=2", "tick", "c=3"}));
  EXPECT_EQ(transport->requests(), std::vector<std::string>{"STREAM /v1/events"});
}

TEST(DaemonAddressTest, ASocketPathOrTcpHostAndPort) {
  auto path = ParseDaemonAddress("/run/x.sock");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->unix_path, "/run/x.sock");
  EXPECT_EQ(path->Where(), "gpusliced at /run/x.sock");
  setenv("GPUSLICE_DAEMON_TOKEN", "secret", 1);
  auto tcp = ParseDaemonAddress("tcp:127.0.0.1:8443");
  unsetenv("GPUSLICE_DAEMON_TOKEN");
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->host, "127.0.0.1");
  EXPECT_EQ(tcp->port, 8443);
  EXPECT_EQ(tcp->token, "secret");
  auto v6 = ParseDaemonAddress("tcp:[::1]:9");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->Where(), "gpusliced at tcp:[::1]:9");
  EXPECT_FALSE(ParseDaemonAddress("tcp:127.0.0.1:0").ok());
  EXPECT_FALSE(ParseDaemonAddress("tcp:127.0.0.1").ok());
  EXPECT_FALSE(ParseDaemonAddress("tcp:host:99999").ok());
}

TEST(DaemonAddressTest, AMalformedAddressGivesAClientThatSaysWhy) {
  const DaemonClient client = SocketConnector()("tcp:nowhere", 1s);
  auto r = client.Request("GET", "/v1/gpus");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tcp:HOST:PORT"), std::string::npos) << r.status().message();
}

// A one-connection HTTP server on a Unix socket or loopback TCP: reads one
// request, writes `answer` in `pieces` (a short pause between), then closes
// unless `hold`.
class OneShotServer {
 public:
  OneShotServer(bool tcp, std::vector<std::string> pieces, bool hold = false) {
    if (tcp) {
      fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      socklen_t len = sizeof a;
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
      endpoint_ = "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    } else {
      dir_ = std::filesystem::temp_directory_path() /
             ("gs-client-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
      std::filesystem::create_directories(dir_);
      endpoint_ = (dir_ / "d.sock").string();
      fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      strncpy(a.sun_path, endpoint_.c_str(), sizeof a.sun_path - 1);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    }
    EXPECT_EQ(listen(fd_, 1), 0);
    thread_ = std::thread([this, pieces = std::move(pieces), hold] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        request_.append(buf, static_cast<size_t>(n));
      }
      for (const std::string& p : pieces) {
        if (write(c, p.data(), p.size()) != static_cast<ssize_t>(p.size())) break;
        std::this_thread::sleep_for(20ms);  // separate reads for the client, not a wait on it
      }
      if (hold) {
        while (read(c, buf, sizeof buf) > 0) {
        }
      }
      close(c);
    });
  }
  ~OneShotServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  const std::string& endpoint() const { return endpoint_; }
  // The request the server read (complete once the client has its answer).
  const std::string& request() const { return request_; }

 private:
  static inline std::atomic<int> counter_{0};
  int fd_ = -1;
  std::filesystem::path dir_;
  std::string endpoint_;
  std::string request_;
  std::thread thread_;
};

TEST(SocketTransportTest, ExchangesOverAUnixSocketAndTcpWithTheToken) {
  for (const bool tcp : {false, true}) {
    OneShotServer server(tcp, {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n", "{\"a\": 1}"});
    setenv("GPUSLICE_DAEMON_TOKEN", "tok", 1);
    const DaemonClient client = SocketConnector()(server.endpoint(), 5s);
    unsetenv("GPUSLICE_DAEMON_TOKEN");
    auto j = client.GetJson("/v1/gpus");
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ((*j)["a"], 1);
    EXPECT_TRUE(server.request().starts_with("GET /v1/gpus HTTP/1.1\r\n")) << server.request();
    EXPECT_EQ(server.request().find("Authorization: Bearer tok") != std::string::npos, tcp)
        << server.request();
  }
}

TEST(SocketTransportTest, AHeadAnswerHasNoBodyWhateverItsLength) {
  OneShotServer server(false, {"HTTP/1.1 200 OK\r\nContent-Length: 120\r\n\r\n"});
  auto r = SocketConnector()(server.endpoint(), 5s).Request("HEAD", "/v1/gpus");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-length"], "120");
  EXPECT_TRUE(r->body.empty());
}

TEST(SocketTransportTest, StreamsEventsUntilTheDaemonCloses) {
  OneShotServer server(
      false, {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: hi\n\n",
              "event: sample\ndata: {\"n\": 1}\n\n", "event: sample\nda", "ta: {\"n\": 2}\n\n"});
  const DaemonClient client = SocketConnector()(server.endpoint(), 5s);
  std::vector<int> seen;
  const Status s = client.Events(10ms, 5s, [&](const SseEvent* e) {
    if (e != nullptr) seen.push_back(json::parse(e->data)["n"].get<int>());
    return true;
  });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("closed the event stream"), std::string::npos) << s.message();
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  EXPECT_TRUE(server.request().starts_with("GET /v1/events HTTP/1.1\r\n"));
}

TEST(SocketTransportTest, ASilentStreamEndsAfterIdle) {
  OneShotServer server(false, {"HTTP/1.1 200 OK\r\n\r\n"}, /*hold=*/true);
  int ticks = 0;
  const Status s =
      SocketConnector()(server.endpoint(), 5s).Events(10ms, 100ms, [&](const SseEvent* e) {
        ticks += e == nullptr;
        return true;
      });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("sent nothing"), std::string::npos) << s.message();
  EXPECT_GT(ticks, 0);
}

TEST(SocketTransportTest, NoDaemonIsUnavailableNamingTheSocket) {
  auto r = SocketConnector()("/nonexistent/gpuslice-test.sock", 1s).Request("GET", "/v1/gpus");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/nonexistent/gpuslice-test.sock"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::cli
