// gpuslice-workload: a CUDA driver-API program that keeps a GPU busy in a
// known way, for tests, benchmarks and the demo. Linked against libcuda.so.1
// by soname like any CUDA program; the library search path picks the driver.
//
//   gpuslice-workload [--device N] [--kernel-us US] (--duration-s S | --kernels N)
//                     [--sync] [--alloc BYTES] [--hold-s S]
//                     [--launch plain|ex|cooperative|graph] [--quiet]
//                     [--latency] [--latency-file PATH] [--idle-at-s S --idle-s D]
//                     [--graph-kernels N] [--phase AT_S:US[:plain|graph[N]]]...
//                     [--every-us US]
//
// Kernels are `gpuslice_sim_spin` (the simulator runs them for the given
// time). --launch graph captures one kernel into a graph on a stream
// (cuStreamBeginCapture) and launches that graph each time. Unless --quiet,
// prints one JSON line at the end:
//   {"kernels":N,"elapsed_s":S,"kernel_us":U,"launch":"plain","device":D,"alloc_bytes":B}
// --latency synchronises after each launch (as --sync) and records each
// launch's launch-to-completion time: from just before the launch call (so a
// launch the limiter holds back counts) to the return of cuCtxSynchronize. The
// JSON line then carries
//   "latency_us":{"count":N,"p50":..,"p90":..,"p99":..,"p999":..,"max":..}
// (nearest-rank percentiles over every launch). --latency-file PATH (implies
// --latency) also writes one line per launch: "<start s since the first
// launch> <latency us>", for a caller that judges only part of the run.
// --idle-at-s S --idle-s D: S seconds after the first launch, wait for the
// queued work and launch nothing for D seconds, then go on (--duration-s still
// counts from the first launch).
// --every-us US: requests, not a loop: a launch is due every US
// microseconds (an inference service's arrivals, whatever the GPU does); the
// program waits for each one's time and, with --latency, measures from it
// (a request that arrives while the last one still runs waits, and that
// counts). Implies --sync.
// --graph-kernels N: a --launch graph captures N kernels (default 1).
// --phase AT_S:US[:MODE]: AT_S seconds after the first launch, kernels run US
// microseconds from then on and, with MODE, are launched as `plain` single
// launches or as `graph` (graphN: a graph of N kernels, captured anew with the
// new length). Phases apply in the order of their times; each applies once.
// Exit codes: 0 done, 2 bad arguments, 3 a CUDA call failed (named on stderr,
// e.g. "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2)") or the latency file
// could not be written.
#include <cuda.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int device = 0;
  double kernel_us = 1000;
  double duration_s = 0;
  long kernels = 0;
  bool sync = false;
  unsigned long long alloc = 0;
  double hold_s = 0;
  std::string launch = "plain";
  bool quiet = false;
  bool latency = false;
  std::string latency_file;
  double idle_at_s = -1;  // < 0: never idle
  double idle_s = 0;
  long graph_kernels = 1;
  double every_us = 0;  // 0: back to back
  struct Phase {
    double at_s;
    double kernel_us;
    std::string launch;  // empty: keep the current mode
    long graph_kernels;  // for launch == "graph"
  };
  std::vector<Phase> phases;  // by time
};

[[noreturn]] void Usage(const char* problem) {
  fprintf(stderr,
          "gpuslice-workload: %s\n"
          "usage: gpuslice-workload [--device N] [--kernel-us US] (--duration-s S | --kernels N)\n"
          "         [--sync] [--alloc BYTES] [--hold-s S] [--launch plain|ex|cooperative|graph] "
          "[--quiet]\n"
          "         [--latency] [--latency-file PATH] [--idle-at-s S --idle-s D]\n"
          "         [--graph-kernels N] [--phase AT_S:US[:plain|graph[N]]]... [--every-us US]\n",
          problem);
  exit(2);
}

double Number(const char* flag, const char* text) {
  char* end = nullptr;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) {
    Usage((std::string(flag) + " needs a non-negative number, not '" + text + "'").c_str());
  }
  return v;
}

// A whole number in [0, max]: counts, ordinals, byte sizes.
double Count(const char* flag, const char* text, double max) {
  const double v = Number(flag, text);
  if (v > max || v != static_cast<double>(static_cast<long long>(v))) {
    Usage((std::string(flag) + " needs a whole number no larger than " +
           std::to_string(static_cast<long long>(max)) + ", not '" + text + "'")
              .c_str());
  }
  return v;
}

