// The node segment (DESIGN.md section 3) written by the real gpusliced on a
// two-GPU simulation and read with NodeSegmentReader, as a tenant would: the
// same GPUs as GET /v1/gpus, kept current, stale at once after SIGTERM and
// within the staleness bound after SIGKILL, and followed across a restart.
#include "shm/node_segment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::WaitFor;
using namespace std::chrono_literals;

class NodeSegmentDaemonTest : public testing::SimProcessTest {
 protected:
  // Starts gpusliced on this test's simulation and segment directory and
  // waits until it answers; its log goes to "err<n>".
  pid_t StartDaemon() {
    const int n = next_++;
    socket_ = dir_ + "/d.sock";
    const pid_t pid =
        StartProgram("gpusliced", n,
                     {"--socket", socket_, "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_,
                      "--poll-interval-ms", "100", "--log-level", "debug"},
                     {R"(GPUSLICE_SIM_CONFIG={"device_count":2})"});
    EXPECT_TRUE(WaitFor(
        [&] {
          auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/readyz");
          return r.ok() && r->status == 200;
        },
        20s))
        << Read("err" + std::to_string(n));
    return pid;
  }

  json Gpus() {
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/v1/gpus");
    EXPECT_TRUE(r.ok() && r->status == 200);
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }

  // Reads the segment, failing the test on an error.
  NodeStatus ReadNode(NodeSegmentReader& reader) {
    auto s = reader.Read();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : NodeStatus{};
  }

  // The reader once the daemon's segment lists its GPUs.
  std::unique_ptr<NodeSegmentReader> WaitForSegment(pid_t daemon) {
    std::unique_ptr<NodeSegmentReader> reader;
    EXPECT_TRUE(WaitFor(
        [&] {
          if (reader == nullptr) {
            // As a tenant that trusts only the daemon's uid reads it.
            auto r = NodeSegmentReader::Open(
                shm_dir_,
                {.clock = nullptr, .max_attempts = 1000, .owner = getuid(), .on_retry = {}});
            if (!r.ok()) return false;
            reader = std::move(*r);
          }
          auto s = reader->Read();
          return s.ok() && s->daemon_pid == daemon && s->gpus.size() == 2;
        },
        10s))
        << "daemon log:\n"
        << Read("err0");
    return reader;
  }

  std::string socket_;
  int next_ = 0;
};

TEST_F(NodeSegmentDaemonTest, TenantsReadTheDaemonsGpusWithoutNvmlAndSeeItStopped) {
  const pid_t daemon = StartDaemon();
  auto reader = WaitForSegment(daemon);
  ASSERT_NE(reader, nullptr);
  NodeStatus s = ReadNode(*reader);
  EXPECT_FALSE(s.stale);
  EXPECT_EQ(s.owner_uid, getuid());
  struct stat st {};
  ASSERT_EQ(stat(NodeSegmentWriter::PathFor(shm_dir_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // The same GPUs as the API's.
  const json api = Gpus()["gpus"];
  ASSERT_EQ(api.size(), 2u);
  ASSERT_EQ(s.gpus.size(), api.size());
  for (size_t i = 0; i < api.size(); ++i) {
    const NodeGpu& g = s.gpus[i];
    EXPECT_TRUE(g.valid);
    EXPECT_FALSE(g.read_failed);
    EXPECT_EQ(g.index, api[i]["index"].get<uint32_t>());
    EXPECT_EQ(g.uuid, api[i]["uuid"].get<std::string>());
    EXPECT_EQ(g.name, api[i]["name"].get<std::string>());
    EXPECT_EQ(g.memory_total_bytes, api[i]["memory"]["total_bytes"].get<uint64_t>());
    EXPECT_EQ(g.power_limit_mw, std::lround(api[i]["power"]["limit_watts"].get<double>() * 1000));
    EXPECT_GT(g.temperature_c, 0u);
    EXPECT_GT(g.sampled_ns, 0);
  }
  EXPECT_NE(s.gpus[0].uuid, s.gpus[1].uuid);

  // Kept current: every sample (100 ms) is an update.
  const uint64_t updates = s.updates;
  EXPECT_TRUE(WaitFor([&] { return ReadNode(*reader).updates >= updates + 3; }, 5s));

  // A clean stop: stale at once, the last GPUs still readable.
  kill(daemon, SIGTERM);
  ASSERT_EQ(Join(daemon), 0) << Read("err0");
  s = ReadNode(*reader);
  EXPECT_TRUE(s.stale);
  EXPECT_EQ(s.daemon_pid, 0);
  EXPECT_EQ(s.gpus.size(), 2u);
}

TEST_F(NodeSegmentDaemonTest, AKilledDaemonsSegmentGoesStaleAndARestartReplacesIt) {
  const pid_t first = StartDaemon();
  auto reader = WaitForSegment(first);
  ASSERT_NE(reader, nullptr);
  kill(first, SIGKILL);
  Join(first);
  const auto killed = std::chrono::steady_clock::now();
  NodeStatus s = ReadNode(*reader);
  EXPECT_EQ(s.daemon_pid, first);  // it could not say it stopped
  ASSERT_TRUE(WaitFor([&] { return ReadNode(*reader).stale; }, 5s));
  const auto stale_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  EXPECT_GE(stale_after.count(), kNodeStaleNs / 1'000'000 - 200);  // not before the bound
  RecordProperty("stale_after_kill_ms", std::to_string(stale_after.count()));

  // A new daemon makes a new segment; the same reader follows it.
  const pid_t second = StartDaemon();
  ASSERT_TRUE(WaitFor(
      [&] {
        const NodeStatus n = ReadNode(*reader);
        return n.daemon_pid == second && !n.stale && n.gpus.size() == 2;
      },
      10s))
      << Read("err1");
  kill(second, SIGTERM);
  EXPECT_EQ(Join(second), 0);
  EXPECT_TRUE(ReadNode(*reader).stale);
}

}  // namespace
}  // namespace gpuslice
