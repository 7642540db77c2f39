// The daemon's monitor feeding the node segment: what a sample publishes, and
// what a failed read leaves there.
#include "daemon/gpu/node_gpus.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

class NodeGpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-node-gpus-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto w = NodeSegmentWriter::Create(dir_, 77, clock_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    writer_ = std::move(*w);
    auto r = NodeSegmentReader::Open(
        dir_, {.clock = &clock_, .max_attempts = 10, .owner = {}, .on_retry = {}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reader_ = std::move(*r);
    monitor_.SetSampleSink([this](const Snapshot& s) { writer_->Publish(NodeGpusOf(s)); });
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  NodeStatus Read() {
    auto s = reader_->Read();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : NodeStatus{};
  }

  SimulatedClock clock_{50 * kSecond};
  FakeBackend backend_{2};
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000), &clock_};
  std::string dir_;
  std::unique_ptr<NodeSegmentWriter> writer_;
  std::unique_ptr<NodeSegmentReader> reader_;
};

TEST_F(NodeGpusTest, EverySamplePublishesEachGpusStatus) {
  backend_.Mutate(1, [](GpuInfo& g) {
    g.memory_used_bytes = 5ull << 30;
    g.memory_free_bytes = g.memory_total_bytes - g.memory_used_bytes;
    g.utilization_gpu_percent = 63;
    g.utilization_memory_percent = 12;
    g.power_draw_mw = 412'000;
    g.temperature_c = 61;
    g.compute_mode = ComputeMode::kExclusiveProcess;
  });
  monitor_.SetMpsProvider([](const GpuInfo& g) { return g.index == 1 ? "on" : "off"; });
  monitor_.Sample();
  NodeStatus s = Read();
  EXPECT_EQ(s.daemon_pid, 77);
  EXPECT_FALSE(s.stale);
  ASSERT_EQ(s.gpus.size(), 2u);
  const Snapshot& snap = *monitor_.Current();
  for (size_t i = 0; i < 2; ++i) {
    const NodeGpu& n = s.gpus[i];
    const GpuInfo& g = snap.gpus[i];
    EXPECT_TRUE(n.valid);
    EXPECT_FALSE(n.read_failed);
    EXPECT_EQ(n.index, i);
    EXPECT_EQ(n.uuid, g.uuid);
    EXPECT_EQ(n.name, g.name);
    EXPECT_EQ(n.memory_total_bytes, g.memory_total_bytes);
    EXPECT_EQ(n.memory_used_bytes, g.memory_used_bytes);
    EXPECT_EQ(n.memory_free_bytes, g.memory_free_bytes);
    EXPECT_EQ(n.sm_utilization_percent, g.utilization_gpu_percent);
    EXPECT_EQ(n.memory_utilization_percent, g.utilization_memory_percent);
    EXPECT_EQ(n.power_draw_mw, g.power_draw_mw);
    EXPECT_EQ(n.power_limit_mw, g.power_limit_mw);
    EXPECT_EQ(n.temperature_c, g.temperature_c);
    EXPECT_EQ(n.sm_clock_mhz, g.sm_clock_mhz);
    EXPECT_EQ(n.compute_mode, static_cast<uint32_t>(g.compute_mode));
    EXPECT_EQ(n.sampled_ns, 50 * kSecond);
  }
  EXPECT_EQ(s.gpus[0].uuid, "GPU-fake-0");
  EXPECT_EQ(s.gpus[1].memory_used_bytes, 5ull << 30);
  EXPECT_EQ(s.gpus[1].temperature_c, 61u);
  EXPECT_EQ(s.gpus[1].compute_mode, 3u);  // NVML's value of EXCLUSIVE_PROCESS
  EXPECT_EQ(s.gpus[0].mps, NodeMps::kOff);
  EXPECT_EQ(s.gpus[1].mps, NodeMps::kOn);
  const uint64_t updates = s.updates;

  // The next sample replaces it.
  clock_.Advance(kSecond);
  backend_.Mutate(0, [](GpuInfo& g) { g.memory_used_bytes = 1; });
  monitor_.Sample();
  s = Read();
  EXPECT_EQ(s.updates, updates + 1);
  EXPECT_EQ(s.updated_ns, 51 * kSecond);
  EXPECT_EQ(s.gpus[0].memory_used_bytes, 1u);
  EXPECT_EQ(s.gpus[0].sampled_ns, 51 * kSecond);
}

TEST_F(NodeGpusTest, AFailedReadKeepsTheLastValuesAndSaysSo) {
  monitor_.Sample();
  clock_.Advance(kSecond);
  backend_.FailReads(1, true);
  backend_.Mutate(1, [](GpuInfo& g) { g.memory_used_bytes = 999; });  // not seen
  monitor_.Sample();
  NodeStatus s = Read();
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_FALSE(s.gpus[0].read_failed);
  EXPECT_EQ(s.gpus[0].sampled_ns, 51 * kSecond);
  EXPECT_TRUE(s.gpus[1].valid);
  EXPECT_TRUE(s.gpus[1].read_failed);
  EXPECT_EQ(s.gpus[1].sampled_ns, 50 * kSecond);
  EXPECT_EQ(s.gpus[1].uuid, "GPU-fake-1");
  EXPECT_EQ(s.gpus[1].memory_used_bytes, 0u);
  EXPECT_FALSE(s.stale);  // the daemon itself is alive

  backend_.FailReads(1, false);
  monitor_.Sample();
  s = Read();
  EXPECT_FALSE(s.gpus[1].read_failed);
  EXPECT_EQ(s.gpus[1].memory_used_bytes, 999u);
}

TEST_F(NodeGpusTest, AGpuNeverReadIsNotValid) {
  backend_.FailReads(0, true);
  monitor_.Sample();
  NodeStatus s = Read();
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_FALSE(s.gpus[0].valid);
  EXPECT_TRUE(s.gpus[0].read_failed);
  EXPECT_EQ(s.gpus[0].index, 0u);
  EXPECT_TRUE(s.gpus[0].uuid.empty());
  EXPECT_TRUE(s.gpus[1].valid);
}

}  // namespace
}  // namespace gpuslice::daemon
