#include "cli/top/daemon_feed.h"

#include <gtest/gtest.h>

#include <memory>

#include "cli/fake_daemon_transport.h"

namespace gpuslice::cli::top {
namespace {

using namespace std::chrono_literals;

std::string SampleEvent(int id, const std::string& group) {
  const nlohmann::json data = {{"t", id},
                               {"gpus", nlohmann::json::array()},
                               {"groups", {{{"id", group}}}},
                               {"tenants", nlohmann::json::array()}};
  return "id: " + std::to_string(id) + "\nevent: sample\ndata: " + data.dump() + "\n\n";
}

// Waits (with a deadline) for a state that `done` accepts; the last state.
template <typename Done>
DaemonFeed::State WaitFor(const DaemonFeed& feed, Done done) {
  DaemonFeed::State s = feed.Get();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done(s) && std::chrono::steady_clock::now() < deadline) {
    s = feed.WaitNewer(s.version, 100ms);
  }
  return s;
}

TEST(DaemonFeedTest, KeepsTheLastSampleSaysWhenTheStreamEndsAndReconnects) {
  auto transport = std::make_shared<FakeDaemonTransport>();
  // The first stream: a comment, another event type, two samples (the second
  // split across reads), then the daemon goes away.
  const std::string second = SampleEvent(2, "b");
  transport->AddStream({{": connected\n\n", "event: group\ndata: {}\n\n", SampleEvent(1, "a"),
                         second.substr(0, 10), second.substr(10)},
                        Unavailable("gpusliced at /fake.sock closed the event stream")});
  DaemonFeed feed(DaemonClient(transport), {.tick = 10ms, .idle = 1s, .retry = 20ms});

  DaemonFeed::State s =
      WaitFor(feed, [](const DaemonFeed::State& st) { return !st.connected && st.samples == 2; });
  EXPECT_EQ(s.samples, 2u);
  EXPECT_FALSE(s.connected);
  EXPECT_TRUE(s.resolved);
  EXPECT_EQ((*s.last)["groups"][0]["id"], "b");  // the last sample is kept
  EXPECT_NE(s.error.find("closed the event stream"), std::string::npos) << s.error;

  // Retries while no stream opens (the fake refuses), then the daemon is back.
  s = WaitFor(feed, [&](const DaemonFeed::State& st) {
    return st.error.find("cannot reach") != std::string::npos;
  });
  EXPECT_NE(s.error.find("cannot reach"), std::string::npos) << s.error;
  transport->AddStream({{SampleEvent(3, "c")}, Unavailable("gone again")});
  s = WaitFor(feed, [](const DaemonFeed::State& st) { return st.samples == 3; });
  EXPECT_EQ(s.samples, 3u);
  EXPECT_EQ((*s.last)["groups"][0]["id"], "c");
  int streams = 0;
  for (const std::string& r : transport->requests()) streams += r == "STREAM /v1/events";
  EXPECT_GE(streams, 3);
}

TEST(DaemonFeedTest, NoDaemonResolvesWithTheReason) {
  auto transport = std::make_shared<FakeDaemonTransport>();
  DaemonFeed feed(DaemonClient(transport), {.tick = 10ms, .idle = 1s, .retry = 20ms});
  const DaemonFeed::State s = feed.WaitNewer(0, 10s);
  EXPECT_TRUE(s.resolved);
  EXPECT_FALSE(s.connected);
  EXPECT_EQ(s.samples, 0u);
  EXPECT_NE(s.error.find("cannot reach gpusliced at /fake.sock"), std::string::npos) << s.error;
}

}  // namespace
}  // namespace gpuslice::cli::top
