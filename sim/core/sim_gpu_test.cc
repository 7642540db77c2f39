// SimGpu on a real state file, with real processes (fork) where a test is about
// several processes.
#include "sim/core/sim_gpu.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

namespace gpuslice::sim {
namespace {

class SimGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::TempDir() + "/sim_gpu_test." + std::to_string(getpid()) + "." +
            testing::UnitTest::GetInstance()->current_test_info()->name();
    unlink(path_.c_str());
  }
  void TearDown() override { unlink(path_.c_str()); }

  std::unique_ptr<SimGpu> Open(const std::string& config = "") {
    auto gpu = SimGpu::Open({path_, config});
    EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
    return gpu.ok() ? std::move(*gpu) : nullptr;
  }

  // Runs `body` in a child process; returns its exit status.
  template <typename F>
  pid_t Fork(F body) {
    pid_t pid = fork();
    if (pid == 0) _exit(body());
    return pid;
  }
  int Join(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string path_;
};

TEST_F(SimGpuTest, OpenCreatesAndSharesTheState) {
  auto a = Open(R"({"device_count": 2})");
  auto b = Open(R"({"device_count": 2})");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->device_count(), 2);
  auto ctx = a->CreateContext(1);
  ASSERT_TRUE(ctx.ok());
  uint64_t free_bytes, total;
  b->MemoryInfo(1, &free_bytes, &total);
  EXPECT_EQ(total - free_bytes, a->params().context_bytes);
}

TEST_F(SimGpuTest, AnotherConfigReplacesAnUnusedState) {
  { auto a = Open(R"({"device_count": 2})"); }
  auto b = Open(R"({"device_count": 3})");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->device_count(), 3);
}

TEST_F(SimGpuTest, AnotherConfigIsRefusedWhileTheStateIsInUse) {
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = Fork([&] {
    auto gpu = SimGpu::Open({path_, R"({"device_count": 2})"});
    char c = 1;
    if (write(ready[1], &c, 1) != 1) return 1;
    return read(done[0], &c, 1) == 1 && gpu.ok() ? 0 : 1;
  });
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto other = SimGpu::Open({path_, R"({"device_count": 3})"});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find(std::to_string(child)), std::string::npos);
  ASSERT_EQ(write(done[1], &c, 1), 1);
  EXPECT_EQ(Join(child), 0);
}

TEST_F(SimGpuTest, AGarbageFileIsReplacedNotTrusted) {
  FILE* f = fopen(path_.c_str(), "w");
  fputs("not a simulator state", f);
  fclose(f);
  auto gpu = Open();
  ASSERT_TRUE(gpu);
  EXPECT_EQ(gpu->device_count(), 1);
}

TEST_F(SimGpuTest, MalformedConfigIsAClearError) {
  auto gpu = SimGpu::Open({path_, R"({"switch_us": "x"})"});
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("switch_us"), std::string::npos);
}

