// Fault injection for the daemon's durable records (docs/errors.md): a full
// disk while checkpointing, the daemon killed in the middle of a checkpoint,
// the temporary file such a kill leaves behind. The outcome promised in every
// case: the last good record is still there and loads whole.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/log.h"
#include "daemon/state/state_store.h"

namespace gpuslice::daemon {
namespace {

constexpr size_t kBig = size_t{64} << 10;    // 64 KiB: far past the size limit below
constexpr size_t kHuge = size_t{256} << 10;  // 256 KiB: a save takes a while

class StateStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/state_store_fault." + std::to_string(getpid()) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A record of `bytes` bytes whose every part says `n`, so a mix of two
  // saves is detectable.
  static nlohmann::json Record(int n, size_t bytes) {
    return {{"n", n}, {"pad", std::string(bytes, static_cast<char>('a' + n % 26))}, {"end", n}};
  }
  static bool Whole(const nlohmann::json& r) {
    if (!r.contains("n") || !r.contains("end") || !r.contains("pad")) return false;
    const int n = r["n"];
    const std::string pad = r["pad"];
    return r["end"] == n &&
           pad.find_first_not_of(static_cast<char>('a' + n % 26)) == std::string::npos;
  }

  std::string dir_;
  std::unique_ptr<StateStore> store_;
};

// The file-size limit makes write(2) fail part way (EFBIG), as a full disk
// does (ENOSPC): the same path through WriteAtomically.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ignore, &saved_action_);  // else the kernel kills us
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  struct sigaction saved_action_ {};
};

TEST_F(StateStoreFaultTest, FullDiskWhileCheckpointingKeepsTheLastGoodRecord) {
  ASSERT_TRUE(store_->Save("leases", Record(1, 100)).ok());
  {
    FileSizeLimit full(4096);
    const Status s = store_->Save("leases", Record(2, kBig));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("cannot write"), std::string::npos) << s.message();
    const Status serialized = store_->SaveSerialized("leases", Record(3, kBig).dump());
    EXPECT_EQ(serialized.code(), StatusCode::kUnavailable);
  }
  auto loaded = store_->Load("leases");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->at("n"), 1);
  EXPECT_TRUE(Whole(*loaded));
  EXPECT_FALSE(std::filesystem::exists(store_->PathOf("leases") + ".tmp"));
  // Space again: the next checkpoint goes through.
  ASSERT_TRUE(store_->Save("leases", Record(4, kBig)).ok());
  EXPECT_EQ(store_->Load("leases")->at("n"), 4);
}

// Rules 1-3 of state_store.h: a full disk is counted on every failed save,
// logged once per run of failures, and the record reported stale until a save
// of it works again; other records are not affected.
TEST_F(StateStoreFaultTest, AFullDiskIsCountedLoggedOnceAndTheRecordStaleUntilASaveWorks) {
  SetLogLevel(LogLevel::kInfo);
  ASSERT_TRUE(store_->Save("leases", Record(1, 100)).ok());
  ASSERT_TRUE(store_->Save("groups", Record(1, 100)).ok());
  EXPECT_FALSE(store_->Stale("leases"));
  ::testing::internal::CaptureStderr();
  {
    FileSizeLimit full(4096);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(store_->Save("leases", Record(2 + i, kBig)).code(), StatusCode::kUnavailable);
    }
    EXPECT_EQ(store_->SaveSerialized("leases", Record(9, kBig).dump()).code(),
              StatusCode::kUnavailable);
  }
  const std::string during = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(store_->Stale("leases"));
  EXPECT_FALSE(store_->Stale("groups"));
  EXPECT_EQ(store_->SaveFailures("leases"), 4u);
  EXPECT_EQ(store_->SaveFailures("groups"), 0u);
  size_t logged = 0;
  for (size_t at = during.find("event=state_save_failed"); at != std::string::npos;
       at = during.find("event=state_save_failed", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << during;
  EXPECT_NE(during.find("record=leases"), std::string::npos) << during;
  const std::string metrics = store_->FormatMetrics();
  EXPECT_NE(metrics.find("gpuslice_state_save_failures_total{record=\"leases\"} 4\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_state_record_stale{record=\"leases\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_state_record_stale{record=\"groups\"} 0\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(store_->Load("leases")->at("n"), 1);  // the previous file, whole
  // Space again: the owner's next save works, is logged, and clears the gauge.
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(store_->Save("leases", Record(5, 100)).ok());
  const std::string after = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(after.find("event=state_saved_again record=leases failed_saves=4"), std::string::npos)
      << after;
  EXPECT_FALSE(store_->Stale("leases"));
  EXPECT_EQ(store_->SaveFailures("leases"), 4u);
  EXPECT_NE(store_->FormatMetrics().find("gpuslice_state_record_stale{record=\"leases\"} 0\n"),
            std::string::npos);
}

TEST_F(StateStoreFaultTest, LeftoverTemporaryFileOfAKilledSaveIsIgnoredThenReplaced) {
  ASSERT_TRUE(store_->Save("tenants", Record(1, 10)).ok());
  std::ofstream(store_->PathOf("tenants") + ".tmp") << R"({"format":"gpuslice-state","ver)";
  auto loaded = store_->Load("tenants");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->at("n"), 1);
  ASSERT_TRUE(store_->Save("tenants", Record(2, 10)).ok());
  EXPECT_EQ(store_->Load("tenants")->at("n"), 2);
  EXPECT_FALSE(std::filesystem::exists(store_->PathOf("tenants") + ".tmp"));
}

// A child process saves ever newer records; it is SIGKILLed at an arbitrary
// point of a save, many times. Whenever it dies, the record on disk is one
// complete save (the newest finished one, or the one being renamed in),
// never a mix and never absent.
TEST_F(StateStoreFaultTest, KilledMidCheckpointLeavesAWholeRecord) {
  constexpr int kRounds = 12;
  int last_seen = 0;
  for (int round = 0; round < kRounds; ++round) {
    const int start = last_seen + 1;
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int n = start;; ++n) (void)store_->Save("groups", Record(n, kHuge));
    }
    // Wait (with a deadline) until the child has finished at least one save
    // of this round, then kill it wherever it is.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    bool progressed = false;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = store_->Load("groups");
      if (r.ok() && Whole(*r) && r->at("n").get<int>() >= start + round % 3) {
        progressed = true;
        break;
      }
      std::this_thread::yield();
    }
    ASSERT_GT(child, 0);
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(progressed) << "the child never finished a save";
    auto r = store_->Load("groups");
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_TRUE(Whole(*r)) << "a mix of two saves after a kill in round " << round;
    EXPECT_GE(r->at("n").get<int>(), start);
    last_seen = r->at("n");
  }
  // The daemon that comes back saves over whatever temporary file is left.
  ASSERT_TRUE(store_->Save("groups", Record(0, 10)).ok());
  EXPECT_FALSE(std::filesystem::exists(store_->PathOf("groups") + ".tmp"));
}

}  // namespace
}  // namespace gpuslice::daemon
