// The real-hardware tier: the gpu tier's CUDA programs (tests/gpu/programs)
// run under the limiter (`gpuslice run`, real driver, no simulator) on a real
// GPU, and what they and NVML measure is held against the caps.
//
// Every test skips (GTEST_SKIP, with the reason) when no real GPU is present
// or the programs were not built (GPUSLICE_GPU_PROGRAMS=OFF). Each test also
// appends one JSON line {"test","measured","bar"} to $GPUSLICE_GPU_REPORT when
// set (scripts/gpu-check prints them as a table).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ranges>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "daemon/mps/fake_mps.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/mps/posix_mps_host.h"
#include "tests/gpu/nvml_loader.h"
#include "tests/gpu/real_gpu.h"

extern char** environ;

namespace gpuslice::gpu_tier {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr unsigned long long kMiB = 1ull << 20;
constexpr unsigned long long kGranularity = 2 * kMiB;  // the limiter's rounding unit
// A stream-ordered pool's reserve grows in blocks (at most 64 MiB on the H100:
// 1536 MiB reserved for 1530 MiB allocated, docs/gpu-tier.md); the limiter
// charges the reserve, so a refusal can leave up to one block unused.
constexpr unsigned long long kPoolBlockBound = 64 * kMiB;

std::string BuildDir() {
  const char* dir = getenv("GPUSLICE_BUILD_DIR");
  return dir != nullptr ? dir : ".";
}

// `name` found on PATH, resolved; "" if absent or the simulator's.
std::string RealTool(const std::string& name) {
  const char* path = getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir;
    candidate += "/";
    candidate += name;
    if (access(candidate.c_str(), X_OK) != 0) continue;
    candidate = std::filesystem::weakly_canonical(candidate).string();
    return IsFakeDriver(candidate, BuildDir()) ? "" : candidate;
  }
  return "";
}

class GpuTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuPresence& gpu = DetectGpu(BuildDir());
    if (!gpu.present) GTEST_SKIP() << "no real GPU: " << gpu.reason;
    for (const char* program : {"alloc", "gemm", "graph"}) {
      if (access(Program(program).c_str(), X_OK) != 0) {
        GTEST_SKIP() << Program(program)
                     << " not built: configure with -DGPUSLICE_GPU_PROGRAMS=ON "
                        "(scripts/gpu-check does)";
      }
    }
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    group_ = "gputier-" + std::to_string(getpid()) + "-" + name;
    dir_ = ::testing::TempDir() + "/gpuslice-gpu." + std::to_string(getpid()) + "." + name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/shm");
  }
  void TearDown() override {
    while (!cleanups_.empty()) {
      auto cleanup = std::move(cleanups_.back());
      cleanups_.pop_back();
      cleanup();
    }
    for (pid_t pid : children_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static std::string Program(const std::string& name) {
    return BuildDir() + "/bin/gpuslice-gpu-" + name;
  }

  // argv for `gpuslice run` with these limits ("" = not given) around `command`.
  std::vector<std::string> Slice(const std::string& memory, const std::string& compute,
                                 std::vector<std::string> command) const {
    std::vector<std::string> argv = {
        BuildDir() + "/bin/gpuslice", "run", "--group", group_, "--shm-dir", dir_ + "/shm"};
    if (!memory.empty()) argv.insert(argv.end(), {"--memory", memory});
    if (!compute.empty()) argv.insert(argv.end(), {"--compute", compute});
    argv.emplace_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

  // Starts argv with this process's environment plus `extra` (NAME=VALUE),
  // never registering with a gpusliced; stdout/stderr go to out<n>/err<n>.
  pid_t Start(int n, std::vector<std::string> argv, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> env = extra;
    env.emplace_back("GPUSLICE_REGISTER=0");
    auto overridden = [&](std::string_view entry) {
      const std::string_view name = entry.substr(0, entry.find('=') + 1);
      return std::any_of(env.begin(), env.end(),
                         [&](const std::string& e) { return e.starts_with(name); });
    };
    for (char** e = environ; *e != nullptr; ++e) {
      if (!overridden(*e)) env.emplace_back(*e);
    }
    std::vector<char*> argv_c, env_c;
    for (auto& a : argv) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    for (auto& e : env) env_c.push_back(e.data());
    env_c.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, Path("out", n).c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, Path("err", n).c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0 || pid <= 0) {
      ADD_FAILURE() << "cannot start " << argv[0] << ": " << strerror(rc);
      return -1;
    }
    children_.push_back(pid);
    return pid;
  }

  // Waits up to `timeout` for `pid`; its exit code, 128 + signal, or -1 (killed
  // at the deadline, or no process).
  int Join(pid_t pid, milliseconds timeout = milliseconds(120000)) {
    if (pid <= 0) return -1;
    const auto deadline = steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        std::erase(children_, pid);
        ADD_FAILURE() << "pid " << pid << " still running after " << timeout.count() << " ms";
        return -1;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::erase(children_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string Path(const char* kind, int n) const { return dir_ + "/" + kind + std::to_string(n); }
  std::string Read(const char* kind, int n) const {
    std::ifstream in(Path(kind, n));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // The first complete JSON line of out<n>, waiting up to `timeout` for it.
  json FirstJson(int n, milliseconds timeout) const {
    const auto deadline = steady_clock::now() + timeout;
    do {
      std::string out = Read("out", n);
      for (size_t start = 0, end; (end = out.find('\n', start)) != std::string::npos;
           start = end + 1) {
        json j = json::parse(out.substr(start, end - start), nullptr, /*allow_exceptions=*/false);
        if (j.is_object()) return j;
      }
      std::this_thread::sleep_for(milliseconds(20));
    } while (steady_clock::now() < deadline);
    return {};
  }

  // Records what was measured against which bar (gtest property and report).
  static void Report(const std::string& measured, const std::string& bar) {
    ::testing::Test::RecordProperty("measured", measured);
    ::testing::Test::RecordProperty("bar", bar);
    const char* file = getenv("GPUSLICE_GPU_REPORT");
    if (file == nullptr || *file == '\0') return;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::ofstream out(file, std::ios::app);
    out << json{{"test", std::string(info->test_suite_name()) + "." + info->name()},
                {"measured", measured},
                {"bar", bar}}
               .dump()
        << "\n";
  }

  std::string group_, dir_;
  std::vector<pid_t> children_;
  std::vector<std::function<void()>> cleanups_;  // run first at TearDown, last added first
};

// ---- Memory ----------------------------------------------------------------

class MemoryCapTest : public GpuTierTest, public ::testing::WithParamInterface<const char*> {};

// Allocating until refusal under a 2 GiB cap: the refusal is out-of-memory,
// the group's usage (the limiter's cudaMemGetInfo) ends within one
// granularity unit below the cap (cudaMallocAsync: one pool block, as the
// limiter charges the pool's reserve) and never above, total reads as the
// cap, and the driver (NVML, read from outside the slice, while the program
// holds its memory) never shows more than the cap.
TEST_P(MemoryCapTest, AllocationThatWouldPassTheCapIsRefused) {
  const unsigned long long cap = 2048 * kMiB;
  const std::string api = GetParam();
  pid_t pid = Start(0, Slice("2GiB", "",
                             {Program("alloc"), "--api", api, "--chunk", "64M", "--fine", "2M",
                              "--max", "3G", "--hold-ms", "3000"}));
  json r = FirstJson(0, milliseconds(60000));
  RealNvml nvml;
  long long driver_used = -1;
  if (nvml.ok() && r.contains("pid")) {
    driver_used = nvml.UsedMemory(nvml.Device(""), r["pid"].get<unsigned>());
  }
  ASSERT_EQ(Join(pid), 0) << Read("err", 0);
  ASSERT_TRUE(r.contains("total_after")) << r.dump() << "; stderr: " << Read("err", 0);
  const auto total = r["total_after"].get<unsigned long long>();
  const auto used = total - r["free_after"].get<unsigned long long>();
  Report(api + ": allocated " + std::to_string(r["allocated"].get<unsigned long long>() / kMiB) +
             " MiB, group used " + std::to_string(used / kMiB) + " MiB, total " +
             std::to_string(total / kMiB) + " MiB, driver " +
             (driver_used < 0 ? std::string("n/a") : std::to_string(driver_used / kMiB)) +
             " MiB, refusal " + r["fine_error"].get<std::string>(),
         api == "async" ? "OOM; cap-64MiB < used <= cap = total; driver <= cap"
                        : "OOM; cap-2MiB < used <= cap = total; driver <= cap");
  const std::string oom = api == "vmm" ? "CUDA_ERROR_OUT_OF_MEMORY" : "cudaErrorMemoryAllocation";
  EXPECT_EQ(r["error"], oom) << r.dump();
  EXPECT_EQ(r["fine_error"], oom) << r.dump();
  EXPECT_EQ(r["total_before"].get<unsigned long long>(), cap);
  EXPECT_EQ(total, cap);
  EXPECT_LE(used, cap);
  const unsigned long long room = api == "async" ? kPoolBlockBound : kGranularity;
  EXPECT_LT(cap - used, room) << "an allocation that fitted was refused";
  EXPECT_GT(r["allocated"].get<unsigned long long>(), 0u);
  if (driver_used >= 0) {
    EXPECT_LE(static_cast<unsigned long long>(driver_used), cap);
  }
}

INSTANTIATE_TEST_SUITE_P(Apis, MemoryCapTest,
                         ::testing::Values("malloc", "async", "managed", "vmm"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// nvidia-smi inside the slice reports the limit as the GPU's total memory.
TEST_F(GpuTierTest, NvidiaSmiInsideTheSliceShowsTheLimit) {
  const std::string smi = RealTool("nvidia-smi");
  if (smi.empty()) GTEST_SKIP() << "no real nvidia-smi on PATH";
  pid_t pid = Start(
      0, Slice("3GiB", "",
               {smi, "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"}));
  ASSERT_EQ(Join(pid), 0) << Read("err", 0);
  const std::string out = Read("out", 0);
  Report("nvidia-smi memory.total,used = " + out.substr(0, out.find('\n')),
         "total = 3072 MiB, used <= total");
  long total = -1, used = -1;
  ASSERT_EQ(sscanf(out.c_str(), "%ld, %ld", &total, &used), 2) << out;
  EXPECT_EQ(total, 3072);
  EXPECT_LE(used, total);
}

// ---- Compute ----------------------------------------------------------------

// The mean of this pid's NVML smUtil samples taken while `pid` runs, from
// `skip` after the start (the limiter settles) on.
double NvmlShare(const RealNvml& nvml, pid_t pid, milliseconds skip,
                 const std::function<bool()>& running, int* samples) {
  nvmlDevice_t device = nvml.Device("");
  const auto start = steady_clock::now();
  unsigned long long last = 0;
  double sum = 0;
  *samples = 0;
  while (running()) {
    for (const auto& s : nvml.Samples(device, last)) {
      last = std::max(last, s.timeStamp);
      if (s.pid == static_cast<unsigned>(pid) && steady_clock::now() - start > skip) {
        sum += s.smUtil;
        ++*samples;
      }
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return *samples > 0 ? sum / *samples : -1;
}

class ComputeShareTest : public GpuTierTest, public ::testing::WithParamInterface<int> {};

// A cuBLAS GEMM loop (synchronised after each GEMM) under --compute P gets
// P% of the GPU: by CUDA events within 5 points, by NVML within 10 (NVML's
// samples are coarse); P = 100 is the unlimited baseline (at least 90%).
TEST_P(ComputeShareTest, GemmLoopGetsItsShare) {
  const int cap = GetParam();
  RealNvml nvml;
  ASSERT_TRUE(nvml.ok()) << nvml.error();
  pid_t pid = Start(0, Slice("", std::to_string(cap),
                             {Program("gemm"), "--n", "4096", "--seconds", "10", "--sync", "1"}));
  int samples = 0;
  bool done = false;
  int code = -1;
  const auto deadline = steady_clock::now() + milliseconds(90000);
  auto running = [&] {
    if (!done && pid > 0 && waitpid(pid, &code, WNOHANG) == pid) done = true;
    return !done && steady_clock::now() < deadline;
  };
  // The slice runs the program with gpuslice's pid (it execs): NVML sees it.
  const double nvml_share = NvmlShare(nvml, pid, milliseconds(2000), running, &samples);
  if (done) std::erase(children_, pid);
  ASSERT_TRUE(done && WIFEXITED(code) && WEXITSTATUS(code) == 0) << Read("err", 0);
  json r = FirstJson(0, milliseconds(1000));
  ASSERT_TRUE(r.is_object()) << Read("out", 0) << Read("err", 0);
  const double events = 100.0 * r["busy"].get<double>();
  char measured[200];
  snprintf(measured, sizeof measured, "events %.1f%%, NVML %.1f%% (%d samples), %.2f TFLOP/s",
           events, nvml_share, samples, r["tflops"].get<double>());
  Report(measured, cap == 100 ? "events >= 90%" : "|events-cap| <= 5, |NVML-cap| <= 10");
  if (cap == 100) {
    EXPECT_GE(events, 90.0) << r.dump();
    return;
  }
  EXPECT_NEAR(events, cap, 5.0) << r.dump();
  ASSERT_GT(samples, 0) << "NVML gave no samples for pid " << pid;
  EXPECT_NEAR(nvml_share, cap, 10.0);
}

INSTANTIATE_TEST_SUITE_P(Caps, ComputeShareTest, ::testing::Values(100, 30, 60),
                         [](const auto& param_info) { return std::to_string(param_info.param); });

// A CUDA-graph loop (10 kernels of 200 µs per graph) under --compute 50.
TEST_F(GpuTierTest, GraphLoopGetsItsShare) {
  pid_t pid = Start(
      0, Slice("", "50",
               {Program("graph"), "--kernels", "10", "--kernel-us", "200", "--seconds", "8"}));
  ASSERT_EQ(Join(pid), 0) << Read("err", 0);
  json r = FirstJson(0, milliseconds(1000));
  ASSERT_TRUE(r.is_object()) << Read("out", 0);
  const double events = 100.0 * r["busy"].get<double>();
  Report("events " + std::to_string(events) + "%, " + std::to_string(r["launches"].get<long>()) +
             " graph launches",
         "|events-50| <= 5");
  EXPECT_NEAR(events, 50.0, 5.0) << r.dump();
}

// ---- MPS ----------------------------------------------------------------------

// On a real MPS control daemon (private pipe and log directories): the memory
// cap holds for an MPS client exactly as without MPS, and a GEMM client limited
// to 25% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) is slower than one
// with all of them (MPS is really in use).
TEST_F(GpuTierTest, MpsTierOnRealMps) {
  const std::string control = RealTool("nvidia-cuda-mps-control");
  if (control.empty()) GTEST_SKIP() << "no real nvidia-cuda-mps-control on PATH";
  std::filesystem::create_directories(dir_ + "/mps-pipe");
  std::filesystem::create_directories(dir_ + "/mps-log");
  const std::vector<std::string> mps = {"CUDA_MPS_PIPE_DIRECTORY=" + dir_ + "/mps-pipe",
                                        "CUDA_MPS_LOG_DIRECTORY=" + dir_ + "/mps-log"};
  if (Join(Start(10, {control, "-d"}, mps)) != 0) {
    GTEST_SKIP() << "cannot start an MPS control daemon: " << Read("err", 10);
  }
  cleanups_.emplace_back([this, control, mps] {
    std::ofstream(dir_ + "/quit") << "quit\n";
    Join(Start(11, {"/bin/sh", "-c", control + " < " + dir_ + "/quit"}, mps), milliseconds(30000));
  });

  pid_t alloc = Start(
      0,
      Slice("2GiB", "",
            {Program("alloc"), "--api", "malloc", "--chunk", "64M", "--fine", "2M", "--max", "3G"}),
      mps);
  ASSERT_EQ(Join(alloc), 0) << Read("err", 0);
  json a = FirstJson(0, milliseconds(1000));
  ASSERT_TRUE(a.contains("total_after")) << Read("out", 0);
  const auto used =
      a["total_after"].get<unsigned long long>() - a["free_after"].get<unsigned long long>();

  std::vector<std::string> full = mps, quarter = mps;
  full.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100");
  quarter.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25");
  const std::vector<std::string> gemm = {Program("gemm"), "--n", "4096", "--seconds", "4"};
  ASSERT_EQ(Join(Start(1, Slice("", "", gemm), full)), 0) << Read("err", 1);
  ASSERT_EQ(Join(Start(2, Slice("", "", gemm), quarter)), 0) << Read("err", 2);
  json f = FirstJson(1, milliseconds(1000)), q = FirstJson(2, milliseconds(1000));
  ASSERT_TRUE(f.is_object() && q.is_object()) << Read("out", 1) << Read("out", 2);
  const double ratio = q["tflops"].get<double>() / f["tflops"].get<double>();
  Report("MPS client: group used " + std::to_string(used / kMiB) + " MiB of 2048, refusal " +
             a["fine_error"].get<std::string>() + "; 25%/100% threads TFLOP/s ratio " +
             std::to_string(ratio),
         "cap-2MiB < used <= cap; ratio < 0.6");
  EXPECT_EQ(a["fine_error"], "cudaErrorMemoryAllocation");
  EXPECT_LE(used, 2048 * kMiB);
  EXPECT_LT(2048 * kMiB - used, kGranularity);
  EXPECT_LT(ratio, 0.6) << "MPS thread limit has no effect: " << f.dump() << q.dump();
}

// gpusliced's MPS manager with its real host (PosixMpsHost) on the real
// control daemon and GPU: an acquire starts MPS and gives the mps tier; a
// tenant's pinned memory limit (2 GiB) refuses its client's allocations with
// out-of-memory at no more than the limit; a tenant with 25% of the threads
// runs GEMMs at < 0.6x the rate of one with 100%; the last release stops the
// daemon. Compute modes come from the in-memory fake (setting them needs root;
// MPS runs in the DEFAULT mode too).
TEST_F(GpuTierTest, MpsManagerOnRealMps) {
  namespace mps = ::gpuslice::daemon::mps;
  const std::string control = RealTool("nvidia-cuda-mps-control");
  if (control.empty()) GTEST_SKIP() << "no real nvidia-cuda-mps-control on PATH";
  RealNvml nvml;
  ASSERT_TRUE(nvml.ok()) << nvml.error();
  struct Manager {
    mps::testing::FakeGpus gpus{1};
    mps::PosixMpsHost host;
    MonotonicClock clock;
    std::unique_ptr<mps::MpsManager> manager;
  };
  auto m = std::make_shared<Manager>();
  m->gpus.uuids[0] = nvml.Uuid(nvml.Device(""));
  ASSERT_FALSE(m->gpus.uuids[0].empty());
  mps::MpsOptions options;
  // Short: the control socket's path must fit in sun_path.
  options.root = "/tmp/gs-gpu-mps." + std::to_string(getpid());
  options.control_binary = control;
  options.command_timeout_ns = 20'000'000'000;
  options.start_timeout_ns = 30'000'000'000;
  options.stop_timeout_ns = 20'000'000'000;
  std::filesystem::remove_all(options.root);
  m->manager = std::make_unique<mps::MpsManager>(options, m->gpus, m->host, m->clock);
  cleanups_.emplace_back([m, root = options.root] {
    (void)m->manager->Release("gt-quarter");
    (void)m->manager->Release("gt-full");
    std::filesystem::remove_all(root);
  });
  ASSERT_TRUE(m->manager->Start().ok());
  if (!m->manager->GetStatus().available) {
    GTEST_SKIP() << "MPS unavailable: " << m->manager->GetStatus().reason;
  }
  const unsigned long long limit = 2048 * kMiB;
  auto quarter = m->manager->Acquire(
      {"gt-quarter", "0", {.active_thread_percentage = 25, .pinned_memory_limit = limit}});
  ASSERT_TRUE(quarter.ok()) << quarter.status().ToString();
  ASSERT_EQ(quarter->tier, daemon::Tier::kMps) << quarter->reason;
  auto full = m->manager->Acquire({"gt-full", "0", {.active_thread_percentage = 100}});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto env = [](const std::map<std::string, std::string>& vars) {
    std::vector<std::string> out;
    out.reserve(vars.size());
    for (const auto& [name, value] : vars) {
      std::string entry = name;
      entry += "=";
      entry += value;
      out.push_back(std::move(entry));
    }
    return out;
  };

  ASSERT_EQ(
      Join(Start(
          0, {Program("alloc"), "--api", "malloc", "--chunk", "64M", "--fine", "2M", "--max", "3G"},
          env(quarter->env))),
      0)
      << Read("err", 0);
  json a = FirstJson(0, milliseconds(1000));
  ASSERT_TRUE(a.contains("allocated")) << Read("out", 0);
  const std::vector<std::string> gemm = {Program("gemm"), "--n", "4096", "--seconds", "4"};
  ASSERT_EQ(Join(Start(1, gemm, env(full->env))), 0) << Read("err", 1);
  ASSERT_EQ(Join(Start(2, gemm, env(quarter->env))), 0) << Read("err", 2);
  json f = FirstJson(1, milliseconds(1000)), q = FirstJson(2, milliseconds(1000));
  ASSERT_TRUE(f.contains("tflops") && q.contains("tflops")) << Read("out", 1) << Read("out", 2);
  const double ratio = q["tflops"].get<double>() / f["tflops"].get<double>();
  const auto allocated = a["allocated"].get<unsigned long long>();

  EXPECT_TRUE(m->manager->Release("gt-quarter").ok());
  EXPECT_TRUE(m->manager->Release("gt-full").ok());
  const bool stopped = m->manager->GetStatus().gpus.empty();
  Report("pinned limit 2048 MiB: allocated " + std::to_string(allocated / kMiB) + " MiB, refusal " +
             a["fine_error"].get<std::string>() + "; 25%/100% TFLOP/s ratio " +
             std::to_string(ratio) + (stopped ? "; daemon stopped" : "; daemon still running"),
         "OOM; allocated <= limit; ratio < 0.6; stopped after the last release");
  EXPECT_EQ(a["fine_error"], "cudaErrorMemoryAllocation") << a.dump();
  EXPECT_LE(allocated, limit);
  EXPECT_GT(allocated, limit / 2) << "the pinned limit refused far below itself";
  EXPECT_LT(ratio, 0.6) << f.dump() << q.dump();
  EXPECT_TRUE(stopped);
}

// gpusliced on the real GPU, with the real NVML: it lists the GPU as NVML
// does, limited processes register with it, and its scheduler holds a request
// and a limit between two GEMM loops. Shares are throughput against the same
// loop alone (CUDA events cannot tell two time-sliced contexts apart).
class DaemonTierTest : public GpuTierTest {
 protected:
  // Starts gpusliced (stderr in err90) with `flags`, and waits until it answers.
  void StartDaemon(const std::vector<std::string>& flags = {}) {
    socket_ = dir_ + "/gpusliced.sock";
    std::vector<std::string> argv = {BuildDir() + "/bin/gpusliced",
                                     "--socket",
                                     socket_,
                                     "--state-dir",
                                     dir_ + "/state",
                                     "--shm-dir",
                                     dir_ + "/shm",
                                     "--mps-root",
                                     dir_ + "/mps",
                                     "--poll-interval-ms",
                                     "200"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    daemon_ = Start(90, argv);
    const auto deadline = steady_clock::now() + milliseconds(30000);
    while (Cli({"gpu", "list"}).first != 0 && steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(100));
    }
  }

  // A GEMM loop of `seconds` without the limiter: no tenant of any daemon.
  pid_t PlainGemm(int n, int seconds) {
    return Start(
        n, {Program("gemm"), "--n", "4096", "--seconds", std::to_string(seconds), "--sync", "1"});
  }

  // Waits up to `timeout` for the daemon's log to say `text`.
  bool DaemonSays(const std::string& text, milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    while (Read("err", 90).find(text) == std::string::npos) {
      if (steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return true;
  }

  // `gpuslice ARGS --socket S --json`: its exit code and what it printed.
  std::pair<int, std::string> Cli(std::vector<std::string> args) {
    args.insert(args.begin(), BuildDir() + "/bin/gpuslice");
    args.insert(args.end(), {"--socket", socket_, "--json"});
    const int n = next_cli_++;
    const int code = Join(Start(n, args), milliseconds(20000));
    return {code, Read("out", n)};
  }

  // A GEMM loop of `seconds` in `group`, registered with the daemon.
  pid_t Gemm(int n, const std::string& group, int seconds) {
    return Start(
        n,
        {BuildDir() + "/bin/gpuslice", "run", "--group", group, "--shm-dir", dir_ + "/shm", "--",
         Program("gemm"), "--n", "4096", "--seconds", std::to_string(seconds), "--sync", "1"},
        {"GPUSLICE_REGISTER=1", "GPUSLICE_SOCKET=" + socket_});
  }

  double Tflops(int n) {
    json r = FirstJson(n, milliseconds(1000));
    return r.is_object() && r.contains("tflops") ? r["tflops"].get<double>() : -1;
  }

  // The GEMM loop's rate alone, TFLOP/s (out<n>), unmanaged.
  double Alone(int n) {
    EXPECT_EQ(Join(PlainGemm(n, 6)), 0) << Read("err", n);
    return Tflops(n);
  }

  // `count` unmanaged GEMM loops at once for `seconds` (out<first>..): what
  // they get together, percent of one loop alone (`alone` TFLOP/s).
  double UnmanagedTogether(int first, int count, int seconds, double alone) {
    std::vector<pid_t> loops;
    for (int i = 0; i < count; ++i) loops.push_back(PlainGemm(first + i, seconds));
    double sum = 0;
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(Join(loops[static_cast<size_t>(i)]), 0) << Read("err", first + i);
      sum += 100.0 * Tflops(first + i) / alone;
    }
    return sum;
  }

  // One GEMM loop per group, registered, for `seconds` (out<first>..): per
  // group its share by its own throughput (percent of `alone`) and the mean
  // of what gpusliced reported it ran (GET /v1/groups "share" on GPU 0, read
  // every 500 ms from 3 s on, each of the second before).
  struct Shares {
    std::vector<double> own;
    std::vector<double> reported;
  };
  Shares RunGroups(int first, const std::vector<std::string>& groups, int seconds, double alone) {
    std::vector<pid_t> loops;
    for (size_t i = 0; i < groups.size(); ++i) {
      loops.push_back(Gemm(first + static_cast<int>(i), groups[i], seconds));
    }
    std::vector<double> sum(groups.size(), 0);
    std::vector<int> reads(groups.size(), 0);
    const auto start = steady_clock::now();
    const auto until = start + milliseconds(1000 * seconds - 500);
    while (steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(500));
      if (steady_clock::now() - start < milliseconds(3000)) continue;
      const json view = json::parse(Cli({"group", "show"}).second, nullptr, false);
      for (const json& g : view.is_object() ? view.value("groups", json::array()) : json()) {
        const auto it = std::find(groups.begin(), groups.end(), g.value("id", ""));
        const json gpus = g.value("gpus", json::array());
        if (it == groups.end() || gpus.empty() || !gpus[0].contains("share") ||
            !gpus[0]["share"].is_number()) {
          continue;
        }
        const auto k = static_cast<size_t>(it - groups.begin());
        sum[k] += 100.0 * gpus[0]["share"].get<double>();
        ++reads[k];
      }
    }
    Shares out;
    for (size_t i = 0; i < groups.size(); ++i) {
      EXPECT_EQ(Join(loops[i]), 0) << Read("err", first + static_cast<int>(i));
      out.own.push_back(100.0 * Tflops(first + static_cast<int>(i)) / alone);
      out.reported.push_back(reads[i] > 0 ? sum[i] / reads[i] : -1);
    }
    return out;
  }

  std::string socket_;
  pid_t daemon_ = -1;
  int next_cli_ = 100;
};

// The two groups on the real GPU: train asks for 70 %, notebook may
// not pass 30 %, both always want more. Their shares by their own GEMM
// throughput (against the loop alone), together against what two unmanaged
// loops get (the device's own time-slicing), and what gpusliced reported
// each ran against that.
TEST_F(DaemonTierTest, SchedulesTwoGroupsOnTheRealGpu) {
  RealNvml nvml;
  ASSERT_TRUE(nvml.ok()) << nvml.error();
  const double alone = Alone(0);
  ASSERT_GT(alone, 0) << Read("out", 0);
  const double unmanaged = UnmanagedTogether(1, 2, 15, alone);
  StartDaemon();
  auto [code, out] = Cli({"gpu", "list"});
  ASSERT_EQ(code, 0) << out << Read("err", 90);
  const json gpus = json::parse(out, nullptr, false);
  ASSERT_TRUE(gpus.is_object() && !gpus["gpus"].empty()) << out;
  EXPECT_EQ(gpus["gpus"][0]["uuid"].get<std::string>(), nvml.Uuid(nvml.Device("", 0)));
  ASSERT_EQ(Cli({"group", "set", "train", "--request", "70"}).first, 0) << Read("err", 100);
  ASSERT_EQ(Cli({"group", "set", "notebook", "--limit", "30"}).first, 0) << Read("err", 101);

  const Shares s = RunGroups(10, {"train", "notebook"}, 15, alone);
  const double together = s.own[0] + s.own[1];
  const double reading_err =
      std::max(std::abs(s.reported[0] - s.own[0]), std::abs(s.reported[1] - s.own[1]));
  char measured[320];
  snprintf(measured, sizeof measured,
           "alone %.1f TFLOP/s; unmanaged pair %.1f%%; train (request 70) %.1f%%, notebook "
           "(limit 30) %.1f%%, together %.1f%% of the pair; gpusliced read %.1f / %.1f",
           alone, unmanaged, s.own[0], s.own[1], 100.0 * together / unmanaged, s.reported[0],
           s.reported[1]);
  Report(measured,
         "train >= 68, notebook <= 31, together >= 88% of the unmanaged pair, readings within 3");
  EXPECT_GE(s.own[0], 68.0);
  EXPECT_LE(s.own[1], 31.0);
  EXPECT_GE(together, 0.88 * unmanaged);
  EXPECT_LE(reading_err, 3.0) << Cli({"group", "show"}).second;
}

// Four groups with requests 10/20/30/40, all wanting more: each near its
// request by its own throughput, and gpusliced's readings against that.
TEST_F(DaemonTierTest, SchedulesFourGroupsByTheirRequests) {
  const double alone = Alone(0);
  ASSERT_GT(alone, 0) << Read("out", 0);
  StartDaemon();
  const std::vector<std::string> groups = {"r10", "r20", "r30", "r40"};
  for (size_t i = 0; i < groups.size(); ++i) {
    ASSERT_EQ(Cli({"group", "set", groups[i], "--request", std::to_string(10 * (i + 1))}).first, 0)
        << Read("err", 100 + static_cast<int>(i));
  }
  const Shares s = RunGroups(10, groups, 15, alone);
  std::string measured = "alone " + std::to_string(alone) + " TFLOP/s;";
  double worst = 0, reading_err = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    char part[96];
    snprintf(part, sizeof part, " %s %.1f%% (read %.1f)", groups[i].c_str(), s.own[i],
             s.reported[i]);
    measured += part;
    worst = std::max(worst, std::abs(s.own[i] - 10.0 * static_cast<double>(i + 1)));
    reading_err = std::max(reading_err, std::abs(s.reported[i] - s.own[i]));
  }
  Report(measured, "each within 3 of its request, readings within 3");
  EXPECT_LE(worst, 3.0);
  EXPECT_LE(reading_err, 3.0) << Cli({"group", "show"}).second;
}

// The compute backstop on the real NVML: a GEMM loop that never went through
// the limiter is found (log line) and, under `throttle`, held near 20 % by
// SIGSTOP/SIGCONT; its throughput over the run against the loop alone.
TEST_F(DaemonTierTest, BackstopThrottlesAnUnregisteredProcess) {
  ASSERT_EQ(Join(PlainGemm(0, 5)), 0) << Read("err", 0);
  const double alone = Tflops(0);
  ASSERT_GT(alone, 0) << Read("out", 0);
  StartDaemon({"--compute-backstop", "throttle", "--compute-backstop-unregistered-percent", "20",
               "--compute-backstop-over-ms", "2000"});
  const pid_t gemm = PlainGemm(1, 20);
  const bool found = DaemonSays("event=backstop_compute_unregistered", milliseconds(15000));
  const bool throttled = DaemonSays("event=backstop_throttle_started", milliseconds(15000));
  ASSERT_EQ(Join(gemm), 0) << Read("err", 1);
  const double share = 100.0 * Tflops(1) / alone;
  char measured[200];
  snprintf(measured, sizeof measured,
           "alone %.1f TFLOP/s; unregistered loop %.1f%% of it over 20 s; found: %s, "
           "throttled: %s",
           alone, share, found ? "yes" : "no", throttled ? "yes" : "no");
  Report(measured, "found and throttled; share <= 60 (20% after detection)");
  EXPECT_TRUE(found) << Read("err", 90);
  EXPECT_TRUE(throttled) << Read("err", 90);
  EXPECT_LE(share, 60.0) << Read("err", 90);
}

}  // namespace
}  // namespace gpuslice::gpu_tier
