// The r615 per-cgroup memory limits: the pure rules, then SimGpu enforcing them
// for this process placed in a cgroup through GPUSLICE_SIM_CGROUP_FILE.
#include "sim/core/memory_limits.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "sim/core/config.h"
#include "sim/core/sim_gpu.h"
#include "sim/core/stats.h"

namespace gpuslice::sim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(MemoryLimits, UnifiedLineIsTheCgroupV2Path) {
  EXPECT_EQ(UnifiedCgroupPath("0::/tenants/a\n"), "/tenants/a");
  EXPECT_EQ(UnifiedCgroupPath("12:memory:/x\n3:cpu:/y\n0::/kubepods/pod1/c\n"), "/kubepods/pod1/c");
  EXPECT_EQ(UnifiedCgroupPath("0::/"), "/");
  EXPECT_EQ(UnifiedCgroupPath("12:memory:/x\n"), "");  // cgroup v1 only
  EXPECT_EQ(UnifiedCgroupPath(""), "");
}

TEST(MemoryLimits, AtOrBelowComparesWholeComponents) {
  EXPECT_TRUE(CgroupAtOrBelow("/sys/fs/cgroup/a", "/sys/fs/cgroup/a"));
  EXPECT_TRUE(CgroupAtOrBelow("/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a"));
  EXPECT_TRUE(CgroupAtOrBelow("/sys/fs/cgroup/a/", "/sys/fs/cgroup/a"));
  EXPECT_FALSE(CgroupAtOrBelow("/sys/fs/cgroup/ab", "/sys/fs/cgroup/a"));
  EXPECT_FALSE(CgroupAtOrBelow("/sys/fs/cgroup", "/sys/fs/cgroup/a"));
  EXPECT_FALSE(CgroupAtOrBelow("", "/sys/fs/cgroup/a"));
}

TEST(MemoryLimits, DriverVersionDecidesWhetherTheApiExists) {
  EXPECT_EQ(DriverMajorVersion("580.65.06"), 580);
  EXPECT_EQ(DriverMajorVersion("615.10"), 615);
  EXPECT_EQ(DriverMajorVersion("615"), -1);
  EXPECT_EQ(DriverMajorVersion("615.x"), -1);
  EXPECT_FALSE(HasCgroupMemoryLimits(kDefaultDriverVersion));
  EXPECT_TRUE(HasCgroupMemoryLimits("615.10"));
  EXPECT_TRUE(HasCgroupMemoryLimits("620.1.2"));
  EXPECT_FALSE(HasCgroupMemoryLimits("614.99"));

  auto c = ParseSimConfig(R"({"driver_version": "615.10", "devices": [{"mig": true}]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_STREQ(c->params.driver_version, "615.10");
  EXPECT_EQ(c->devices[0].mig_enabled, 1u);
  EXPECT_STREQ(ParseSimConfig("{}")->params.driver_version, kDefaultDriverVersion);
  EXPECT_FALSE(ParseSimConfig(R"({"driver_version": "r615"})").ok());
  EXPECT_FALSE(ParseSimConfig(R"({"driver_version": 615})").ok());
}

TEST(MemoryLimits, SetClearAndTableFull) {
  auto d = std::make_unique<DeviceState>();
  *d = DeviceState{};
  EXPECT_TRUE(SetMemoryLimit(*d, "/sys/fs/cgroup/a", 1 * kMiB, 4 * kMiB).ok());
  const MemoryLimitRecord* m = FindMemoryLimit(*d, "/sys/fs/cgroup/a/");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->soft_bytes, 1 * kMiB);
  EXPECT_EQ(m->hard_bytes, 4 * kMiB);
  EXPECT_TRUE(SetMemoryLimit(*d, "/sys/fs/cgroup/a", 2 * kMiB, 8 * kMiB).ok());  // replaces
  EXPECT_EQ(FindMemoryLimit(*d, "/sys/fs/cgroup/a")->hard_bytes, 8 * kMiB);
  EXPECT_FALSE(SetMemoryLimit(*d, "/sys/fs/cgroup/a", 9 * kMiB, 8 * kMiB).ok());
  EXPECT_FALSE(SetMemoryLimit(*d, "relative", 0, 8 * kMiB).ok());
  EXPECT_TRUE(SetMemoryLimit(*d, "/sys/fs/cgroup/a", 0, kMemoryLimitMax).ok());  // clears
  EXPECT_EQ(FindMemoryLimit(*d, "/sys/fs/cgroup/a"), nullptr);
  for (int i = 0; i < kMaxMemoryLimits; ++i) {
    ASSERT_TRUE(SetMemoryLimit(*d, "/c/" + std::to_string(i), 0, kMiB).ok());
  }
  EXPECT_EQ(SetMemoryLimit(*d, "/c/full", 0, kMiB).code(), StatusCode::kResourceExhausted);
}

