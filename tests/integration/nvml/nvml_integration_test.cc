// The simulated libnvidia-ml.so.1 and nvidia-smi, end to end: real load
// processes (nvml_load_helper) on the simulated GPU, read through the built
// library (dlopen by path from ${GPUSLICE_BUILD_DIR}/sim/lib) and the built
// nvidia-smi, checked against the simulator's ground truth (StatsJson).
//
// Every test runs on its own state file in a fresh temp dir, with 20 ms NVML
// windows so that a handful of windows take little time. NVML gives each
// window to one process, as on the H100 we measured (docs/sim-nvml.md); the
// tests of each process's own part of a window opt into "split".
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nvml_abi/nvml.h"
#include "sim/core/mig_state.h"
#include "sim/core/sim_gpu.h"
#include "sim/core/stats.h"

namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int64_t kSampleUs = 20'000;
constexpr char kConfig[] = "{\"sample_us\": 20000}";
constexpr char kSplitConfig[] = "{\"sample_us\": 20000, \"process_util\": \"split\"}";
constexpr unsigned long long kMiB = 1ull << 20;
constexpr uint64_t kContextBytes = 300 * kMiB;  // DESIGN.md default reservation

std::string BuildDir() {
  const char* dir = getenv("GPUSLICE_BUILD_DIR");
  return dir != nullptr ? dir : GPUSLICE_DEFAULT_BUILD_DIR;
}
std::string NvmlPath() { return BuildDir() + "/sim/lib/libnvidia-ml.so.1"; }
std::string SmiPath() { return BuildDir() + "/sim/bin/nvidia-smi"; }

// ---- the library under test, loaded once by path ----

struct Nvml {
  void* handle = nullptr;
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is the declared member's name
#define GS_NVML_EXPORT(name) decltype(&::name) name = nullptr;
#include "sim/nvml/nvml_exports.inc"
#undef GS_NVML_EXPORT
};

