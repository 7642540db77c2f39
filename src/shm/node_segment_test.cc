#include "shm/node_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace gpuslice {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

NodeGpu Gpu(uint32_t index) {
  NodeGpu g;
  g.index = index;
  g.valid = true;
  g.uuid = "GPU-0000000" + std::to_string(index) + "-1111-2222-3333-444444444444";
  g.name = "NVIDIA H100 80GB HBM3";
  g.memory_total_bytes = 80ull << 30;
  g.memory_used_bytes = 3ull << 30;
  g.memory_free_bytes = 77ull << 30;
  g.sm_utilization_percent = 42;
  g.memory_utilization_percent = 17;
  g.power_draw_mw = 312'000;
  g.power_limit_mw = 700'000;
  g.temperature_c = 51;
  g.sm_clock_mhz = 1980;
  g.compute_mode = 3;
  g.mps = NodeMps::kOn;
  g.sampled_ns = 123 * kSecond;
  g.read_failed = index == 1;
  return g;
}

class NodeSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-node-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<NodeSegmentWriter> MakeWriter(pid_t pid = 4242) {
    auto w = NodeSegmentWriter::Create(dir_, pid, clock_);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(w).value() : nullptr;
  }

  std::unique_ptr<NodeSegmentReader> MakeReader(NodeSegmentReader::Options options = {}) {
    if (options.clock == nullptr) options.clock = &clock_;
    auto r = NodeSegmentReader::Open(dir_, std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // The segment mapped writable, as a test's stand-in for a misbehaving writer.
  NodeSegmentLayout* MapForWriting() {
    const int fd = open(NodeSegmentWriter::PathFor(dir_).c_str(), O_RDWR);
    EXPECT_GE(fd, 0);
    void* p = mmap(nullptr, sizeof(NodeSegmentLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(p, MAP_FAILED);
    mapped_.push_back(p);
    return static_cast<NodeSegmentLayout*>(p);
  }

  void WriteFile(const void* data, size_t size) {
    std::ofstream out(NodeSegmentWriter::PathFor(dir_), std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  }

  std::vector<std::string> Files() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  ~NodeSegmentTest() override {
    for (void* p : mapped_) munmap(p, sizeof(NodeSegmentLayout));
  }

  std::string dir_;
  SimulatedClock clock_{100 * kSecond};
  std::vector<void*> mapped_;
};

TEST_F(NodeSegmentTest, CreatesAWholeSegmentReadableByOthers) {
  auto w = MakeWriter(4242);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(Files(), std::vector<std::string>{"node.v1"});  // no temporary file left
  struct stat st {};
  ASSERT_EQ(stat(w->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_uid, getuid());
  EXPECT_EQ(static_cast<size_t>(st.st_size), sizeof(NodeSegmentLayout));

  auto r = MakeReader();
  ASSERT_NE(r, nullptr);
  auto s = r->Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->daemon_pid, 4242);
  EXPECT_EQ(s->updated_ns, 100 * kSecond);
  EXPECT_EQ(s->updates, 1u);
  EXPECT_FALSE(s->stale);
  EXPECT_TRUE(s->gpus.empty());
  EXPECT_EQ(s->owner_uid, getuid());
}

TEST_F(NodeSegmentTest, PublishedGpusReadBackFieldForField) {
  auto w = MakeWriter();
  auto r = MakeReader();
  ASSERT_TRUE(w && r);
  w->Publish({Gpu(0), Gpu(1)});
  auto s = r->Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->gpus.size(), 2u);
  EXPECT_EQ(s->gpus[0], Gpu(0));
  EXPECT_EQ(s->gpus[1], Gpu(1));
  EXPECT_EQ(s->updates, 2u);

  // Fewer GPUs: the rest are gone; over-long strings are cut, more than
  // kNodeMaxGpus GPUs are dropped.
  NodeGpu long_name = Gpu(0);
  long_name.name = std::string(200, 'n');
  w->Publish({long_name});
  s = r->Read();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->gpus.size(), 1u);
  EXPECT_EQ(s->gpus[0].name, std::string(kNodeGpuNameBytes - 1, 'n'));
  w->Publish(std::vector<NodeGpu>(kNodeMaxGpus + 3, Gpu(2)));
  s = r->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gpus.size(), static_cast<size_t>(kNodeMaxGpus));
}

// Every snapshot a reader gets is one the writer published whole: the writer
// derives every field of update k from k, and the reader checks they agree.
TEST_F(NodeSegmentTest, ConcurrentReadsNeverSeeAHalfWrittenUpdate) {
  MonotonicClock real;
  auto w = NodeSegmentWriter::Create(dir_, 7, real);
  ASSERT_TRUE(w.ok());
  auto r = NodeSegmentReader::Open(
      dir_, {.clock = &real, .max_attempts = 1'000'000, .owner = {}, .on_retry = {}});
  ASSERT_TRUE(r.ok());
  constexpr uint64_t kUpdates = 20'000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t k = 1; k <= kUpdates; ++k) {
      std::vector<NodeGpu> gpus(1 + k % kNodeMaxGpus);
      for (size_t i = 0; i < gpus.size(); ++i) {
        NodeGpu& g = gpus[i];
        g.index = static_cast<uint32_t>(i);
        g.valid = true;
        g.uuid = "GPU-" + std::to_string(k);
        g.name = std::string(k % 90, 'x');
        g.memory_total_bytes = 1'000'000 + k;
        g.memory_used_bytes = k;
        g.memory_free_bytes = 1'000'000;
        g.sm_utilization_percent = static_cast<uint32_t>(k % 101);
        g.sampled_ns = static_cast<int64_t>(k);
      }
      (*w)->Publish(gpus);
      std::this_thread::yield();
    }
    done = true;
  });
  uint64_t reads = 0;
  uint64_t distinct = 0;
  uint64_t last = 0;
  // In a lambda: a failed ASSERT returns here, and the writer is still joined.
  [&] {
    while (!done.load()) {
      auto s = (*r)->Read();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ++reads;
      if (s->gpus.empty()) continue;  // the first, empty update
      const uint64_t k = s->gpus[0].memory_used_bytes;
      ASSERT_GE(k, last) << "went back in time";
      if (k != last) ++distinct;
      last = k;
      ASSERT_EQ(s->updates, k + 1);  // Create's empty update was the first
      ASSERT_EQ(s->gpus.size(), 1 + k % kNodeMaxGpus) << "update " << k;
      for (size_t i = 0; i < s->gpus.size(); ++i) {
        const NodeGpu& g = s->gpus[i];
        ASSERT_EQ(g.index, i);
        ASSERT_EQ(g.uuid, "GPU-" + std::to_string(k));
        ASSERT_EQ(g.name.size(), k % 90);
        ASSERT_EQ(g.memory_used_bytes, k);
        ASSERT_EQ(g.memory_total_bytes, g.memory_used_bytes + g.memory_free_bytes);
        ASSERT_EQ(g.sm_utilization_percent, k % 101);
        ASSERT_EQ(g.sampled_ns, static_cast<int64_t>(k));
      }
    }
  }();
  writer.join();
  ASSERT_FALSE(HasFatalFailure());
  auto s = (*r)->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gpus[0].memory_used_bytes, kUpdates);
  RecordProperty("reads", std::to_string(reads));
  RecordProperty("distinct_updates_seen", std::to_string(distinct));
  EXPECT_GT(distinct, 1u) << "the reader never overlapped the writer";
}

