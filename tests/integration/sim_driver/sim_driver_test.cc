// The simulated driver with real processes: gpuslice-workload instances on a
// private simulation each, ground truth read from the shared state.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/core/sim_gpu.h"
#include "sim/core/stats.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::sim {
namespace {

using nlohmann::json;

using testing::BuildDir;
using testing::WaitFor;

class SimDriverTest : public testing::SimProcessTest {};

TEST_F(SimDriverTest, TwoSaturatingProcessesSplitBusyTimeEvenly) {
  // Unequal kernels: a FIFO would give 30/70, time-slicing gives 50/50.
  pid_t a = Start(0, {"--kernel-us", "300", "--duration-s", "4", "--quiet"});
  pid_t b = Start(1, {"--kernel-us", "700", "--duration-s", "4", "--quiet"});
  auto busy = [&](const json& stats, pid_t pid) {
    json p = Process(stats, pid);
    return p.contains("devices") ? p["devices"][0]["busy_ns"].get<double>() : 0.0;
  };
  // Measure over a window in which both are running and have work queued.
  ASSERT_TRUE(WaitFor(
      [&] {
        json s = Stats();
        return busy(s, a) > 0 && busy(s, b) > 0;
      },
      std::chrono::seconds(5)));
  json before = Stats();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the measurement window
  json after = Stats();
  ASSERT_EQ(Process(after, a)["status"], "running");
  ASSERT_EQ(Process(after, b)["status"], "running");
  double da = busy(after, a) - busy(before, a);
  double db = busy(after, b) - busy(before, b);
  double window = after["clock_ns"].get<double>() - before["clock_ns"].get<double>();
  EXPECT_NEAR(100 * da / (da + db), 50, 3) << before.dump() << after.dump();
  EXPECT_GT((da + db) / window, 0.85);  // the rest is switch cost
  EXPECT_GT(after["devices"][0]["context_switches"].get<int64_t>(), 100);
  EXPECT_EQ(Join(a), 0) << Read("err0");
  EXPECT_EQ(Join(b), 0) << Read("err1");
}

TEST_F(SimDriverTest, OneProcessAloneGetsTheWholeDevice) {
  pid_t a = Start(0, {"--kernel-us", "1000", "--duration-s", "1"});
  ASSERT_EQ(Join(a), 0) << Read("err0");
  json out = json::parse(Read("out0"));
  json p = Process(Stats(), a);
  double busy_s = p["devices"][0]["busy_ns"].get<double>() / 1e9;
  EXPECT_EQ(p["devices"][0]["kernels"], out["kernels"]);
  EXPECT_GE(busy_s / out["elapsed_s"].get<double>(), 0.95) << out.dump() << p.dump();
}

TEST_F(SimDriverTest, ExhaustingMemoryGivesOutOfMemoryAndChangesNothing) {
  pid_t a = Start(0, {"--alloc", std::to_string(81ull << 30), "--kernels", "1"});
  EXPECT_EQ(Join(a), 3);
  EXPECT_NE(Read("err0").find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << Read("err0");
  // The failed process's context goes with it; nothing of the failed
  // allocation was ever counted.
  EXPECT_TRUE(WaitFor([&] { return Stats()["devices"][0]["memory_used_bytes"] == 0; },
                      std::chrono::seconds(5)))
      << Stats().dump(1);
  json p = Process(Stats(), a);
  EXPECT_LT(p["devices"][0]["peak_memory_bytes"].get<uint64_t>(), 1ull << 30) << p.dump();
}

TEST_F(SimDriverTest, KilledProcessMemoryIsReclaimed) {
  pid_t a = Start(0, {"--alloc", std::to_string(1ull << 30), "--hold-s", "60"});
  ASSERT_TRUE(WaitFor(
      [&] {
        return Process(Stats(), a).value("devices", json::array()).size() > 0 &&
               Process(Stats(), a)["devices"][0]["memory_bytes"] >= (1ull << 30);
      },
      std::chrono::seconds(10)))
      << Read("err0");
  kill(a, SIGKILL);
  EXPECT_EQ(Join(a), 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return Stats()["devices"][0]["memory_used_bytes"] == 0; },
                      std::chrono::seconds(5)))
      << Stats().dump(1);
}

TEST_F(SimDriverTest, ExclusiveProcessModeRefusesASecondProcess) {
  pid_t holder = Start(0, {"--alloc", "1048576", "--hold-s", "60"});
  ASSERT_TRUE(WaitFor([&] { return Stats()["devices"][0]["memory_used_bytes"] > 0; },
                      std::chrono::seconds(10)));
  {
    auto gpu = SimGpu::Open({state_, "", /*observer=*/true});
    ASSERT_TRUE(gpu.ok());
    (*gpu)->WithState([](SimState& s) { s.devices[0].compute_mode = kComputeExclusiveProcess; });
  }
  pid_t second = Start(1, {"--kernels", "1"});
  EXPECT_EQ(Join(second), 3);
  EXPECT_NE(Read("err1").find("CUDA_ERROR_DEVICE_UNAVAILABLE"), std::string::npos) << Read("err1");
  kill(holder, SIGKILL);
  Join(holder);
  // Once the holder is gone the device is free again.
  pid_t third = Start(2, {"--kernels", "1"});
  EXPECT_EQ(Join(third), 0) << Read("err2");
}

