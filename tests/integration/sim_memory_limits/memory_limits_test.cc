// The r615 per-cgroup memory limits end to end on the simulated GPU, without
// the limiter: an admin process sets a limit through NVML (or nvidia-smi), a
// worker process in the limited cgroup is refused allocations above the hard
// limit by the simulated driver itself and sees the limit in cuMemGetInfo and
// nvmlDeviceGetMemoryInfo_v2. An older driver says the API is absent.
//
// Cgroups: a fake cgroup v2 root in a temporary directory
// (GPUSLICE_SIM_CGROUP_ROOT, GPUSLICE_SIM_CGROUP_FILE) always; the real
// /sys/fs/cgroup when it is cgroup2, writable and we are root (else skipped).
//
// Every process that loads a simulated library is a forked child, so each
// gets its own environment (its cgroup) before the library reads it; a child
// reports gtest failures through its exit status.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "cuda_abi/cuda_driver_api.h"
#include "nvml_abi/nvml.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

std::string BuildDir() {
  const char* dir = getenv("GPUSLICE_BUILD_DIR");
  return dir != nullptr ? dir : ".";
}

void* Open(const char* lib) {
  void* h = dlopen((BuildDir() + "/sim/lib/" + lib).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) ADD_FAILURE() << dlerror();
  return h;
}
void* Sym(void* lib, const char* name) {
  void* p = lib != nullptr ? dlsym(lib, name) : nullptr;
  if (p == nullptr) ADD_FAILURE() << "no export " << name;
  return p;
}
#define CU(name) (reinterpret_cast<decltype(&::name)>(Sym(cuda, #name)))
#define NVML(name) (reinterpret_cast<decltype(&::name)>(Sym(nvml, #name)))