TEST_F(NodeSegmentTest, AReadThatFindsTheSegmentMidWriteIsRetried) {
  auto w = MakeWriter();
  ASSERT_NE(w, nullptr);
  w->Publish({Gpu(0)});
  NodeSegmentLayout* raw = MapForWriting();
  std::atomic_ref<uint64_t> seq(raw->seq);
  const uint64_t even = seq.load();
  ASSERT_EQ(even % 2, 0u);
  seq.store(even + 1);  // a writer in the middle of an update

  std::vector<int> retries;
  auto r = MakeReader(
      {.clock = nullptr, .max_attempts = 1000, .owner = {}, .on_retry = [&](int attempt) {
         retries.push_back(attempt);
         if (attempt == 3) seq.store(even + 2);  // the writer finishes
       }});
  ASSERT_NE(r, nullptr);
  auto s = r->Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(retries, (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(s->gpus.size(), 1u);
  EXPECT_EQ(s->gpus[0], Gpu(0));
}

TEST_F(NodeSegmentTest, ASegmentStuckMidWriteIsReportedNotSpunOn) {
  auto w = MakeWriter();
  ASSERT_NE(w, nullptr);
  NodeSegmentLayout* raw = MapForWriting();
  std::atomic_ref<uint64_t>(raw->seq).fetch_add(1);  // its writer died mid-update
  int retries = 0;
  auto r = MakeReader(
      {.clock = nullptr, .max_attempts = 5, .owner = {}, .on_retry = [&](int) { ++retries; }});
  ASSERT_NE(r, nullptr);
  auto s = r->Read();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("mid-update"), std::string::npos) << s.status().message();
  EXPECT_EQ(retries, 4);
}

TEST_F(NodeSegmentTest, ImpossibleContentsAreRefused) {
  auto w = MakeWriter();
  auto r = MakeReader();
  ASSERT_TRUE(w && r);
  std::atomic_ref<uint32_t>(MapForWriting()->gpu_count).store(kNodeMaxGpus + 1);
  auto s = r->Read();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("17 GPUs"), std::string::npos) << s.status().message();
}