const Nvml& Lib() {
  static const Nvml* lib = [] {
    auto* n = new Nvml;
    n->handle = dlopen(NvmlPath().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n->handle == nullptr) return n;
#define GS_NVML_EXPORT(name) n->name = reinterpret_cast<decltype(n->name)>(dlsym(n->handle, #name));
#include "sim/nvml/nvml_exports.inc"
#undef GS_NVML_EXPORT
    return n;
  }();
  return *lib;
}

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& cond, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = steady_clock::now() + timeout;
  while (!cond()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

// A load process; killed (and reaped) on destruction.
class LoadProcess {
 public:
  LoadProcess(long kernel_us, long idle_us, long alloc_mib) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    const std::string helper = BuildDir() + "/tests/integration/nvml/nvml_load_helper";
    const std::string k = std::to_string(kernel_us), i = std::to_string(idle_us),
                      m = std::to_string(alloc_mib);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      dup2(fds[1], STDOUT_FILENO);
      execl(helper.c_str(), helper.c_str(), "--kernel-us", k.c_str(), "--idle-us", i.c_str(),
            "--alloc-mib", m.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~LoadProcess() {
    Kill();
    if (out_ >= 0) close(out_);
  }
  LoadProcess(const LoadProcess&) = delete;
  LoadProcess& operator=(const LoadProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits for the "ready" line (context created, memory allocated).
  bool WaitReady() {
    std::string got;
    const auto deadline = steady_clock::now() + milliseconds(10000);
    while (got.find("ready\n") == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[64];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) return false;  // exited
      got.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // Exit status after it exited by itself (-1 if it did not within the timeout).
  int WaitExit(milliseconds timeout) {
    int status = 0;
    const bool done = WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!done) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult Shell(const std::string& command) {
  CommandResult r;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Split(const std::string& line, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t pos; (pos = line.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
    parts.push_back(line.substr(start, pos - start));
  }
  parts.push_back(line.substr(start));
  return parts;
}

// One process's ground truth on device 0, or a zeroed value if absent.
struct Truth {
  int64_t clock_ns = 0;
  int64_t device_busy_ns = 0;
  uint64_t device_used_bytes = 0;
  std::map<int, int64_t> busy_ns;        // by pid
  std::map<int, uint64_t> memory_bytes;  // by pid
};

class NvmlIntegrationTest : public ::testing::Test {
 protected:
  virtual const char* Config() const { return kConfig; }
  void SetUp() override {
    ASSERT_NE(Lib().handle, nullptr) << dlerror() << " (" << NvmlPath() << ")";
    char tmpl[] = "/tmp/gpuslice-nvml-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/state").c_str(), 1);
    setenv("GPUSLICE_SIM_CONFIG", Config(), 1);
    unsetenv("GPUSLICE_SIM_AS_USER");
    setenv("LD_LIBRARY_PATH", (BuildDir() + "/sim/lib").c_str(), 1);
    ASSERT_EQ(Lib().nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(Lib().nvmlDeviceGetHandleByIndex_v2(0, &dev_), NVML_SUCCESS);
    gpuslice::sim::OpenOptions options;
    options.state_path = dir_ + "/state";
    options.config_text = Config();
    options.observer = true;
    auto gpu = gpuslice::sim::SimGpu::Open(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    truth_gpu_ = std::move(gpu).value();
  }

  void TearDown() override {
    if (Lib().handle != nullptr) {
      while (Lib().nvmlShutdown() == NVML_SUCCESS) {
      }
    }
    truth_gpu_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Truth ReadTruth() {
    return truth_gpu_->WithState([&](gpuslice::sim::SimState& s) {
      const nlohmann::json j = gpuslice::sim::StatsJson(s, truth_gpu_->NowNs());
      Truth t;
      t.clock_ns = j["clock_ns"].get<int64_t>();
      t.device_busy_ns = j["devices"][0]["busy_ns"].get<int64_t>();
      t.device_used_bytes = j["devices"][0]["memory_used_bytes"].get<uint64_t>();
      for (const auto& p : j["processes"]) {
        if (p["status"] != "running") continue;
        t.busy_ns[p["pid"].get<int>()] = p["devices"][0]["busy_ns"].get<int64_t>();
        t.memory_bytes[p["pid"].get<int>()] = p["devices"][0]["memory_bytes"].get<uint64_t>();
      }
      return t;
    });
  }

  // NVML timestamp (wall-clock us) of monotonic instant `ns`, as the library
  // computes it.
  uint64_t RealtimeUs(int64_t ns) {
    return truth_gpu_->WithState([&](gpuslice::sim::SimState& s) {
      return static_cast<uint64_t>(ns + s.header.realtime_offset_ns) / 1000;
    });
  }

  // Process samples newer than `last_seen` (empty on NOT_FOUND).
  std::vector<nvmlProcessUtilizationSample_t> Samples(unsigned long long last_seen) {
    unsigned int n = 0;
    nvmlReturn_t r = Lib().nvmlDeviceGetProcessUtilization(dev_, nullptr, &n, last_seen);
    if (r == NVML_ERROR_NOT_FOUND) return {};
    EXPECT_EQ(r, NVML_ERROR_INSUFFICIENT_SIZE);
    std::vector<nvmlProcessUtilizationSample_t> out(n + 4);
    n = static_cast<unsigned int>(out.size());
    r = Lib().nvmlDeviceGetProcessUtilization(dev_, out.data(), &n, last_seen);
    if (r == NVML_ERROR_NOT_FOUND) return {};
    EXPECT_EQ(r, NVML_SUCCESS);
    out.resize(r == NVML_SUCCESS ? n : 0);
    return out;
  }

  static const nvmlProcessUtilizationSample_t* Find(
      const std::vector<nvmlProcessUtilizationSample_t>& v, pid_t pid) {
    for (const auto& s : v) {
      if (static_cast<pid_t>(s.pid) == pid) return &s;
    }
    return nullptr;
  }

  std::vector<nvmlProcessInfo_t> Running() {
    std::vector<nvmlProcessInfo_t> infos(16);
    auto n = static_cast<unsigned int>(infos.size());
    EXPECT_EQ(Lib().nvmlDeviceGetComputeRunningProcesses_v3(dev_, &n, infos.data()), NVML_SUCCESS);
    infos.resize(n);
    return infos;
  }

  unsigned int GpuUtil() {
    nvmlUtilization_t u{0, 0};
    EXPECT_EQ(Lib().nvmlDeviceGetUtilizationRates(dev_, &u), NVML_SUCCESS);
    return u.gpu;
  }

  // Measures over at least `span`: per-process samples newer than the start,
  // and the ground truth's busy shares over the same interval. The windows
  // NVML averages cover the interval up to one window at each end.
  struct Measurement {
    std::vector<nvmlProcessUtilizationSample_t> samples;
    Truth before, after;
    double tolerance_pct;  // the sampling window's resolution over the span
    double TruthPct(pid_t pid) const {
      const auto dt = static_cast<double>(after.clock_ns - before.clock_ns);
      return 100.0 * static_cast<double>(after.busy_ns.at(pid) - before.busy_ns.at(pid)) / dt;
    }
    double DeviceTruthPct() const {
      const auto dt = static_cast<double>(after.clock_ns - before.clock_ns);
      return 100.0 * static_cast<double>(after.device_busy_ns - before.device_busy_ns) / dt;
    }
  };
  Measurement Measure(milliseconds span) {
    Measurement m;
    m.before = ReadTruth();
    const uint64_t start_us = RealtimeUs(m.before.clock_ns);
    const uint64_t end_us = start_us + static_cast<uint64_t>(span.count()) * 1000;
    EXPECT_TRUE(WaitFor([&] {
      m.samples = Samples(start_us);
      uint64_t newest = 0;
      for (const auto& s : m.samples) newest = std::max<uint64_t>(newest, s.timeStamp);
      return newest >= end_us;
    })) << "no samples reached the end of the span";
    m.after = ReadTruth();
    const double dt_us = static_cast<double>(m.after.clock_ns - m.before.clock_ns) / 1000;
    m.tolerance_pct = 100.0 * 2 * kSampleUs / dt_us + 1;
    return m;
  }

  std::string Smi(const std::string& args) { return SmiPath() + " " + args; }

  std::string dir_;
  nvmlDevice_t dev_ = nullptr;
  std::unique_ptr<gpuslice::sim::SimGpu> truth_gpu_;
};

// ---- the library's surface ----

// The names of nvml_unsupported.inc: every other name the real library exports.
std::set<std::string> UnsupportedNames() {
  std::set<std::string> names;
#define GS_NVML_UNSUPPORTED(name) names.insert(#name);
#include "sim/nvml/nvml_unsupported.inc"
#undef GS_NVML_UNSUPPORTED
  return names;
}

TEST_F(NvmlIntegrationTest, ExportsExactlyTheListedNames) {
  std::set<std::string> listed = UnsupportedNames();
#define GS_NVML_EXPORT(name) listed.insert(#name);
#include "sim/nvml/nvml_exports.inc"
#undef GS_NVML_EXPORT
  for (const std::string& name : listed) {
    EXPECT_NE(dlsym(Lib().handle, name.c_str()), nullptr) << name;
  }
  const CommandResult nm = Shell("nm -D --defined-only " + NvmlPath());
  ASSERT_EQ(nm.exit_code, 0) << nm.out;
  std::set<std::string> exported;
  for (const std::string& line : Lines(nm.out)) {
    const auto parts = Split(line, " ");
    if (parts.size() == 3 && (parts[1] == "T" || parts[1] == "W")) exported.insert(parts[2]);
  }
  EXPECT_EQ(exported, listed);
}

// Every name the real library exports and the simulator does not implement
// resolves, and answers NVML_ERROR_NOT_SUPPORTED whatever the caller passes
// (the stubs read no arguments: called here with none).
TEST_F(NvmlIntegrationTest, EveryUnsupportedNameResolvesAndAnswersNotSupported) {
  const std::set<std::string> names = UnsupportedNames();
  ASSERT_GT(names.size(), 250u);  // the real library exports ~400 names; ~100 are simulated
  for (const char* known : {"nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetBrand",
                            "nvmlUnitGetCount", "nvmlGpmSampleAlloc", "nvmlDeviceGetFanSpeed_v2"}) {
    EXPECT_TRUE(names.contains(known)) << known;
  }
  for (const std::string& name : names) {
    void* sym = dlsym(Lib().handle, name.c_str());
    ASSERT_NE(sym, nullptr) << name;
    EXPECT_EQ(reinterpret_cast<int (*)()>(sym)(), NVML_ERROR_NOT_SUPPORTED) << name;
  }
  // A typed call through the documented signature answers the same.
  using GetEncoderUtilization = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
  auto get = reinterpret_cast<GetEncoderUtilization>(
      dlsym(Lib().handle, "nvmlDeviceGetEncoderUtilization"));
  ASSERT_NE(get, nullptr);
  unsigned utilization = 7, period_us = 7;
  EXPECT_EQ(get(dev_, &utilization, &period_us), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(utilization, 7u);  // untouched
  EXPECT_EQ(period_us, 7u);
}

TEST_F(NvmlIntegrationTest, InitIsReferenceCounted) {
  const Nvml& n = Lib();
  // The library observes the simulation; it is not one of its processes.
  EXPECT_EQ(ReadTruth().busy_ns.count(getpid()), 0u);
  EXPECT_EQ(n.nvmlInit(), NVML_SUCCESS);            // 2
  EXPECT_EQ(n.nvmlInitWithFlags(0), NVML_SUCCESS);  // 3
  unsigned int count = 0;
  EXPECT_EQ(n.nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(n.nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(nullptr), NVML_ERROR_UNINITIALIZED);
  unsigned int temp = 0;
  EXPECT_EQ(n.nvmlDeviceGetTemperature(dev_, NVML_TEMPERATURE_GPU, &temp),
            NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(n.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  EXPECT_STREQ(n.nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
  EXPECT_STREQ(n.nvmlErrorString(static_cast<nvmlReturn_t>(12345)), "Unknown Error");
  int cuda = 0;
  EXPECT_EQ(n.nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 13000);
  // Handles stay valid across shutdown and init.
  ASSERT_EQ(n.nvmlInit_v2(), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(dev_, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
}

TEST_F(NvmlIntegrationTest, IdentityPciAndMemory) {
  const Nvml& n = Lib();
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  ASSERT_EQ(n.nvmlDeviceGetName(dev_, name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(n.nvmlDeviceGetName(dev_, name, 5), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(n.nvmlDeviceGetUUID(dev_, uuid, sizeof uuid), NVML_SUCCESS);
  EXPECT_EQ(std::string(uuid).rfind("GPU-", 0), 0u);
  nvmlDevice_t by = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetHandleByUUID(uuid, &by), NVML_SUCCESS);
  EXPECT_EQ(by, dev_);
  EXPECT_EQ(n.nvmlDeviceGetHandleByUUID("GPU-nope", &by), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(1, &by), NVML_ERROR_INVALID_ARGUMENT);
  unsigned int index = 99, minor = 99;
  EXPECT_EQ(n.nvmlDeviceGetIndex(dev_, &index), NVML_SUCCESS);
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(n.nvmlDeviceGetMinorNumber(dev_, &minor), NVML_SUCCESS);
  EXPECT_EQ(minor, 0u);
  int major = 0, cc_minor = 0;
  EXPECT_EQ(n.nvmlDeviceGetCudaComputeCapability(dev_, &major, &cc_minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + cc_minor, 90);

  // A handle the library did not issue, and NULL out-pointers.
  int not_a_device = 0;
  auto* bogus = reinterpret_cast<nvmlDevice_t>(&not_a_device);
  EXPECT_EQ(n.nvmlDeviceGetIndex(bogus, &index), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetIndex(nullptr, &index), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetIndex(dev_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo(dev_, nullptr), NVML_ERROR_INVALID_ARGUMENT);

  nvmlPciInfo_t pci;
  ASSERT_EQ(n.nvmlDeviceGetPciInfo_v3(dev_, &pci), NVML_SUCCESS);
  EXPECT_EQ(strlen(pci.busId), 16u);
  EXPECT_EQ(strlen(pci.busIdLegacy), 12u);
  ASSERT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by), NVML_SUCCESS);
  EXPECT_EQ(by, dev_);
  ASSERT_EQ(n.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy, &by), NVML_SUCCESS);
  EXPECT_EQ(by, dev_);
  EXPECT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &by), NVML_ERROR_INVALID_ARGUMENT);
  // The plain entry point fills the 52-byte original layout only: its last 16
  // bytes are reserved (zero), and nothing beyond is written.
  unsigned char v1[sizeof(nvmlPciInfo_t)];
  memset(v1, 0xAB, sizeof v1);
  ASSERT_EQ(n.nvmlDeviceGetPciInfo(dev_, reinterpret_cast<nvmlPciInfo_t*>(v1)), NVML_SUCCESS);
  EXPECT_EQ(memcmp(v1, &pci, 36), 0);
  for (size_t i = 36; i < 52; ++i) EXPECT_EQ(v1[i], 0) << i;
  for (size_t i = 52; i < sizeof v1; ++i) EXPECT_EQ(v1[i], 0xAB) << i;

  const Truth truth = ReadTruth();
  nvmlMemory_t m1;
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(dev_, &m1), NVML_SUCCESS);
  EXPECT_EQ(m1.total, 80ull << 30);
  EXPECT_EQ(m1.used, truth.device_used_bytes);
  EXPECT_EQ(m1.free + m1.used, m1.total);
  nvmlMemory_v2_t m2;
  memset(&m2, 0, sizeof m2);
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo_v2(dev_, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m2.version = nvmlMemory_v2;
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo_v2(dev_, &m2), NVML_SUCCESS);
  EXPECT_EQ(m2.total, m1.total);
  EXPECT_EQ(m2.free + m2.used + m2.reserved, m2.total);
  nvmlBAR1Memory_t bar1;
  ASSERT_EQ(n.nvmlDeviceGetBAR1MemoryInfo(dev_, &bar1), NVML_SUCCESS);
  EXPECT_EQ(bar1.bar1Total, 128ull << 30);
  EXPECT_EQ(bar1.bar1Free + bar1.bar1Used, bar1.bar1Total);

  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  ASSERT_EQ(n.nvmlSystemGetDriverVersion(version, sizeof version), NVML_SUCCESS);
  EXPECT_STREQ(version, "580.65.06");
  ASSERT_EQ(n.nvmlSystemGetNVMLVersion(version, sizeof version), NVML_SUCCESS);
  EXPECT_STREQ(version, "13.580.65.06");
  unsigned int speed = 0;
  EXPECT_EQ(n.nvmlDeviceGetFanSpeed(dev_, &speed), NVML_ERROR_NOT_SUPPORTED);
  nvmlPstates_t pstate;
  EXPECT_EQ(n.nvmlDeviceGetPerformanceState(dev_, &pstate), NVML_SUCCESS);
  char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
  EXPECT_EQ(n.nvmlDeviceGetSerial(dev_, serial, sizeof serial), NVML_SUCCESS);
}

TEST_F(NvmlIntegrationTest, NullOutPointersAreInvalidArguments) {
  const Nvml& n = Lib();
  nvmlDevice_t d = dev_;
  EXPECT_EQ(n.nvmlDeviceGetHandleByUUID(nullptr, &d), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2(nullptr, &d), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetName(d, nullptr, 64), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlSystemGetDriverVersion(nullptr, 80), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlSystemGetCudaDriverVersion(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetPciInfo_v3(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo_v2(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetBAR1MemoryInfo(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetUtilizationRates(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetProcessUtilization(d, nullptr, nullptr, 0), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(d, nullptr, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetPowerUsage(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetPowerManagementLimitConstraints(d, nullptr, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetTotalEnergyConsumption(d, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetClock(d, NVML_CLOCK_SM, NVML_CLOCK_ID_CURRENT, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  unsigned int clock = 0;
  EXPECT_EQ(
      n.nvmlDeviceGetClock(d, static_cast<nvmlClockType_t>(99), NVML_CLOCK_ID_CURRENT, &clock),
      NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetClock(d, NVML_CLOCK_SM, static_cast<nvmlClockId_t>(99), &clock),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(d, static_cast<nvmlTemperatureSensors_t>(5), &clock),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetCudaComputeCapability(d, nullptr, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlSystemGetProcessName(1, nullptr, 0), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlIntegrationTest, SettersNeedRootAndValidateArguments) {
  const Nvml& n = Lib();
  unsigned int min_mw = 0, max_mw = 0, limit = 0, def = 0;
  ASSERT_EQ(n.nvmlDeviceGetPowerManagementLimitConstraints(dev_, &min_mw, &max_mw), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetPowerManagementDefaultLimit(dev_, &def), NVML_SUCCESS);
  EXPECT_LT(min_mw, max_mw);
  // Out of the constraints: INVALID_ARGUMENT, whoever asks.
  EXPECT_EQ(n.nvmlDeviceSetPowerManagementLimit(dev_, max_mw + 1), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetPowerManagementLimit(dev_, min_mw - 1), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetGpuLockedClocks(dev_, 1500, 1400), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetGpuLockedClocks(dev_, 1000, 99999), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetGpuLockedClocks(dev_, 0, 1000), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetComputeMode(dev_, static_cast<nvmlComputeMode_t>(7)),
            NVML_ERROR_INVALID_ARGUMENT);

  setenv("GPUSLICE_SIM_AS_USER", "1", 1);
  EXPECT_EQ(n.nvmlDeviceSetPowerManagementLimit(dev_, min_mw), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceSetGpuLockedClocks(dev_, 1000, 1200), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceResetGpuLockedClocks(dev_), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceSetMemoryLockedClocks(dev_, 1000, 1200), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceResetMemoryLockedClocks(dev_), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceSetPersistenceMode(dev_, NVML_FEATURE_ENABLED), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(n.nvmlDeviceSetComputeMode(dev_, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS),
            NVML_ERROR_NO_PERMISSION);
  ASSERT_EQ(n.nvmlDeviceGetPowerManagementLimit(dev_, &limit), NVML_SUCCESS);
  EXPECT_EQ(limit, def);  // nothing changed
  unsigned int clock = 0;
  ASSERT_EQ(n.nvmlDeviceGetClockInfo(dev_, NVML_CLOCK_SM, &clock), NVML_SUCCESS);
  unsigned int max_clock = 0;
  ASSERT_EQ(n.nvmlDeviceGetMaxClockInfo(dev_, NVML_CLOCK_SM, &max_clock), NVML_SUCCESS);
  EXPECT_EQ(clock, max_clock);
  unsetenv("GPUSLICE_SIM_AS_USER");
}

TEST_F(NvmlIntegrationTest, SettersAsRootChangeTheSharedState) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the simulated setters are root-only)";
  const Nvml& n = Lib();
  ASSERT_EQ(n.nvmlDeviceSetPowerManagementLimit(dev_, 300'000), NVML_SUCCESS);
  unsigned int v = 0;
  ASSERT_EQ(n.nvmlDeviceGetPowerManagementLimit(dev_, &v), NVML_SUCCESS);
  EXPECT_EQ(v, 300'000u);
  ASSERT_EQ(n.nvmlDeviceGetEnforcedPowerLimit(dev_, &v), NVML_SUCCESS);
  EXPECT_EQ(v, 300'000u);
  ASSERT_EQ(n.nvmlDeviceSetGpuLockedClocks(dev_, 900, 1200), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetClockInfo(dev_, NVML_CLOCK_SM, &v), NVML_SUCCESS);
  EXPECT_EQ(v, 1200u);
  ASSERT_EQ(n.nvmlDeviceSetPersistenceMode(dev_, NVML_FEATURE_ENABLED), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceSetComputeMode(dev_, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), NVML_SUCCESS);

  // Another process of the simulation sees it all.
  truth_gpu_->WithState([](gpuslice::sim::SimState& s) {
    const auto& d = s.devices[0];
    EXPECT_EQ(d.power_limit_mw, 300'000u);
    EXPECT_EQ(d.locked_sm_min_mhz, 900u);
    EXPECT_EQ(d.locked_sm_max_mhz, 1200u);
    EXPECT_EQ(d.persistence, 1u);
    EXPECT_EQ(d.compute_mode, gpuslice::sim::kComputeExclusiveProcess);
    return 0;
  });
  // And the simulated driver enforces EXCLUSIVE_PROCESS.
  LoadProcess first(1000, 0, 0);
  ASSERT_TRUE(first.WaitReady());
  LoadProcess second(1000, 0, 0);
  EXPECT_EQ(second.WaitExit(milliseconds(10000)), 3);

  ASSERT_EQ(n.nvmlDeviceResetGpuLockedClocks(dev_), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetClockInfo(dev_, NVML_CLOCK_SM, &v), NVML_SUCCESS);
  EXPECT_EQ(v, 1980u);
  nvmlEnableState_t pers;
  ASSERT_EQ(n.nvmlDeviceGetPersistenceMode(dev_, &pers), NVML_SUCCESS);
  EXPECT_EQ(pers, NVML_FEATURE_ENABLED);
}

// MIG mode (sim/core/mig_state.h): the call sets the pending mode; on a GPU
// a process uses, the activation status is IN_USE and the mode stays; once
// the GPU is idle, a change applies at once.
TEST_F(NvmlIntegrationTest, MigModeChangesOnlyOnAnIdleGpu) {
  const Nvml& n = Lib();
  nvmlReturn_t activation = NVML_ERROR_UNKNOWN;
  EXPECT_EQ(n.nvmlDeviceSetMigMode(dev_, 2, &activation), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_ENABLE, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  setenv("GPUSLICE_SIM_AS_USER", "1", 1);
  EXPECT_EQ(n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_ENABLE, &activation),
            NVML_ERROR_NO_PERMISSION);
  unsetenv("GPUSLICE_SIM_AS_USER");
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the simulated setters are root-only)";
  unsigned int current = 9, pending = 9;
  ASSERT_EQ(n.nvmlDeviceGetMigMode(dev_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned>(NVML_DEVICE_MIG_DISABLE));
  EXPECT_EQ(pending, static_cast<unsigned>(NVML_DEVICE_MIG_DISABLE));

  auto load = std::make_unique<LoadProcess>(1000, 1000, 0);
  ASSERT_TRUE(load->WaitReady());
  ASSERT_EQ(n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
  EXPECT_EQ(activation, NVML_ERROR_IN_USE);
  ASSERT_EQ(n.nvmlDeviceGetMigMode(dev_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned>(NVML_DEVICE_MIG_DISABLE));
  EXPECT_EQ(pending, static_cast<unsigned>(NVML_DEVICE_MIG_ENABLE));

  load.reset();  // killed: the simulation reaps its context
  EXPECT_TRUE(WaitFor([&] {
    return n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_ENABLE, &activation) == NVML_SUCCESS &&
           activation == NVML_SUCCESS;
  }));
  ASSERT_EQ(n.nvmlDeviceGetMigMode(dev_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned>(NVML_DEVICE_MIG_ENABLE));
  EXPECT_EQ(pending, static_cast<unsigned>(NVML_DEVICE_MIG_ENABLE));
  truth_gpu_->WithState([](gpuslice::sim::SimState& s) {
    EXPECT_EQ(s.devices[0].mig_mode, gpuslice::sim::kMigEnabled);
    return 0;
  });
}

// NVML's MIG management on the simulated H100 80GB, as nvidia-smi mig -cgi
// 1g.10gb,3g.40gb -C drives it: GPU instances by profile id, a compute
// instance in each, and a MIG device per compute instance.
TEST_F(NvmlIntegrationTest, MigInstancesAndDevicesThroughNvml) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the simulated setters are root-only)";
  const Nvml& n = Lib();
  nvmlGpuInstanceProfileInfo_t small{};
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(dev_, 0, &small), NVML_ERROR_NOT_SUPPORTED)
      << "not in MIG mode";
  nvmlReturn_t activation = NVML_ERROR_UNKNOWN;
  ASSERT_EQ(n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
  ASSERT_EQ(activation, NVML_SUCCESS);

  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(dev_, 0, &small), NVML_SUCCESS);
  EXPECT_EQ(small.id, 19u);
  EXPECT_EQ(small.sliceCount, 1u);
  EXPECT_EQ(small.instanceCount, 7u);
  EXPECT_EQ(small.memorySizeMB, 10240u);
  nvmlGpuInstanceProfileInfo_v2_t large{};
  large.version = nvmlGpuInstanceProfileInfo_v2;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfoV(dev_, 2, &large), NVML_SUCCESS);
  EXPECT_EQ(large.id, 9u);
  EXPECT_STREQ(large.name, "MIG 3g.40gb");
  nvmlGpuInstancePlacement_t placements[8];
  unsigned int count = 8;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev_, 9, placements, &count),
            NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(placements[1].start, 4u);
  EXPECT_EQ(placements[1].size, 4u);

  nvmlGpuInstance_t gi_small = nullptr, gi_large = nullptr;
  ASSERT_EQ(n.nvmlDeviceCreateGpuInstance(dev_, 19, &gi_small), NVML_SUCCESS);
  const nvmlGpuInstancePlacement_t at4{4, 4};
  ASSERT_EQ(n.nvmlDeviceCreateGpuInstanceWithPlacement(dev_, 9, &at4, &gi_large), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceCreateGpuInstanceWithPlacement(dev_, 9, &at4, &gi_large),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(n.nvmlDeviceCreateGpuInstance(dev_, 0, &gi_large), NVML_ERROR_INSUFFICIENT_RESOURCES)
      << "a 7g.80gb no longer fits";
  unsigned int left = 0;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceRemainingCapacity(dev_, 19, &left), NVML_SUCCESS);
  EXPECT_EQ(left, 3u);  // slices 1, 2, 3
  nvmlGpuInstanceInfo_t info{};
  ASSERT_EQ(n.nvmlGpuInstanceGetInfo(gi_large, &info), NVML_SUCCESS);
  EXPECT_EQ(info.device, dev_);
  EXPECT_EQ(info.profileId, 9u);
  EXPECT_EQ(info.placement.start, 4u);
  nvmlGpuInstance_t by_id = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceById(dev_, info.id, &by_id), NVML_SUCCESS);
  EXPECT_EQ(by_id, gi_large);

  nvmlComputeInstanceProfileInfo_t ci_profile{};
  ASSERT_EQ(n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi_large, 0, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
            NVML_SUCCESS);
  EXPECT_EQ(ci_profile.instanceCount, 3u);
  EXPECT_EQ(ci_profile.multiprocessorCount, 20u);
  nvmlComputeInstance_t ci_small = nullptr, ci_large = nullptr;
  ASSERT_EQ(n.nvmlGpuInstanceCreateComputeInstance(gi_small, 0, &ci_small), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlGpuInstanceCreateComputeInstance(gi_large, 2, &ci_large), NVML_SUCCESS);
  nvmlComputeInstanceInfo_t ci_info{};
  ASSERT_EQ(n.nvmlComputeInstanceGetInfo_v2(ci_large, &ci_info), NVML_SUCCESS);
  EXPECT_EQ(ci_info.gpuInstance, gi_large);
  EXPECT_EQ(ci_info.placement.size, 3u);

  // Two MIG devices, each with its own UUID, name and memory.
  nvmlDevice_t mig[2] = {};
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(dev_, 0, &mig[0]), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(dev_, 1, &mig[1]), NVML_SUCCESS);
  nvmlDevice_t none = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(dev_, 2, &none), NVML_ERROR_NOT_FOUND);
  char uuid[2][96] = {};
  char name[96] = {};
  unsigned long long totals[2] = {};
  for (int i = 0; i < 2; ++i) {
    unsigned int is_mig = 0;
    ASSERT_EQ(n.nvmlDeviceIsMigDeviceHandle(mig[i], &is_mig), NVML_SUCCESS);
    EXPECT_EQ(is_mig, 1u);
    ASSERT_EQ(n.nvmlDeviceGetUUID(mig[i], uuid[i], sizeof uuid[i]), NVML_SUCCESS);
    EXPECT_EQ(std::string(uuid[i]).rfind("MIG-", 0), 0u) << uuid[i];
    nvmlMemory_t mem{};
    ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(mig[i], &mem), NVML_SUCCESS);
    totals[i] = mem.total;
    nvmlDevice_t parent = nullptr;
    ASSERT_EQ(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig[i], &parent), NVML_SUCCESS);
    EXPECT_EQ(parent, dev_);
  }
  EXPECT_STRNE(uuid[0], uuid[1]);
  EXPECT_EQ(totals[0], 10ull << 30);
  EXPECT_EQ(totals[1], 40ull << 30);
  ASSERT_EQ(n.nvmlDeviceGetName(mig[1], name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
  unsigned int is_mig = 1;
  ASSERT_EQ(n.nvmlDeviceIsMigDeviceHandle(dev_, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0u);

  // Torn down in order: a GPU instance with a compute instance is in use.
  EXPECT_EQ(n.nvmlGpuInstanceDestroy(gi_large), NVML_ERROR_IN_USE);
  setenv("GPUSLICE_SIM_AS_USER", "1", 1);
  EXPECT_EQ(n.nvmlComputeInstanceDestroy(ci_large), NVML_ERROR_NO_PERMISSION);
  unsetenv("GPUSLICE_SIM_AS_USER");
  ASSERT_EQ(n.nvmlComputeInstanceDestroy(ci_large), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlGpuInstanceDestroy(gi_large), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlGpuInstanceGetInfo(gi_large, &info), NVML_ERROR_INVALID_ARGUMENT)
      << "a destroyed instance's handle";
  EXPECT_EQ(n.nvmlDeviceGetUUID(mig[1], uuid[1], sizeof uuid[1]), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceSetMigMode(dev_, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
  EXPECT_EQ(activation, NVML_ERROR_IN_USE) << "the 1g.10gb is still there";
}

// ---- against load ----

TEST_F(NvmlIntegrationTest, SaturatingProcessIsFullyBusyAndListed) {
  const Nvml& n = Lib();
  LoadProcess load(2000, 0, 512);
  ASSERT_TRUE(load.WaitReady());
  ASSERT_TRUE(WaitFor([&] { return GpuUtil() == 100; })) << GpuUtil();
  nvmlUtilization_t u;
  ASSERT_EQ(n.nvmlDeviceGetUtilizationRates(dev_, &u), NVML_SUCCESS);
  EXPECT_EQ(u.memory, 50u);

  // Running processes: the child, with its memory as the ground truth has it.
  const Truth truth = ReadTruth();
  ASSERT_EQ(truth.memory_bytes.count(load.pid()), 1u);
  EXPECT_EQ(truth.memory_bytes.at(load.pid()), kContextBytes + 512 * kMiB);
  unsigned int count = 0;
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(dev_, &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);
  nvmlProcessInfo_t v3[4];
  count = 4;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(dev_, &count, v3), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(static_cast<pid_t>(v3[0].pid), load.pid());
  EXPECT_EQ(v3[0].usedGpuMemory, truth.memory_bytes.at(load.pid()));
  EXPECT_EQ(v3[0].gpuInstanceId, 0xFFFFFFFFu);
  nvmlProcessInfo_v2_t v2[4];
  count = 4;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v2(dev_, &count, v2), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(static_cast<pid_t>(v2[0].pid), load.pid());
  EXPECT_EQ(v2[0].computeInstanceId, 0xFFFFFFFFu);
  nvmlProcessInfo_v1_t v1[4];
  count = 4;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses(dev_, &count, v1), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(static_cast<pid_t>(v1[0].pid), load.pid());
  EXPECT_EQ(v1[0].usedGpuMemory, truth.memory_bytes.at(load.pid()));
  count = 4;
  EXPECT_EQ(n.nvmlDeviceGetGraphicsRunningProcesses_v3(dev_, &count, v3), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  nvmlMemory_t mem;
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(dev_, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, truth.device_used_bytes);

  // Per-process samples: the sizing call, then the child at 100%.
  const Measurement m = Measure(milliseconds(200));
  const auto* s = Find(m.samples, load.pid());
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->smUtil, 99u);
  EXPECT_NEAR(s->smUtil, m.TruthPct(load.pid()), m.tolerance_pct);
  for (const auto& newer : Samples(s->timeStamp)) EXPECT_GT(newer.timeStamp, s->timeStamp);

  // Power and energy follow the load.
  unsigned int power = 0;
  ASSERT_EQ(n.nvmlDeviceGetPowerUsage(dev_, &power), NVML_SUCCESS);
  EXPECT_EQ(power, 690'000u);
  unsigned long long e0 = 0, e1 = 0;
  ASSERT_EQ(n.nvmlDeviceGetTotalEnergyConsumption(dev_, &e0), NVML_SUCCESS);
  ASSERT_TRUE(WaitFor([&] {
    return n.nvmlDeviceGetTotalEnergyConsumption(dev_, &e1) == NVML_SUCCESS && e1 >= e0 + 69'000;
  })) << "energy did not grow at ~690 W";

  // When it dies, the driver reclaims it: gone from the list, the GPU idles.
  load.Kill();
  ASSERT_TRUE(WaitFor([&] { return Running().empty(); }));
  ASSERT_TRUE(WaitFor([&] { return GpuUtil() == 0; }));
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(dev_, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 0u);
}

// NVML's "split" model: each process's sample its own part of the windows.
class NvmlSplitIntegrationTest : public NvmlIntegrationTest {
 protected:
  const char* Config() const override { return kSplitConfig; }
};

// As on the H100: one sample per window, for one of the processes that ran
// in it, with the whole window's busy; over the windows, both get some.
TEST_F(NvmlIntegrationTest, EachWindowGoesToOneProcessWithTheWholeWindowsBusy) {
  LoadProcess a(1000, 0, 0), b(3000, 0, 0);
  ASSERT_TRUE(a.WaitReady());
  ASSERT_TRUE(b.WaitReady());
  ASSERT_TRUE(WaitFor([&] {  // both launching, each given a window
    auto s = Samples(0);
    return Find(s, a.pid()) != nullptr && Find(s, b.pid()) != nullptr;
  }));
  const Measurement m = Measure(milliseconds(600));
  std::map<unsigned long long, int> per_window;
  std::set<pid_t> given;
  for (const auto& s : m.samples) {
    ++per_window[s.timeStamp];
    given.insert(static_cast<pid_t>(s.pid));
    EXPECT_GE(s.smUtil, 80u) << s.pid;  // both saturate: the device is busy but for switches
  }
  EXPECT_GE(per_window.size(), 25u);  // 600 ms of 20 ms windows
  for (const auto& [ts, n] : per_window) EXPECT_EQ(n, 1) << ts;
  EXPECT_EQ(given, (std::set<pid_t>{a.pid(), b.pid()}));
  EXPECT_NEAR(m.TruthPct(a.pid()), 47.7, 3);  // the truth is still an even split
}

// A process alone is given every window, at its duty: the mean of its
// samples is its share.
TEST_F(NvmlIntegrationTest, ALoneProcessHasEveryWindowAtItsDuty) {
  LoadProcess load(4000, 4000, 0);
  ASSERT_TRUE(load.WaitReady());
  const Measurement m = Measure(milliseconds(600));
  double sum = 0;
  for (const auto& s : m.samples) {
    EXPECT_EQ(static_cast<pid_t>(s.pid), load.pid());
    sum += s.smUtil;
  }
  ASSERT_GE(m.samples.size(), 25u);
  EXPECT_NEAR(sum / static_cast<double>(m.samples.size()), m.TruthPct(load.pid()), m.tolerance_pct);
}

TEST_F(NvmlSplitIntegrationTest, TwoProcessesShareTheDeviceAsTheGroundTruthSays) {
  LoadProcess a(1000, 0, 0), b(3000, 0, 0);
  ASSERT_TRUE(a.WaitReady());
  ASSERT_TRUE(b.WaitReady());
  ASSERT_TRUE(WaitFor([&] {
    auto s = Samples(0);
    return Find(s, a.pid()) != nullptr && Find(s, b.pid()) != nullptr;
  }));
  const Measurement m = Measure(milliseconds(600));
  const auto* sa = Find(m.samples, a.pid());
  const auto* sb = Find(m.samples, b.pid());
  ASSERT_NE(sa, nullptr);
  ASSERT_NE(sb, nullptr);
  // Round-robin time-slicing: an even split, less the switch cost.
  EXPECT_NEAR(m.TruthPct(a.pid()), 47.7, 3);
  EXPECT_NEAR(sa->smUtil, m.TruthPct(a.pid()), m.tolerance_pct);
  EXPECT_NEAR(sb->smUtil, m.TruthPct(b.pid()), m.tolerance_pct);
  EXPECT_NEAR(GpuUtil(), m.DeviceTruthPct(), m.tolerance_pct);
  EXPECT_EQ(Running().size(), 2u);
}

TEST_F(NvmlSplitIntegrationTest, HalfDutyCycleAgreesWithTheGroundTruth) {
  LoadProcess load(4000, 4000, 0);
  ASSERT_TRUE(load.WaitReady());
  ASSERT_TRUE(WaitFor([&] { return Find(Samples(0), load.pid()) != nullptr; }));
  const Measurement m = Measure(milliseconds(600));
  const auto* s = Find(m.samples, load.pid());
  ASSERT_NE(s, nullptr);
  const double truth = m.TruthPct(load.pid());
  // Sanity: the load ran, at most the duty cycle asked for. A loaded machine
  // deschedules the load helper, so its truth can fall well below 50 % (CI
  // saw 20 %); what this test guards is NVML agreeing with that truth.
  EXPECT_GT(truth, 5);
  EXPECT_LT(truth, 55);
  EXPECT_NEAR(s->smUtil, truth, m.tolerance_pct);

  // The device's utilization is its latest window's; with one process on the
  // device, that window's per-process sample says the same. Read both for
  // the same window (no window closed between the reads): compared with the
  // span's truth instead, one window of a load helper the machine
  // descheduled is 25 points off (CI: 54 against 28).
  unsigned int util = 0;
  unsigned int window_sm = 0;
  ASSERT_TRUE(WaitFor([&] {
    const auto all = Samples(0);
    const auto* newest = Find(all, load.pid());
    if (newest == nullptr) return false;
    const unsigned long long end_us = newest->timeStamp;
    util = GpuUtil();
    const auto latest = Samples(end_us - 1);
    const auto* same = Find(latest, load.pid());
    if (same == nullptr || same->timeStamp != end_us) return false;  // a window closed
    window_sm = same->smUtil;
    return true;
  })) << "no two reads within one window";
  EXPECT_NEAR(util, window_sm, 1);
}

// ---- nvidia-smi ----

TEST_F(NvmlIntegrationTest, SmiListsGpusAsNvmlReportsThem) {
  char name[96], uuid[96];
  ASSERT_EQ(Lib().nvmlDeviceGetName(dev_, name, sizeof name), NVML_SUCCESS);
  ASSERT_EQ(Lib().nvmlDeviceGetUUID(dev_, uuid, sizeof uuid), NVML_SUCCESS);
  const CommandResult r = Shell(Smi("-L"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, std::string("GPU 0: ") + name + " (UUID: " + uuid + ")\n");
  EXPECT_EQ(Shell(Smi("-L -i 0")).out, r.out);
  EXPECT_EQ(Shell(Smi("-L -i " + std::string(uuid))).out, r.out);
  const CommandResult bad = Shell(Smi("-L -i 3"));
  EXPECT_EQ(bad.exit_code, 6) << bad.out;
  EXPECT_EQ(bad.out, "No devices were found\n");
}

TEST_F(NvmlIntegrationTest, SmiQueryGpuCsvMatchesNvml) {
  const Nvml& n = Lib();
  const std::string fields =
      "index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,"
      "utilization.memory,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem,"
      "clocks.max.sm,persistence_mode,compute_mode,driver_version,count";
  const CommandResult r = Shell(Smi("--query-gpu=" + fields + " --format=csv"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0],
            "index, uuid, name, pci.bus_id, memory.total [MiB], memory.used [MiB], "
            "memory.free [MiB], utilization.gpu [%], utilization.memory [%], power.draw [W], "
            "power.limit [W], temperature.gpu, clocks.current.sm [MHz], "
            "clocks.current.memory [MHz], clocks.max.sm [MHz], persistence_mode, compute_mode, "
            "driver_version, count");
  const auto v = Split(lines[1], ", ");
  ASSERT_EQ(v.size(), 19u) << lines[1];

  // The device is idle, so every value is stable: compare with NVML's.
  char uuid[96], name[96], driver[96];
  nvmlPciInfo_t pci;
  nvmlMemory_v2_t mem;
  memset(&mem, 0, sizeof mem);
  mem.version = nvmlMemory_v2;
  unsigned int power = 0, limit = 0, temp = 0, sm = 0, memclk = 0, max_sm = 0;
  nvmlUtilization_t util;
  nvmlEnableState_t pers;
  nvmlComputeMode_t mode;
  ASSERT_EQ(n.nvmlDeviceGetUUID(dev_, uuid, sizeof uuid), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetName(dev_, name, sizeof name), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlSystemGetDriverVersion(driver, sizeof driver), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetPciInfo_v3(dev_, &pci), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo_v2(dev_, &mem), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetUtilizationRates(dev_, &util), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetPowerUsage(dev_, &power), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetPowerManagementLimit(dev_, &limit), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetTemperature(dev_, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetClockInfo(dev_, NVML_CLOCK_SM, &sm), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetClockInfo(dev_, NVML_CLOCK_MEM, &memclk), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetMaxClockInfo(dev_, NVML_CLOCK_SM, &max_sm), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetPersistenceMode(dev_, &pers), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetComputeMode(dev_, &mode), NVML_SUCCESS);
  auto mib = [](unsigned long long b) { return std::to_string(b / kMiB) + " MiB"; };
  auto watts = [](unsigned int mw) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f W", mw / 1000.0);
    return std::string(buf);
  };
  EXPECT_EQ(v[0], "0");
  EXPECT_EQ(v[1], uuid);
  EXPECT_EQ(v[2], name);
  EXPECT_EQ(v[3], pci.busId);
  EXPECT_EQ(v[4], mib(mem.total));
  EXPECT_EQ(v[5], mib(mem.used));
  EXPECT_EQ(v[6], mib(mem.free));
  EXPECT_EQ(v[7], std::to_string(util.gpu) + " %");
  EXPECT_EQ(v[8], std::to_string(util.memory) + " %");
  EXPECT_EQ(v[9], watts(power));
  EXPECT_EQ(v[10], watts(limit));
  EXPECT_EQ(v[11], std::to_string(temp));
  EXPECT_EQ(v[12], std::to_string(sm) + " MHz");
  EXPECT_EQ(v[13], std::to_string(memclk) + " MHz");
  EXPECT_EQ(v[14], std::to_string(max_sm) + " MHz");
  EXPECT_EQ(v[15], pers == NVML_FEATURE_ENABLED ? "Enabled" : "Disabled");
  EXPECT_EQ(v[16], mode == NVML_COMPUTEMODE_DEFAULT ? "Default" : "?");
  EXPECT_EQ(v[17], driver);
  EXPECT_EQ(v[18], "1");

  const CommandResult bare =
      Shell(Smi("--query-gpu=memory.total,power.limit,name --format=csv,noheader,nounits -i 0"));
  ASSERT_EQ(bare.exit_code, 0) << bare.out;
  EXPECT_EQ(bare.out, std::to_string(mem.total / kMiB) + ", " +
                          watts(limit).substr(0, watts(limit).size() - 2) + ", " + name + "\n");
}

TEST_F(NvmlIntegrationTest, SmiRejectsUnknownFieldsAndArguments) {
  const CommandResult r = Shell(Smi("--query-gpu=index,bogus.field --format=csv"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "Field \"bogus.field\" is not a valid field to query.\n\n");
  const CommandResult apps = Shell(Smi("--query-compute-apps=pid,nope --format=csv"));
  EXPECT_EQ(apps.exit_code, 2);
  EXPECT_NE(apps.out.find("Field \"nope\" is not a valid field to query."), std::string::npos);
  EXPECT_EQ(Shell(Smi("--no-such-option")).exit_code, 2);
  EXPECT_EQ(Shell(Smi("--query-gpu=index")).exit_code, 2);  // --format=csv is required
  const CommandResult help = Shell(Smi("-h"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--query-gpu="), std::string::npos);
}

// nvidia-smi -mig, as NVIDIA's: a GPU in use keeps the change pending (a
// warning, exit 0); an idle one changes at once.
TEST_F(NvmlIntegrationTest, SmiSetsTheMigMode) {
  EXPECT_EQ(Shell(Smi("-i 0 -mig 2")).exit_code, 2);
  EXPECT_EQ(Shell(Smi("-mig 1 -L")).exit_code, 2);
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the simulated setters are root-only)";
  nvmlPciInfo_t pci{};
  ASSERT_EQ(Lib().nvmlDeviceGetPciInfo_v3(dev_, &pci), NVML_SUCCESS);
  const std::string bus = pci.busId;
  auto load = std::make_unique<LoadProcess>(1000, 1000, 0);
  ASSERT_TRUE(load->WaitReady());
  const CommandResult pending = Shell(Smi("-i 0 -mig 1"));
  EXPECT_EQ(pending.exit_code, 0) << pending.out;
  EXPECT_EQ(pending.out.rfind("Warning: MIG mode is in pending enable state for GPU " + bus +
                                  ":In use by another client\n",
                              0),
            0u)
      << pending.out;
  const auto modes = [&] {
    return Shell(Smi("-i 0 --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader"))
        .out;
  };
  EXPECT_EQ(modes(), "Disabled, Enabled\n");
  load.reset();
  std::string out;
  EXPECT_TRUE(WaitFor([&] {
    out = Shell(Smi("-i 0 -mig 1")).out;
    return out == "Enabled MIG Mode for GPU " + bus + "\nAll done.\n";
  })) << out;
  EXPECT_EQ(modes(), "Enabled, Enabled\n");
  EXPECT_EQ(Shell(Smi("-i 0 -mig 0")).out, "Disabled MIG Mode for GPU " + bus + "\nAll done.\n");
  EXPECT_EQ(modes(), "Disabled, Disabled\n");
}

// The MIG user guide's walk-through with nvidia-smi on the simulated H100:
// MIG mode on, a 1g.10gb and a 3g.40gb each with a compute instance, two MIG
// devices under the GPU in -L, then torn down in order.
TEST_F(NvmlIntegrationTest, SmiCreatesListsAndDestroysMigInstances) {
  EXPECT_EQ(Shell(Smi("mig -lgi -lci")).exit_code, 2);
  EXPECT_EQ(Shell(Smi("mig -C -lgi")).exit_code, 2);
  const CommandResult not_mig = Shell(Smi("mig -lgip"));
  EXPECT_EQ(not_mig.exit_code, 6);
  EXPECT_EQ(not_mig.out, "No MIG-enabled devices found.\n");
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the simulated setters are root-only)";
  ASSERT_EQ(Shell(Smi("-i 0 -mig 1")).exit_code, 0);

  const CommandResult created = Shell(Smi("mig -i 0 -cgi 1g.10gb,3g.40gb -C"));
  EXPECT_EQ(created.exit_code, 0) << created.out;
  EXPECT_EQ(created.out,
            "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 1g.10gb (ID 19)\n"
            "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using "
            "profile MIG 1g.10gb (ID  0)\n"
            "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)\n"
            "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using "
            "profile MIG 3g.40gb (ID  2)\n");
  const CommandResult list = Shell(Smi("-L"));
  const std::regex mig_line(
      R"(  MIG (1g\.10gb|3g\.40gb) +Device +([01]): \(UUID: MIG-[0-9a-f-]{36}\)\n)");
  std::vector<std::string> devices;
  for (std::sregex_iterator it(list.out.begin(), list.out.end(), mig_line), end; it != end; ++it) {
    devices.push_back((*it)[1].str() + "/" + (*it)[2].str());
  }
  EXPECT_EQ(devices, (std::vector<std::string>{"1g.10gb/0", "3g.40gb/1"})) << list.out;
  EXPECT_EQ(list.out.rfind("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-", 0), 0u) << list.out;

  const CommandResult gis = Shell(Smi("mig -lgi"));
  EXPECT_NE(gis.out.find("MIG 3g.40gb           9        2        4:4"), std::string::npos)
      << gis.out;
  const CommandResult cis = Shell(Smi("mig -lci"));
  EXPECT_NE(cis.out.find("MIG 1g.10gb           0         0        0:1"), std::string::npos)
      << cis.out;
  const CommandResult full = Shell(Smi("mig -cgi 7g.80gb"));
  EXPECT_EQ(full.exit_code, 6) << "no room for a 7g.80gb";
  EXPECT_EQ(Shell(Smi("mig -cgi 5g.50gb")).exit_code, 2) << "no such profile";
  const CommandResult busy = Shell(Smi("mig -dgi -gi 2"));
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_EQ(busy.out,
            "Unable to destroy GPU instance ID  2 from GPU  0: In use by another client\n");

  EXPECT_EQ(Shell(Smi("mig -dci")).out,
            "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1\n"
            "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2\n");
  EXPECT_EQ(Shell(Smi("mig -dgi")).out,
            "Successfully destroyed GPU instance ID  1 from GPU  0\n"
            "Successfully destroyed GPU instance ID  2 from GPU  0\n");
  EXPECT_EQ(Shell(Smi("mig -lgi")).exit_code, 6) << "none left";
  EXPECT_EQ(Shell(Smi("-L")).out.find("MIG "), std::string::npos);
}

TEST_F(NvmlIntegrationTest, SmiShowsComputeAppsAndTheTable) {
  LoadProcess load(2000, 0, 1024);
  ASSERT_TRUE(load.WaitReady());
  char pname[64];
  ASSERT_EQ(
      Lib().nvmlSystemGetProcessName(static_cast<unsigned int>(load.pid()), pname, sizeof pname),
      NVML_SUCCESS);
  const Truth truth = ReadTruth();
  const CommandResult r =
      Shell(Smi("--query-compute-apps=pid,process_name,used_memory --format=csv"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const uint64_t mib = truth.memory_bytes.at(load.pid()) / kMiB;
  EXPECT_EQ(r.out, "pid, process_name, used_gpu_memory [MiB]\n" + std::to_string(load.pid()) +
                       ", " + pname + ", " + std::to_string(mib) + " MiB\n");

  const CommandResult table = Shell(Smi(""));
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("NVIDIA-SMI 580.65.06"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("CUDA Version: 13.0"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("NVIDIA H100 80GB HBM3"), std::string::npos) << table.out;
  bool found = false;
  for (const std::string& line : Lines(table.out)) {
    EXPECT_TRUE(line.size() == 91 || line.size() < 40) << "ragged line: [" << line << "]";
    if (line.find(" " + std::to_string(load.pid()) + " ") != std::string::npos) {
      found = true;
      EXPECT_NE(line.find(std::to_string(mib) + "MiB"), std::string::npos) << line;
      EXPECT_NE(line.find(" C "), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(found) << table.out;
}

TEST_F(NvmlIntegrationTest, SmiLoadsNvmlThroughTheSearchPath) {
  // nvidia-smi resolves libnvidia-ml.so.1 by soname at run time: a library
  // first on LD_LIBRARY_PATH is the one loaded (LD_DEBUG names the file).
  const std::string dir = dir_ + "/libs";
  fs::create_directories(dir);
  fs::create_symlink(NvmlPath(), dir + "/libnvidia-ml.so.1");
  const CommandResult r = Shell("LD_DEBUG=libs LD_LIBRARY_PATH=" + dir + " " + Smi("-L"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(dir + "/libnvidia-ml.so.1"), std::string::npos) << r.out;
}

}  // namespace