// "AT_S:US[:plain|graph[N]]".
Options::Phase ParsePhase(const std::string& text) {
  Options::Phase p{};
  const size_t a = text.find(':');
  if (a == std::string::npos) Usage(("--phase needs AT_S:US[:MODE], not '" + text + "'").c_str());
  const size_t b = text.find(':', a + 1);
  p.at_s = Number("--phase", text.substr(0, a).c_str());
  p.kernel_us =
      Number("--phase",
             text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1).c_str());
  p.graph_kernels = 1;
  if (b != std::string::npos) {
    const std::string mode = text.substr(b + 1);
    if (mode == "plain") {
      p.launch = "plain";
    } else if (mode.rfind("graph", 0) == 0) {
      p.launch = "graph";
      if (mode.size() > 5) {
        p.graph_kernels = static_cast<long>(Count("--phase", mode.c_str() + 5, 1 << 16));
      }
      if (p.graph_kernels < 1) Usage("--phase: a graph has at least one kernel");
    } else {
      Usage(("--phase mode is plain or graph[N], not '" + mode + "'").c_str());
    }
  }
  return p;
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = "unknown error";
  cuGetErrorName(rc, &name);
  fprintf(stderr, "gpuslice-workload: %s failed: %s (%d)\n", what, name, static_cast<int>(rc));
  exit(3);
}

// The nearest-rank `p` percentile (0 < p <= 100) of `sorted` (ascending, not empty).
double Percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// ',"latency_us":{...}' for the JSON line; every figure 0 when nothing ran.
std::string LatencyJson(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double p) { return us.empty() ? 0.0 : Percentile(us, p); };
  char buf[256];
  snprintf(buf, sizeof buf,
           ",\"latency_us\":{\"count\":%zu,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,"
           "\"p999\":%.1f,\"max\":%.1f}",
           us.size(), at(50), at(90), at(99), at(99.9), us.empty() ? 0.0 : us.back());
  return buf;
}