// Runs body() in a forked child; returns its exit status (non-zero when a
// gtest expectation failed there).
template <typename F>
int InChild(F body) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    body();
    fflush(stdout);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  if (pid < 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Output and exit code of a shell command.
int Shell(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[512];
  out->clear();
  while (fgets(buf, sizeof buf, p) != nullptr) *out += buf;
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class SimMemoryLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/sim_memory_limits." + std::to_string(getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "'").c_str()), 0);
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/sim.state").c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) system(("rm -rf '" + dir_ + "'").c_str());
    unsetenv("GPUSLICE_SIM_CGROUP_ROOT");
    unsetenv("GPUSLICE_SIM_CGROUP_FILE");
  }

  void Config(const std::string& driver_version, bool mig = false) {
    std::string json =
        R"({"devices": [{"memory": "16GiB")" + std::string(mig ? R"(, "mig": true)" : "") + "}]";
    if (!driver_version.empty()) json += R"(, "driver_version": ")" + driver_version + "\"";
    setenv("GPUSLICE_SIM_CONFIG", (json + "}").c_str(), 1);
  }

  // A fake cgroup v2 root with tenants/a; this process (and children) are in
  // `self` below it.
  std::string FakeRoot(const std::string& self) {
    std::string root = dir_ + "/cgroup";
    EXPECT_EQ(
        system(("mkdir -p '" + root + "/tenants/a/job' && touch '" + root + "/cgroup.controllers'")
                   .c_str()),
        0);
    setenv("GPUSLICE_SIM_CGROUP_ROOT", root.c_str(), 1);
    PlaceIn(self);
    return root;
  }
  void PlaceIn(const std::string& rel) {
    const std::string file = dir_ + "/proc_self_cgroup";
    std::ofstream(file) << "0::" << rel << "\n";
    setenv("GPUSLICE_SIM_CGROUP_FILE", file.c_str(), 1);
  }

  static nvmlReturn_t SetLimit(const std::string& cgroup, uint64_t soft, uint64_t hard) {
    void* nvml = Open("libnvidia-ml.so.1");
    EXPECT_EQ(NVML(nvmlInit_v2)(), NVML_SUCCESS);
    nvmlDevice_t dev = nullptr;
    EXPECT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(0, &dev), NVML_SUCCESS);
    nvmlSetMemoryLimits_v1_t l{cgroup.c_str(), soft, hard};
    nvmlReturn_t r = NVML(nvmlDeviceSetMemoryLimits_v1)(dev, &l);
    NVML(nvmlShutdown)();
    return r;
  }

  // A worker in a cgroup under a 1 GiB hard limit: refused above it without
  // any limiter, and sees the limit in both memory infos.
  static void WorkerUnderOneGiB(const std::string& limited_cgroup) {
    void* cuda = Open("libcuda.so.1");
    ASSERT_EQ(CU(cuInit)(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuCtxSetCurrent)(ctx), CUDA_SUCCESS);
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(CU(cuMemGetInfo_v2)(&free_bytes, &total), CUDA_SUCCESS);
    EXPECT_EQ(total, kGiB);
    EXPECT_LT(free_bytes, kGiB);  // the context's reservation is charged
    CUdeviceptr big = 0, small = 0, managed = 0;
    EXPECT_EQ(CU(cuMemAlloc_v2)(&big, 2 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(CU(cuMemAlloc_v2)(&big, free_bytes + 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(CU(cuMemAlloc_v2)(&small, free_bytes), CUDA_SUCCESS);  // exactly the rest
    EXPECT_EQ(CU(cuMemAlloc_v2)(&big, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    // Managed memory is not counted against the limit.
    EXPECT_EQ(CU(cuMemAllocManaged)(&managed, 2 * kGiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);

    void* nvml = Open("libnvidia-ml.so.1");
    ASSERT_EQ(NVML(nvmlInit_v2)(), NVML_SUCCESS);
    nvmlDevice_t dev = nullptr;
    ASSERT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(0, &dev), NVML_SUCCESS);
    nvmlMemory_v2_t mem{};
    mem.version = nvmlMemory_v2;
    ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo_v2)(dev, &mem), NVML_SUCCESS);
    EXPECT_EQ(mem.total, kGiB);
    EXPECT_EQ(mem.used, kGiB);
    EXPECT_EQ(mem.free, 0u);
    nvmlGetMemoryLimits_v1_t got{};
    got.nameSpace = limited_cgroup.c_str();
    ASSERT_EQ(NVML(nvmlDeviceGetMemoryLimits_v1)(dev, &got), NVML_SUCCESS);
    EXPECT_EQ(got.hardLimit, kGiB);
    EXPECT_EQ(got.softLimit, 256 * kMiB);
    EXPECT_EQ(got.currentUsed, kGiB);  // managed memory excluded
    NVML(nvmlShutdown)();
    EXPECT_EQ(CU(cuMemFree_v2)(small), CUDA_SUCCESS);
    EXPECT_EQ(CU(cuMemFree_v2)(managed), CUDA_SUCCESS);
  }

  std::string dir_;
};

TEST_F(SimMemoryLimitsTest, R615RefusesAboveTheHardLimitWithoutTheLimiter) {
  Config("615.10");
  const std::string root = FakeRoot("/");
  const std::string a = root + "/tenants/a";
  EXPECT_EQ(InChild([&] { EXPECT_EQ(SetLimit(a, 256 * kMiB, kGiB), NVML_SUCCESS); }), 0);
  PlaceIn("/tenants/a/job");  // below the limited cgroup
  EXPECT_EQ(InChild([&] { WorkerUnderOneGiB(a); }), 0);

  // Outside the cgroup the device's own size is seen.
  PlaceIn("/");
  EXPECT_EQ(InChild([&] {
              void* cuda = Open("libcuda.so.1");
              ASSERT_EQ(CU(cuInit)(0), CUDA_SUCCESS);
              CUcontext ctx = nullptr;
              ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
              ASSERT_EQ(CU(cuCtxSetCurrent)(ctx), CUDA_SUCCESS);
              size_t free_bytes = 0, total = 0;
              ASSERT_EQ(CU(cuMemGetInfo_v2)(&free_bytes, &total), CUDA_SUCCESS);
              EXPECT_EQ(total, 16 * kGiB);
              CUdeviceptr p = 0;
              EXPECT_EQ(CU(cuMemAlloc_v2)(&p, 2 * kGiB), CUDA_SUCCESS);
            }),
            0);
}

TEST_F(SimMemoryLimitsTest, SettersNeedRootAnExistingCgroupAndAPlainDevice) {
  Config("615.10");
  const std::string root = FakeRoot("/");
  EXPECT_EQ(InChild([&] {
              EXPECT_EQ(SetLimit(root + "/nope", 0, kGiB), NVML_ERROR_NOT_FOUND);
              EXPECT_EQ(SetLimit("/elsewhere/x", 0, kGiB), NVML_ERROR_INVALID_ARGUMENT);
              EXPECT_EQ(SetLimit(root + "/tenants/a", 2 * kGiB, kGiB), NVML_ERROR_INVALID_ARGUMENT);
              setenv("GPUSLICE_SIM_AS_USER", "1", 1);
              EXPECT_EQ(SetLimit(root + "/tenants/a", 0, kGiB), NVML_ERROR_NO_PERMISSION);
            }),
            0);
  // No cgroup v2: not supported.
  unlink((root + "/cgroup.controllers").c_str());
  EXPECT_EQ(
      InChild([&] { EXPECT_EQ(SetLimit(root + "/tenants/a", 0, kGiB), NVML_ERROR_NOT_SUPPORTED); }),
      0);
}

TEST_F(SimMemoryLimitsTest, MigDeviceIsNotSupported) {
  Config("615.10", /*mig=*/true);
  const std::string root = FakeRoot("/");
  EXPECT_EQ(
      InChild([&] { EXPECT_EQ(SetLimit(root + "/tenants/a", 0, kGiB), NVML_ERROR_NOT_SUPPORTED); }),
      0);
}

TEST_F(SimMemoryLimitsTest, OlderDriverHasNoMemoryLimits) {
  Config("");  // the default, pre-r615 driver
  const std::string root = FakeRoot("/tenants/a");
  EXPECT_EQ(InChild([&] {
              EXPECT_EQ(SetLimit(root + "/tenants/a", 0, kGiB), NVML_ERROR_FUNCTION_NOT_FOUND);
              void* nvml = Open("libnvidia-ml.so.1");
              ASSERT_EQ(NVML(nvmlInit_v2)(), NVML_SUCCESS);
              char version[80] = {};
              ASSERT_EQ(NVML(nvmlSystemGetDriverVersion)(version, sizeof version), NVML_SUCCESS);
              EXPECT_STREQ(version, "580.65.06");
              NVML(nvmlShutdown)();
            }),
            0);
  std::string out;
  const std::string smi = BuildDir() + "/sim/bin/nvidia-smi";
  EXPECT_EQ(Shell(smi + " memory-limits -c " + root + "/tenants/a --hard-limit 1GiB", &out), 3)
      << out;
  EXPECT_NE(out.find("Function Not Found"), std::string::npos) << out;
}

TEST_F(SimMemoryLimitsTest, NvidiaSmiSetsShowsAndClears) {
  Config("615.10");
  const std::string root = FakeRoot("/");
  const std::string smi =
      BuildDir() + "/sim/bin/nvidia-smi memory-limits -i 0 -c " + root + "/tenants/a";
  std::string out;
  ASSERT_EQ(Shell(smi + " --hard-limit 1GiB --soft-limit 256MiB", &out), 0) << out;
  ASSERT_EQ(Shell(smi, &out), 0) << out;
  EXPECT_NE(out.find("Hard Limit                        : 1024 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("Soft Limit                        : 256 MiB"), std::string::npos) << out;
  PlaceIn("/tenants/a/job");
  EXPECT_EQ(InChild([&] { WorkerUnderOneGiB(root + "/tenants/a"); }), 0);
  ASSERT_EQ(Shell(smi + " --clear", &out), 0) << out;
  ASSERT_EQ(Shell(smi, &out), 0) << out;
  EXPECT_NE(out.find("Hard Limit                        : None"), std::string::npos) << out;
  // Errors: usage mistakes exit 2, a non-root setter 4.
  EXPECT_EQ(Shell(smi + " --soft-limit 1GiB", &out), 2) << out;
  EXPECT_EQ(Shell(smi + " --clear --hard-limit 1GiB", &out), 2) << out;
  EXPECT_EQ(Shell(BuildDir() + "/sim/bin/nvidia-smi memory-limits --hard-limit 1GiB", &out), 2)
      << out;
  EXPECT_EQ(Shell("GPUSLICE_SIM_AS_USER=1 " + smi + " --hard-limit 1GiB", &out), 4) << out;
}

// Real cgroup v2 directories and the real /proc/self/cgroup, where the machine
// allows it: /sys/fs/cgroup when it is cgroup2 (as the driver requires), else
// the unified hierarchy of a hybrid layout (/sys/fs/cgroup/unified), given to
// the simulator as its cgroup root. Skipped when neither is writable by root.
TEST_F(SimMemoryLimitsTest, RealCgroupV2) {
  std::string mount;
  for (const char* m : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    struct statfs fs {};
    if (statfs(m, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
      mount = m;
      break;
    }
  }
  if (mount.empty()) GTEST_SKIP() << "no cgroup2 hierarchy mounted";
  if (geteuid() != 0) GTEST_SKIP() << "cannot create cgroups: not root";
  const std::string cg = mount + "/gpuslice-sim-test-" + std::to_string(getpid());
  if (mkdir(cg.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << cg;
  Config("615.10");
  setenv("GPUSLICE_SIM_CGROUP_ROOT", mount.c_str(), 1);
  unsetenv("GPUSLICE_SIM_CGROUP_FILE");
  EXPECT_EQ(InChild([&] { EXPECT_EQ(SetLimit(cg, 256 * kMiB, kGiB), NVML_SUCCESS); }), 0);
  const int rc = InChild([&] {
    // Move into the cgroup, then load the driver: it reads /proc/self/cgroup.
    std::ofstream(cg + "/cgroup.procs") << getpid() << std::endl;
    std::ifstream self("/proc/self/cgroup");
    std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
    ASSERT_NE(text.find("0::/gpuslice-sim-test-"), std::string::npos) << text;
    WorkerUnderOneGiB(cg);
  });
  EXPECT_EQ(rc, 0);
  // Removing the cgroup clears its limits (its only process has exited).
  EXPECT_EQ(rmdir(cg.c_str()), 0) << strerror(errno);
  EXPECT_EQ(InChild([&] {
              void* nvml = Open("libnvidia-ml.so.1");
              ASSERT_EQ(NVML(nvmlInit_v2)(), NVML_SUCCESS);
              nvmlDevice_t dev = nullptr;
              ASSERT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(0, &dev), NVML_SUCCESS);
              nvmlGetMemoryLimits_v1_t got{};
              got.nameSpace = cg.c_str();
              EXPECT_EQ(NVML(nvmlDeviceGetMemoryLimits_v1)(dev, &got), NVML_ERROR_NOT_FOUND);
              NVML(nvmlShutdown)();
            }),
            0);
}

}  // namespace