TEST_F(SimDriverTest, MalformedConfigFailsCuInitNamingTheProblem) {
  pid_t a = Start(0, {"--kernels", "1"}, {R"(GPUSLICE_SIM_CONFIG={"timeslice_us": "fast"})"});
  EXPECT_EQ(Join(a), 3);
  std::string err = Read("err0");
  EXPECT_NE(err.find("timeslice_us"), std::string::npos) << err;
  EXPECT_NE(err.find("cuInit"), std::string::npos) << err;
}

TEST_F(SimDriverTest, EveryLaunchFormRunsItsKernels) {
  for (const char* form : {"plain", "ex", "cooperative", "graph"}) {
    pid_t a = Start(0, {"--launch", form, "--kernels", "5", "--kernel-us", "10"});
    ASSERT_EQ(Join(a), 0) << form << Read("err0");
    EXPECT_EQ(Process(Stats(), a)["devices"][0]["kernels"], 5) << form;
  }
}

// --latency: one record per launch, each at least the kernel's length (a
// launch cannot complete sooner), and percentiles consistent with the file.
TEST_F(SimDriverTest, WorkloadLatencyModeRecordsEveryLaunch) {
  const std::string file = dir_ + "/latency";
  pid_t a = Start(0, {"--kernel-us", "200", "--kernels", "40", "--latency-file", file});
  ASSERT_EQ(Join(a), 0) << Read("err0");
  json lat = json::parse(Read("out0"))["latency_us"];
  EXPECT_EQ(lat["count"], 40);
  std::vector<double> us;
  double previous_start = -1;
  std::istringstream lines(Read("latency"));
  for (double at = 0, l = 0; lines >> at >> l;) {
    EXPECT_GT(at, previous_start);  // in launch order
    previous_start = at;
    us.push_back(l);
  }
  ASSERT_EQ(us.size(), 40u);
  std::sort(us.begin(), us.end());
  EXPECT_GE(us.front(), 200.0);
  EXPECT_DOUBLE_EQ(lat["p50"].get<double>(), us[19]);  // nearest rank: ceil(0.5 * 40) = 20th
  EXPECT_DOUBLE_EQ(lat["p99"].get<double>(), us[39]);
  EXPECT_DOUBLE_EQ(lat["max"].get<double>(), us[39]);
  // Synchronised after each launch: the device ran exactly the 40 kernels.
  EXPECT_EQ(Process(Stats(), a)["devices"][0]["kernels"], 40);
}

// --idle-at-s/--idle-s: the device is idle for the gap (ground truth), and
// the run still ends at --duration-s.
TEST_F(SimDriverTest, WorkloadIdlesForTheGapAndGoesOn) {
  pid_t a = Start(
      0, {"--kernel-us", "1000", "--duration-s", "1.5", "--idle-at-s", "0.3", "--idle-s", "0.8"});
  ASSERT_EQ(Join(a), 0) << Read("err0");
  json out = json::parse(Read("out0"));
  const double elapsed = out["elapsed_s"].get<double>();
  const double busy_s = Process(Stats(), a)["devices"][0]["busy_ns"].get<double>() / 1e9;
  EXPECT_GE(elapsed, 1.5);
  EXPECT_LE(busy_s, elapsed - 0.75) << out.dump();  // idle 0.8 s
  EXPECT_GE(busy_s, 0.5) << out.dump();             // busy before and after
  pid_t b = Start(1, {"--kernels", "1", "--idle-s", "1"});
  EXPECT_EQ(Join(b), 2);
  EXPECT_NE(Read("err1").find("--idle-at-s"), std::string::npos) << Read("err1");
}

TEST_F(SimDriverTest, WorkloadRejectsBadFlagsClearly) {
  pid_t a = Start(0, {"--launch", "sideways"});
  EXPECT_EQ(Join(a), 2);
  EXPECT_NE(Read("err0").find("--launch"), std::string::npos) << Read("err0");
  pid_t b = Start(1, {"--kernel-us", "-3"});
  EXPECT_EQ(Join(b), 2);
  EXPECT_NE(Read("err1").find("--kernel-us"), std::string::npos) << Read("err1");
  pid_t c = Start(2, {"--device", "3", "--kernels", "1"});
  EXPECT_EQ(Join(c), 3);
  EXPECT_NE(Read("err2").find("CUDA_ERROR_INVALID_DEVICE"), std::string::npos) << Read("err2");
}