void WriteLatencies(const std::string& path, const std::vector<double>& at,
                    const std::vector<double>& us) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    fprintf(stderr, "gpuslice-workload: cannot write %s: %s\n", path.c_str(), strerror(errno));
    exit(3);
  }
  for (size_t i = 0; i < us.size(); ++i) fprintf(f, "%.6f %.1f\n", at[i], us[i]);
  if (fclose(f) != 0) {
    fprintf(stderr, "gpuslice-workload: cannot write %s: %s\n", path.c_str(), strerror(errno));
    exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--device")
      o.device = static_cast<int>(Count("--device", value(), 1 << 20));
    else if (a == "--kernel-us")
      o.kernel_us = Number("--kernel-us", value());
    else if (a == "--duration-s")
      o.duration_s = Number("--duration-s", value());
    else if (a == "--kernels")
      o.kernels = static_cast<long>(Count("--kernels", value(), 1e15));
    else if (a == "--alloc")
      o.alloc = static_cast<unsigned long long>(Count("--alloc", value(), 1e18));
    else if (a == "--hold-s")
      o.hold_s = Number("--hold-s", value());
    else if (a == "--launch")
      o.launch = value();
    else if (a == "--sync")
      o.sync = true;
    else if (a == "--quiet")
      o.quiet = true;
    else if (a == "--latency")
      o.latency = true;
    else if (a == "--latency-file")
      o.latency_file = value();
    else if (a == "--idle-at-s")
      o.idle_at_s = Number("--idle-at-s", value());
    else if (a == "--idle-s")
      o.idle_s = Number("--idle-s", value());
    else if (a == "--graph-kernels")
      o.graph_kernels = static_cast<long>(Count("--graph-kernels", value(), 1 << 16));
    else if (a == "--every-us")
      o.every_us = Number("--every-us", value());
    else if (a == "--phase")
      o.phases.push_back(ParsePhase(value()));
    else if (a == "-h" || a == "--help")
      Usage("runs spin kernels on a GPU");
    else
      Usage(("unknown argument '" + a + "'").c_str());
  }
  if (o.launch != "plain" && o.launch != "ex" && o.launch != "cooperative" && o.launch != "graph") {
    Usage("--launch is plain, ex, cooperative or graph");
  }
  if ((o.idle_at_s >= 0) != (o.idle_s > 0)) Usage("--idle-at-s and --idle-s go together");
  if (o.graph_kernels < 1) Usage("--graph-kernels is at least 1");
  std::stable_sort(
      o.phases.begin(), o.phases.end(),
      [](const Options::Phase& x, const Options::Phase& y) { return x.at_s < y.at_s; });
  if (!o.latency_file.empty()) o.latency = true;
  if (o.latency || o.every_us > 0) o.sync = true;

  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, o.device), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUdeviceptr buffer = 0;
  if (o.alloc > 0) Check(cuMemAlloc(&buffer, o.alloc), "cuMemAlloc");

  static const char kImage[] = "gpuslice-workload";  // the simulator accepts any image
  CUmodule module;
  Check(cuModuleLoadData(&module, kImage), "cuModuleLoadData");
  CUfunction spin;
  Check(cuModuleGetFunction(&spin, module, "gpuslice_sim_spin"), "cuModuleGetFunction");

  auto spin_ns = static_cast<uint64_t>(o.kernel_us * 1000);
  void* params[] = {&spin_ns};
  CUstream stream = nullptr;
  CUgraphExec graph_exec = nullptr;
  CUgraph graph = nullptr;
  // (Re)captures a graph of `kernels` spins of the current length.
  auto capture = [&](long kernels) {
    if (graph_exec != nullptr) {
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
      Check(cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy");
      Check(cuGraphDestroy(graph), "cuGraphDestroy");
      graph_exec = nullptr;
    }
    if (stream == nullptr) Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    Check(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture");
    for (long k = 0; k < kernels; ++k) {
      Check(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
    }
    Check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
    Check(cuGraphInstantiate(&graph_exec, graph, 0), "cuGraphInstantiate");
  };
  if (o.launch == "graph") capture(o.graph_kernels);
  size_t next_phase = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(o.duration_s);
  long launched = 0;
  std::vector<double> latency_us;  // per launch, in launch order (--latency)
  std::vector<double> latency_at;  // its start, seconds since `start`
  while ((o.kernels > 0 && launched < o.kernels) ||
         (o.kernels == 0 && o.duration_s > 0 && std::chrono::steady_clock::now() < deadline)) {
    if (o.idle_at_s >= 0 &&
        std::chrono::steady_clock::now() >= start + std::chrono::duration<double>(o.idle_at_s)) {
      Check(cuCtxSynchronize(), "cuCtxSynchronize");
      std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_s));
      o.idle_at_s = -1;  // once
    }
    while (next_phase < o.phases.size() &&
           std::chrono::steady_clock::now() >=
               start + std::chrono::duration<double>(o.phases[next_phase].at_s)) {
      const Options::Phase& p = o.phases[next_phase++];
      spin_ns = static_cast<uint64_t>(p.kernel_us * 1000);  // read by every later launch
      if (!p.launch.empty()) o.launch = p.launch;
      if (p.launch == "graph") o.graph_kernels = p.graph_kernels;
      if (o.launch == "graph") capture(o.graph_kernels);
    }
    auto launch_start = std::chrono::steady_clock::now();
    if (o.every_us > 0) {  // this request's arrival
      const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double, std::micro>(
                                       o.every_us * static_cast<double>(launched)));
      if (due > launch_start) std::this_thread::sleep_until(due);
      launch_start = due;
    }
    if (o.launch == "plain") {
      Check(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    } else if (o.launch == "cooperative") {
      Check(cuLaunchCooperativeKernel(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params),
            "cuLaunchCooperativeKernel");
    } else if (o.launch == "graph") {
      Check(cuGraphLaunch(graph_exec, stream), "cuGraphLaunch");
    } else {
      CUlaunchConfig config{};
      config.gridDimX = config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = 32;
      config.blockDimY = config.blockDimZ = 1;
      Check(cuLaunchKernelEx(&config, spin, params, nullptr), "cuLaunchKernelEx");
    }
    ++launched;
    if (o.sync) Check(cuCtxSynchronize(), "cuCtxSynchronize");
    if (o.latency) {
      const auto done = std::chrono::steady_clock::now();
      latency_us.push_back(std::chrono::duration<double, std::micro>(done - launch_start).count());
      latency_at.push_back(std::chrono::duration<double>(launch_start - start).count());
    }
  }
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  if (graph_exec != nullptr) {
    Check(cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy");
    Check(cuGraphDestroy(graph), "cuGraphDestroy");
  }
  if (stream != nullptr) Check(cuStreamDestroy(stream), "cuStreamDestroy");
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.hold_s));
  if (buffer != 0) Check(cuMemFree(buffer), "cuMemFree");
  Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  if (!o.latency_file.empty()) WriteLatencies(o.latency_file, latency_at, latency_us);
  if (!o.quiet) {
    printf(
        "{\"kernels\":%ld,\"elapsed_s\":%.3f,\"kernel_us\":%.1f,\"launch\":\"%s\","
        "\"device\":%d,\"alloc_bytes\":%llu%s}\n",
        launched, elapsed, o.kernel_us, o.launch.c_str(), o.device, o.alloc,
        o.latency ? LatencyJson(latency_us).c_str() : "");
  }
  return 0;
}