TEST(MemoryLimits, RemovedCgroupsLoseTheirLimits) {
  auto d = std::make_unique<DeviceState>();
  *d = DeviceState{};
  const std::string dir = testing::TempDir() + "/ml_prune." + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_TRUE(SetMemoryLimit(*d, dir, 0, kMiB).ok());
  PruneRemovedCgroups(*d);
  EXPECT_NE(FindMemoryLimit(*d, dir), nullptr);
  rmdir(dir.c_str());
  PruneRemovedCgroups(*d);
  EXPECT_EQ(FindMemoryLimit(*d, dir), nullptr);
}

// This process in cgroup /tenants/a/job under a fake root.
class CgroupEnforcementTest : public ::testing::Test {
 protected:
  static constexpr const char* kConfig = R"({"context_bytes": "100MiB",
        "devices": [{"memory": "8GiB"}]})";
  void SetUp() override {
    base_ = testing::TempDir() + "/ml_test." + std::to_string(getpid()) + "." +
            testing::UnitTest::GetInstance()->current_test_info()->name();
    mkdir(base_.c_str(), 0700);
    cgroup_file_ = base_ + "/cgroup";
    std::ofstream(cgroup_file_) << "0::/tenants/a/job\n";
    setenv("GPUSLICE_SIM_CGROUP_FILE", cgroup_file_.c_str(), 1);
    setenv("GPUSLICE_SIM_CGROUP_ROOT", "/fake/cg", 1);
    auto gpu = SimGpu::Open({base_ + "/state", kConfig});
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpu_ = std::move(*gpu);
  }
  void TearDown() override {
    gpu_.reset();
    unsetenv("GPUSLICE_SIM_CGROUP_FILE");
    unsetenv("GPUSLICE_SIM_CGROUP_ROOT");
    unlink((base_ + "/state").c_str());
    unlink(cgroup_file_.c_str());
    rmdir(base_.c_str());
  }
  void Limit(const char* cgroup, uint64_t soft, uint64_t hard) {
    gpu_->WithState(
        [&](SimState& s) { ASSERT_TRUE(SetMemoryLimit(s.devices[0], cgroup, soft, hard).ok()); });
  }

  std::string base_, cgroup_file_;
  std::unique_ptr<SimGpu> gpu_;
};

TEST_F(CgroupEnforcementTest, ProcessRecordsItsCgroup) {
  gpu_->WithState([&](SimState& s) {
    EXPECT_STREQ(s.processes[gpu_->process_slot()].cgroup, "/fake/cg/tenants/a/job");
  });
}

TEST_F(CgroupEnforcementTest, HardLimitOfAnAncestorRefusesAndInfoReportsIt) {
  Limit("/fake/cg/tenants/a", 256 * kMiB, 1024 * kMiB);
  Limit("/fake/cg/tenants/b", 0, 128 * kMiB);  // a sibling's limit does not apply
  auto ctx = gpu_->CreateContext(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();  // 100 MiB reservation, charged
  uint64_t free_bytes = 0, total = 0;
  gpu_->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(total, 1024 * kMiB);
  EXPECT_EQ(free_bytes, 924 * kMiB);

  EXPECT_TRUE(gpu_->Allocate(*ctx, 900 * kMiB).ok());
  Status s = gpu_->Allocate(*ctx, 30 * kMiB);  // 100 + 900 + 30 > 1024
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("/fake/cg/tenants/a"), std::string::npos) << s.message();
  EXPECT_TRUE(gpu_->Allocate(*ctx, 24 * kMiB).ok());  // exactly to the limit
  gpu_->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(free_bytes, 0u);
  gpu_->WithState([&](SimState& st) {
    EXPECT_EQ(CgroupUsedBytes(st, 0, "/fake/cg/tenants/a"), 1024 * kMiB);
    EXPECT_EQ(CgroupUsedBytes(st, 0, "/fake/cg/tenants/b"), 0u);
    // Ground truth for benchmarks: `gpuslice sim stats --json`.
    const nlohmann::json j = StatsJson(st, gpu_->NowNs());
    EXPECT_EQ(j["driver_version"], kDefaultDriverVersion);
    const auto& limits = j["devices"][0]["memory_limits"];
    ASSERT_EQ(limits.size(), 2u) << limits.dump();
    EXPECT_EQ(limits[0]["cgroup"], "/fake/cg/tenants/a");
    EXPECT_EQ(limits[0]["soft_bytes"], 256 * kMiB);
    EXPECT_EQ(limits[0]["hard_bytes"], 1024 * kMiB);
    EXPECT_EQ(limits[0]["used_bytes"], 1024 * kMiB);
    EXPECT_EQ(limits[1]["used_bytes"], 0u);
    bool found = false;
    for (const auto& p : j["processes"]) {
      if (p["pid"] == getpid()) found = p["cgroup"] == "/fake/cg/tenants/a/job";
    }
    EXPECT_TRUE(found) << j["processes"].dump();
  });

  // Managed memory is charged to the device, not to the cgroup.
  EXPECT_TRUE(gpu_->Allocate(*ctx, 512 * kMiB, /*managed=*/true).ok());
  gpu_->WithState([&](SimState& st) {
    EXPECT_EQ(CgroupUsedBytes(st, 0, "/fake/cg/tenants/a"), 1024 * kMiB);
    EXPECT_EQ(st.devices[0].used_bytes, 1536 * kMiB);
  });
  gpu_->Free(*ctx, 512 * kMiB, /*managed=*/true);

  // Clearing lifts it: the device's own view again.
  Limit("/fake/cg/tenants/a", 0, kMemoryLimitMax);
  EXPECT_TRUE(gpu_->Allocate(*ctx, 30 * kMiB).ok());
  gpu_->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(total, 8192 * kMiB);
  EXPECT_TRUE(gpu_->DestroyContext(*ctx).ok());
}