TEST_F(SimGpuTest, AllocationsRoundToGranularityAndStopAtCapacity) {
  auto gpu = Open(R"({"devices": [{"memory": "1GiB"}], "context_bytes": "100MiB"})");
  auto ctx = gpu->CreateContext(0);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE(gpu->Allocate(*ctx, 1).ok());  // charged 2 MiB
  uint64_t free_bytes, total;
  gpu->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(total - free_bytes, (100ull << 20) + (2ull << 20));
  Status too_big = gpu->Allocate(*ctx, free_bytes + 1);
  EXPECT_EQ(too_big.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(gpu->Allocate(*ctx, free_bytes).ok());
  gpu->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(free_bytes, 0u);
  gpu->Free(*ctx, 1);
  gpu->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(free_bytes, 2ull << 20);
  ASSERT_TRUE(gpu->DestroyContext(*ctx).ok());
  gpu->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(free_bytes, total);
  EXPECT_FALSE(gpu->DestroyContext(*ctx).ok());  // stale handle
}

TEST_F(SimGpuTest, ADeadProcessesMemoryAndContextsAreReclaimed) {
  auto gpu = Open();
  pid_t child = Fork([&] {
    auto own = SimGpu::Open({path_, ""});
    if (!own.ok()) return 1;
    auto ctx = (*own)->CreateContext(0);
    if (!ctx.ok() || !(*own)->Allocate(*ctx, 1ull << 30).ok()) return 2;
    if (!(*own)->EnqueueKernel(*ctx, 10'000'000'000).ok()) return 3;  // 10 s of work
    raise(SIGKILL);
    return 4;
  });
  EXPECT_EQ(Join(child), 128 + SIGKILL);
  uint64_t free_bytes = 0, total = 0;
  gpu->MemoryInfo(0, &free_bytes, &total);
  // Reaping may lag by the reap interval; the next allocation forces it.
  auto ctx = gpu->CreateContext(0);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE(gpu->Allocate(*ctx, total - 2 * gpu->params().context_bytes).ok());
  bool exited = gpu->WithState([&](SimState& s) {
    for (const auto& p : s.processes) {
      if (p.pid == child) return p.status == kProcessExited && p.devices[0].memory_bytes == 0;
    }
    return false;
  });
  EXPECT_TRUE(exited);
}

// A pid means something only in its pid namespace: a record of another
// namespace (a container's pid 1, or a host pid this process cannot see) is
// never taken for dead, while a dead one of this namespace is reclaimed.
TEST_F(SimGpuTest, OnlyRecordsOfTheNamespaceThisProcSeesAreJudged) {
  auto gpu = Open();
  ASSERT_TRUE(gpu);
  EXPECT_EQ(gpu->identity().pid, getpid());
  EXPECT_EQ(gpu->identity().pid_ns, OwnPidNamespace());
  const pid_t dead = Fork([] { return 0; });
  ASSERT_EQ(Join(dead), 0);
  const uint64_t here = OwnPidNamespace();
  ASSERT_NE(here, 0u);
  gpu->WithState([&](SimState& s) {
    int added = 0;
    for (ProcessRecord& p : s.processes) {
      if (p.status != kProcessFree) continue;
      p.status = kProcessAlive;
      p.pid = added == 0 ? dead : 1;  // this namespace's dead child; a container's pid 1
      p.pid_ns = added == 0 ? here : here + 1;
      p.start_time = 12345;
      if (++added == 2) break;
    }
    return added;
  });
  gpu->ResetStats();  // reaps at once
  gpu->WithState([&](SimState& s) {
    int seen = 0;
    for (const ProcessRecord& p : s.processes) {
      if (p.pid == dead && p.pid_ns == here) {
        EXPECT_EQ(p.status, kProcessFree) << "reaped, then dropped by the reset";
        ++seen;
      } else if (p.pid == 1 && p.pid_ns == here + 1) {
        EXPECT_EQ(p.status, kProcessAlive) << "another namespace's pid 1 is not judged";
        ++seen;
      } else if (p.pid == getpid()) {
        EXPECT_EQ(p.status, kProcessAlive);
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2);  // the reaped record was cleared
    return 0;
  });
}

TEST_F(SimGpuTest, ExclusiveProcessModeRefusesASecondProcess) {
  auto gpu = Open();
  gpu->WithState([](SimState& s) { s.devices[0].compute_mode = kComputeExclusiveProcess; });
  auto mine = gpu->CreateContext(0);
  ASSERT_TRUE(mine.ok());
  EXPECT_TRUE(gpu->CreateContext(0).ok());  // the same process may have several
  pid_t child = Fork([&] {
    auto own = SimGpu::Open({path_, ""});
    auto ctx = (*own)->CreateContext(0);
    return !ctx.ok() && ctx.status().code() == StatusCode::kFailedPrecondition ? 0 : 1;
  });
  EXPECT_EQ(Join(child), 0);
}

TEST_F(SimGpuTest, LaunchBlocksAtMaxPendingUntilTheHeadCompletes) {
  auto gpu = Open(R"({"max_pending": 4})");
  auto ctx = gpu->CreateContext(0);
  uint64_t first = 0;
  for (int i = 0; i < 4; ++i) {
    auto seq = gpu->EnqueueKernel(*ctx, 20'000'000);
    ASSERT_TRUE(seq.ok());
    if (i == 0) first = *seq;
  }
  EXPECT_FALSE(gpu->IsComplete(*ctx, first));
  auto fifth = gpu->EnqueueKernel(*ctx, 20'000'000);  // must wait for a free place
  ASSERT_TRUE(fifth.ok());
  EXPECT_TRUE(gpu->IsComplete(*ctx, first));
  ASSERT_TRUE(gpu->Wait(*ctx, *fifth).ok());
  EXPECT_TRUE(gpu->IsComplete(*ctx, *fifth));
}

TEST_F(SimGpuTest, EventsTimestampTheirPlaceInTheQueue) {
  auto gpu = Open();
  auto ctx = gpu->CreateContext(0);
  auto start = gpu->AllocateEventSlot(*ctx);
  auto stop = gpu->AllocateEventSlot(*ctx);
  ASSERT_TRUE(start.ok() && stop.ok());
  // Behind 50 ms of work, so host time between the calls cannot show.
  ASSERT_TRUE(gpu->EnqueueKernel(*ctx, 50'000'000).ok());
  uint64_t s0 = *gpu->EnqueueEventRecord(*ctx, *start);
  ASSERT_TRUE(gpu->EnqueueKernel(*ctx, 5'000'000).ok());
  uint64_t s1 = *gpu->EnqueueEventRecord(*ctx, *stop);
  ASSERT_TRUE(gpu->Wait(*ctx, s1).ok());
  int64_t t0, t1;
  ASSERT_TRUE(gpu->EventTime(*ctx, *start, s0, &t0));
  ASSERT_TRUE(gpu->EventTime(*ctx, *stop, s1, &t1));
  EXPECT_EQ(t1 - t0, 5'000'000);  // exactly the kernel between them
}

TEST_F(SimGpuTest, KernelDurationFollowsTheModel) {
  auto gpu =
      Open(R"({"launch_ns": 1000, "wave_ns": 10000, "functions": {"big": {"wave_ns": 50000}}})");
  EXPECT_EQ(gpu->KernelDurationNs(0, "gpuslice_sim_spin", 1, 1, 123456), 123456);
  // 132 SMs x (2048/256 = 8 blocks per SM) = 1056 blocks per wave.
  EXPECT_EQ(gpu->KernelDurationNs(0, "k", 1056, 256, 0), 1000 + 10000);
  EXPECT_EQ(gpu->KernelDurationNs(0, "k", 1057, 256, 0), 1000 + 20000);
  EXPECT_EQ(gpu->KernelDurationNs(0, "big", 1, 1024, 0), 1000 + 50000);
  gpu->WithState([](SimState& s) { s.devices[0].locked_sm_max_mhz = 990; });  // half clock
  EXPECT_EQ(gpu->KernelDurationNs(0, "k", 1, 256, 0), 1000 + 20000);
}

TEST_F(SimGpuTest, ResetKeepsLiveStateAndDropsExitedProcesses) {
  auto gpu = Open();
  auto ctx = gpu->CreateContext(0);
  ASSERT_TRUE(gpu->Wait(*ctx, *gpu->EnqueueKernel(*ctx, 1'000'000)).ok());
  pid_t child = Fork([&] { return SimGpu::Open({path_, ""}).ok() ? 0 : 1; });
  EXPECT_EQ(Join(child), 0);
  gpu->ResetStats();
  gpu->WithState([&](SimState& s) {
    EXPECT_EQ(s.devices[0].kernels, 0u);
    EXPECT_EQ(s.devices[0].busy_ns, 0);
    EXPECT_EQ(s.devices[0].used_bytes, s.params.context_bytes);
    for (const auto& p : s.processes) EXPECT_NE(p.pid, child);
  });
}

TEST_F(SimGpuTest, ObserverSeesStateButIsNotAProcess) {
  auto gpu = Open();
  auto ctx = gpu->CreateContext(0);
  ASSERT_TRUE(ctx.ok());
  auto observer = SimGpu::Open({path_, R"({"device_count": 3})", /*observer=*/true});
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();  // any config is accepted
  EXPECT_EQ((*observer)->device_count(), 1);
  EXPECT_FALSE((*observer)->CreateContext(0).ok());
  int registered = (*observer)->WithState([](SimState& s) {
    int n = 0;
    for (const auto& p : s.processes) n += p.status == kProcessAlive;
    return n;
  });
  EXPECT_EQ(registered, 1);  // only `gpu`
  uint64_t free_bytes, total;
  (*observer)->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(total - free_bytes, gpu->params().context_bytes);
}

}  // namespace
}  // namespace gpuslice::sim