// A process fills the device chunk by chunk; its failed allocation changes
// neither its own view (checked inside) nor the ground truth.
TEST_F(SimDriverTest, FillingTheDeviceEndsInOutOfMemoryThatChangesNothing) {
  const uint64_t chunk = 8ull << 30;
  pid_t a = StartProgram("gpuslice-driver-probe", 0,
                         {"fill", "--chunk", std::to_string(chunk), "--hold-s", "60"});
  ASSERT_TRUE(WaitFor([&] { return Read("out0").find('}') != std::string::npos; },
                      std::chrono::seconds(10)))
      << Read("err0");
  json out = json::parse(Read("out0"));
  EXPECT_EQ(out["error"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(out["free_before_oom"], out["free_after_oom"]);
  json stats = Stats();
  const uint64_t context_bytes = 300ull << 20;  // DESIGN.md section 7 default
  const uint64_t expected = out["chunks"].get<uint64_t>() * chunk + context_bytes;
  EXPECT_EQ(Process(stats, a)["devices"][0]["memory_bytes"], expected) << stats.dump();
  EXPECT_EQ(stats["devices"][0]["memory_used_bytes"], expected);
  kill(a, SIGKILL);
  EXPECT_EQ(Join(a), 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return Stats()["devices"][0]["memory_used_bytes"] == 0; },
                      std::chrono::seconds(5)))
      << Stats().dump(1);
}

// The same checks from a program linked against the toolkit's stub, like any
// CUDA program: the names resolve in the simulated driver, before cuInit.
TEST_F(SimDriverTest, ProcAddressFromALinkedProgram) {
  pid_t a = StartProgram("gpuslice-driver-probe", 0, {"proc-address"});
  ASSERT_EQ(Join(a), 0) << Read("err0");
  json out = json::parse(Read("out0"));
  auto symbol = [&](const char* key) { return out[key]["symbol"].get<std::string>(); };
  EXPECT_EQ(symbol("cuMemAlloc@3010"), "cuMemAlloc");
  EXPECT_EQ(symbol("cuMemAlloc@3020"), "cuMemAlloc_v2");
  EXPECT_EQ(symbol("cuCtxCreate@11000"), "cuCtxCreate_v2");
  EXPECT_EQ(symbol("cuCtxCreate@12000"), "cuCtxCreate_v3");
  EXPECT_EQ(symbol("cuCtxCreate@13000"), "cuCtxCreate_v4");
  EXPECT_EQ(symbol("cuLaunchKernel@13000"), "cuLaunchKernel");
  EXPECT_EQ(symbol("cuLaunchKernel@13000/ptds"), "cuLaunchKernel_ptsz");
  EXPECT_EQ(symbol("cuMemcpyHtoD@13000/ptds"), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(symbol("cuGetProcAddress@13000"), "cuGetProcAddress_v2");
  EXPECT_EQ(out["cuGetProcAddress@13000"]["status"], 0);
  EXPECT_EQ(out["cuLaunchKernelEx@11000"]["status"], 2);  // VERSION_NOT_SUFFICIENT
  EXPECT_EQ(out["cuLaunchKernelEx@11000"]["rc"], 500);    // CUDA_ERROR_NOT_FOUND
  EXPECT_EQ(out["cuNoSuchFunction@13000"]["status"], 1);  // SYMBOL_NOT_FOUND
}

// cuGetProcAddress in this process, before any cuInit, on the simulated
// driver loaded by path.
TEST(SimDriverProcAddressTest, ReturnsTheVariantForVersionAndFlags) {
  void* lib = dlopen((BuildDir() + "/sim/lib/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using GetProc = int (*)(const char*, void**, int, uint64_t, int*);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  ASSERT_NE(get, nullptr);
  auto resolve = [&](const char* name, int version, uint64_t flags, int* status) {
    void* fn = nullptr;
    int rc = get(name, &fn, version, flags, status);
    return std::make_pair(rc, fn);
  };
  int status = -1;
  EXPECT_EQ(resolve("cuMemAlloc", 13000, 0, &status).second, dlsym(lib, "cuMemAlloc_v2"));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(resolve("cuMemAlloc", 3000, 0, &status).second, dlsym(lib, "cuMemAlloc"));
  EXPECT_EQ(resolve("cuCtxCreate", 12000, 0, &status).second, dlsym(lib, "cuCtxCreate_v3"));
  EXPECT_EQ(resolve("cuCtxCreate", 13000, 0, &status).second, dlsym(lib, "cuCtxCreate_v4"));
  EXPECT_EQ(resolve("cuLaunchKernel", 13000, 0, &status).second, dlsym(lib, "cuLaunchKernel"));
  EXPECT_EQ(resolve("cuLaunchKernel", 13000, 2, &status).second, dlsym(lib, "cuLaunchKernel_ptsz"));
  EXPECT_EQ(resolve("cuGetProcAddress", 13000, 0, &status).second,
            dlsym(lib, "cuGetProcAddress_v2"));
  auto missing = resolve("cuNoSuchFunction", 13000, 0, &status);
  EXPECT_EQ(missing.first, 500);  // CUDA_ERROR_NOT_FOUND
  EXPECT_EQ(missing.second, nullptr);
  EXPECT_EQ(status, 1);  // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
  auto too_old = resolve("cuCtxCreate", 1000, 0, &status);
  EXPECT_EQ(too_old.first, 500);
  EXPECT_EQ(status, 2);  // CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
}

}  // namespace
}  // namespace gpuslice::sim