// A process of the cgroup that died holding its memory (SIGKILL, nothing
// freed) does not keep the next one out: its memory is the cgroup's no more.
TEST_F(CgroupEnforcementTest, ADeadMembersMemoryIsNotChargedToTheCgroup) {
  Limit("/fake/cg/tenants/a", 0, 512 * kMiB);
  const std::string state = base_ + "/state";
  const pid_t child = fork();
  if (child == 0) {
    auto own = SimGpu::Open({state, kConfig});
    if (!own.ok()) _exit(1);
    auto ctx = (*own)->CreateContext(0);
    if (!ctx.ok() || !(*own)->Allocate(*ctx, 400 * kMiB).ok()) _exit(2);  // 500 of 512 MiB
    raise(SIGKILL);
    _exit(3);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  // At once, without waiting for the reap interval.
  auto ctx = gpu_->CreateContext(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  EXPECT_TRUE(gpu_->Allocate(*ctx, 400 * kMiB).ok());
  EXPECT_TRUE(gpu_->DestroyContext(*ctx).ok());
}

TEST_F(CgroupEnforcementTest, TightestOfNestedLimitsWinsAndContextsAreCharged) {
  Limit("/fake/cg/tenants/a", 0, 4096 * kMiB);
  Limit("/fake/cg/tenants/a/job", 0, 50 * kMiB);  // below the context reservation
  auto ctx = gpu_->CreateContext(0);
  EXPECT_EQ(ctx.status().code(), StatusCode::kResourceExhausted);
  Limit("/fake/cg/tenants/a/job", 0, 300 * kMiB);
  ctx = gpu_->CreateContext(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  uint64_t free_bytes = 0, total = 0;
  gpu_->MemoryInfo(0, &free_bytes, &total);
  EXPECT_EQ(total, 300 * kMiB);
  EXPECT_EQ(free_bytes, 200 * kMiB);
  EXPECT_FALSE(gpu_->Allocate(*ctx, 202 * kMiB).ok());
  EXPECT_TRUE(gpu_->Allocate(*ctx, 200 * kMiB).ok());
  EXPECT_TRUE(gpu_->DestroyContext(*ctx).ok());
}

// Soft-limit eviction (opt-in): a process within its soft limit evicts a
// borrower's context when the device is full; without the option it fails.
// A borrower is a process whose cgroup uses more than its soft limit
// (dmem.min): one with a soft limit below its use, or one with no limit at
// all (dmem.min is 0 where none is set, so all of its use is borrowed). A
// process whose cgroup is within its own soft limit is never evicted.
enum class Borrower { kAboveItsSoftLimit, kWithoutALimit, kWithinItsSoftLimit };
struct EvictionCase {
  bool eviction;
  Borrower other;
};

class SoftLimitEvictionTest : public ::testing::TestWithParam<EvictionCase> {};

TEST_P(SoftLimitEvictionTest, WithinGuaranteeEvictsABorrowerOnly) {
  const bool eviction = GetParam().eviction;
  const Borrower other = GetParam().other;  // a plain variable: the lambdas below capture it
  // Evicted: the other process's calls fail afterwards; else it still works.
  const bool evicts = eviction && other != Borrower::kWithinItsSoftLimit;
  const std::string base = testing::TempDir() + "/ml_evict." + std::to_string(getpid()) + "." +
                           std::to_string(eviction) + std::to_string(static_cast<int>(other));
  mkdir(base.c_str(), 0700);
  const std::string state = base + "/state";
  const std::string config =
      std::string(R"({"context_bytes": "100MiB", "devices": [{"memory": "8GiB"}],
      "driver_version": "615.10", "soft_limit_eviction": )") +
      (eviction ? "true" : "false") + "}";
  setenv("GPUSLICE_SIM_CGROUP_ROOT", "/fake/cg", 1);
  auto place = [&](const char* rel) {
    const std::string f = base + "/cgroup." + std::to_string(getpid());
    std::ofstream(f) << "0::" << rel << "\n";
    setenv("GPUSLICE_SIM_CGROUP_FILE", f.c_str(), 1);
  };
  int ready[2], go[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the other process: 6 GiB in /b
    place("/b");
    auto gpu = SimGpu::Open({state, config});
    char byte = 0;
    if (!gpu.ok()) _exit(10);
    auto ctx = (*gpu)->CreateContext(0);
    if (!ctx.ok() || !(*gpu)->Allocate(*ctx, 6144 * kMiB).ok()) _exit(11);
    if (write(ready[1], "r", 1) != 1 || read(go[0], &byte, 1) != 1) _exit(12);
    const Status s = (*gpu)->Allocate(*ctx, 2 * kMiB);
    const int code = IsMpsClientTerminated(s) ? 1 : (s.ok() ? 0 : 13);
    if (write(done[1], "d", 1) != 1) _exit(14);
    _exit(code);
  }
  char byte = 0;
  place("/a");
  auto gpu = SimGpu::Open({state, config});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  (*gpu)->WithState([&](SimState& s) {
    ASSERT_TRUE(SetMemoryLimit(s.devices[0], "/fake/cg/a", 4096 * kMiB, 8192 * kMiB).ok());
    if (other == Borrower::kAboveItsSoftLimit) {
      ASSERT_TRUE(SetMemoryLimit(s.devices[0], "/fake/cg/b", 512 * kMiB, 8192 * kMiB).ok());
    } else if (other == Borrower::kWithinItsSoftLimit) {
      ASSERT_TRUE(SetMemoryLimit(s.devices[0], "/fake/cg/b", 7168 * kMiB, 8192 * kMiB).ok());
    }
  });
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  auto ctx = (*gpu)->CreateContext(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  // 8192 - 2 x 100 (contexts) - 6144 leaves 1848 MiB; A is within its 4 GiB.
  const Status s = (*gpu)->Allocate(*ctx, 3072 * kMiB);
  EXPECT_EQ(s.ok(), evicts) << s.ToString();
  ASSERT_EQ(write(go[1], "g", 1), 1);
  ASSERT_EQ(read(done[0], &byte, 1), 1);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), evicts ? 1 : 0);
  gpu->reset();
  unsetenv("GPUSLICE_SIM_CGROUP_FILE");
  unsetenv("GPUSLICE_SIM_CGROUP_ROOT");
  for (int fd : {ready[0], ready[1], go[0], go[1], done[0], done[1]}) close(fd);
  system(("rm -rf '" + base + "'").c_str());
}

std::string Name(const EvictionCase& c) {
  static const char* const kOther[] = {"AboveItsSoftLimit", "WithoutALimit", "WithinItsSoftLimit"};
  return std::string(c.eviction ? "On" : "Off") + kOther[static_cast<int>(c.other)];
}
std::string EvictionCaseName(const ::testing::TestParamInfo<EvictionCase>& param_info) {
  return Name(param_info.param);
}
// Names the case in test listings (GoogleTest prints an unknown type's
// bytes, padding included, which change from run to run).
void PrintTo(const EvictionCase& c, std::ostream* os) { *os << Name(c); }

INSTANTIATE_TEST_SUITE_P(Cases, SoftLimitEvictionTest,
                         ::testing::Values(EvictionCase{false, Borrower::kAboveItsSoftLimit},
                                           EvictionCase{true, Borrower::kAboveItsSoftLimit},
                                           EvictionCase{false, Borrower::kWithoutALimit},
                                           EvictionCase{true, Borrower::kWithoutALimit},
                                           EvictionCase{true, Borrower::kWithinItsSoftLimit}),
                         EvictionCaseName);

}  // namespace
}  // namespace gpuslice::sim