TEST_F(NodeSegmentTest, FilesThatAreNotNodeSegmentsAreRefusedSayingWhy) {
  auto open = [&] { return NodeSegmentReader::Open(dir_).status(); };
  Status missing = open();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("no node segment"), std::string::npos) << missing.message();

  NodeSegmentLayout good{};
  good.header = {kNodeSegmentMagic, kNodeSegmentVersion, sizeof(NodeSegmentLayout)};
  struct Case {
    const char* what;
    NodeSegmentHeader header;
    size_t file_size;
    const char* says;
  } cases[] = {
      {"empty", good.header, 0, "too short"},
      {"bad magic",
       {0x1234, kNodeSegmentVersion, sizeof(NodeSegmentLayout)},
       sizeof(NodeSegmentLayout),
       "bad magic"},
      {"another version",
       {kNodeSegmentMagic, 2, sizeof(NodeSegmentLayout)},
       sizeof(NodeSegmentLayout),
       "version 2"},
      {"header size",
       {kNodeSegmentMagic, kNodeSegmentVersion, 100},
       sizeof(NodeSegmentLayout),
       "header size 100"},
      {"truncated", good.header, sizeof(NodeSegmentLayout) / 2, "file size 2080"},
  };
  for (const Case& c : cases) {
    NodeSegmentLayout data = good;
    data.header = c.header;
    WriteFile(&data, c.file_size);
    Status s = open();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << c.what;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.what << ": " << s.message();
    EXPECT_NE(s.message().find("node.v1"), std::string::npos) << c.what << ": " << s.message();
  }
  WriteFile(&good, sizeof(good));
  EXPECT_TRUE(open().ok());
}

TEST_F(NodeSegmentTest, AReaderThatNamesTheDaemonsUidRefusesAnyoneElsesFile) {
  auto w = MakeWriter();
  ASSERT_NE(w, nullptr);
  auto theirs = NodeSegmentReader::Open(
      dir_, {.clock = &clock_, .max_attempts = 1000, .owner = getuid() + 1, .on_retry = {}});
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(theirs.status().message().find("not trusted"), std::string::npos)
      << theirs.status().message();
  auto ours = NodeSegmentReader::Open(
      dir_, {.clock = &clock_, .max_attempts = 1000, .owner = getuid(), .on_retry = {}});
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  EXPECT_TRUE((*ours)->Read().ok());
}

TEST_F(NodeSegmentTest, GoesStaleWhenTheDaemonStopsUpdatingOrStops) {
  auto w = MakeWriter();
  auto r = MakeReader();
  ASSERT_TRUE(w && r);
  w->Publish({Gpu(0)});
  clock_.Advance(kNodeStaleNs);  // exactly the bound: still fresh
  auto s = r->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->stale);
  EXPECT_EQ(s->age_ns, kNodeStaleNs);

  clock_.Advance(1);
  s = r->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->stale);
  EXPECT_EQ(s->gpus.size(), 1u);  // the last values stay readable

  w->Publish({Gpu(0)});
  s = r->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->stale);
  EXPECT_EQ(s->age_ns, 0);

  w->MarkStopped();  // a clean stop: stale at once
  s = r->Read();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->stale);
  EXPECT_EQ(s->daemon_pid, 0);
  EXPECT_EQ(s->gpus.size(), 1u);
}

TEST_F(NodeSegmentTest, AReaderFollowsARestartedDaemonsNewSegment) {
  auto first = MakeWriter(100);
  auto r = MakeReader();
  ASSERT_TRUE(first && r);
  first->Publish({Gpu(0)});
  first->MarkStopped();
  first.reset();
  auto second = MakeWriter(200);
  ASSERT_NE(second, nullptr);
  second->Publish({Gpu(0), Gpu(1)});
  auto s = r->Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->daemon_pid, 200);
  EXPECT_FALSE(s->stale);
  EXPECT_EQ(s->gpus.size(), 2u);
  EXPECT_EQ(Files(), std::vector<std::string>{"node.v1"});

  // A file replaced by something that is not a segment: the reader keeps
  // the last valid one (stale) rather than failing.
  second->MarkStopped();
  second.reset();
  std::filesystem::remove(NodeSegmentWriter::PathFor(dir_));
  WriteFile("junk", 4);
  s = r->Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->stale);
  EXPECT_EQ(s->gpus.size(), 2u);
}

TEST_F(NodeSegmentTest, CreateFailsClearlyWhereTheDirectoryCannotBeMade) {
  std::ofstream(dir_ + "/file") << "x";
  auto w = NodeSegmentWriter::Create(dir_ + "/file/sub", 1, clock_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(w.status().message().find("file/sub"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace gpuslice
