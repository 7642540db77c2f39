// launch_latency: the cost of driver calls as a CUDA program sees it.
//
// Linked against libcuda.so.1 by soname like any CUDA program, so the library
// search path picks the driver: the simulated one under `gpuslice sim run`,
// and later the same program measures the limiter (LD_PRELOAD) on top of it.
// Each call is timed on its own (clock_gettime around it, the timer's own
// median cost subtracted), and the table reports percentiles per call:
//
//   gpuslice sim run -- build/release/bin/gpuslice-bench-launch [--launches N]
//
// Launches go out in batches below the driver's queue limit, with a
// synchronise between batches that is not timed, so the figure is the
// uncontended launch path and never a wait for the device.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

struct Percentiles {
  double p50, p90, p99, mean;
};

Percentiles Summarize(std::vector<int64_t>& samples, int64_t timer_ns) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    size_t i =
        std::min(samples.size() - 1, static_cast<size_t>(q * static_cast<double>(samples.size())));
    return std::max<double>(0, static_cast<double>(samples[i] - timer_ns));
  };
  double sum = 0;
  for (int64_t s : samples) sum += static_cast<double>(s - timer_ns);
  return {at(0.50), at(0.90), at(0.99), sum / static_cast<double>(samples.size())};
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(rc, &name);
  fprintf(stderr, "gpuslice-bench-launch: %s failed: %s (%d)\n", what, name, rc);
  exit(1);
}

void PrintRow(const char* what, size_t calls, const Percentiles& p) {
  printf("%-26s %9zu %9.0f %9.0f %9.0f %9.0f\n", what, calls, p.p50, p.p90, p.p99, p.mean);
}

}  // namespace

int main(int argc, char** argv) {
  long launches = 200'000;
  long allocs = 20'000;
  const long kBatch = 512;  // below the simulated driver's max_pending (1024)
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--launches" || arg == "--allocs") && i + 1 < argc) {
      char* end = nullptr;
      long value = strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1) {
        fprintf(stderr, "gpuslice-bench-launch: %s needs a positive number\n", arg.c_str());
        return 2;
      }
      (arg == "--launches" ? launches : allocs) = value;
    } else {
      fprintf(stderr, "usage: gpuslice-bench-launch [--launches N] [--allocs N]\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }

  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  // The simulated driver accepts any image; a real one needs a real cubin, so
  // this benchmark is for the simulator (and the limiter on top of it).
  static const char kImage[] = "gpuslice-bench";
  CUmodule module;
  Check(cuModuleLoadData(&module, kImage), "cuModuleLoadData");
  CUfunction spin;
  Check(cuModuleGetFunction(&spin, module, "gpuslice_sim_spin"), "cuModuleGetFunction");

  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&cuLaunchKernel), &info);

  std::vector<int64_t> timer(100'000);
  for (auto& t : timer) {
    int64_t a = NowNs();
    t = NowNs() - a;
  }
  std::sort(timer.begin(), timer.end());
  const int64_t timer_ns = timer[timer.size() / 2];

  uint64_t spin_ns = 0;
  void* params[] = {&spin_ns};
  std::vector<int64_t> launch_ns;
  launch_ns.reserve(launches);
  for (long done = 0; done < launches;) {
    long n = std::min(kBatch, launches - done);
    for (long i = 0; i < n; ++i) {
      int64_t a = NowNs();
      CUresult rc = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      launch_ns.push_back(NowNs() - a);
      Check(rc, "cuLaunchKernel");
    }
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
    done += n;
  }

  std::vector<int64_t> alloc_ns;
  alloc_ns.reserve(allocs);
  for (long i = 0; i < allocs; ++i) {
    CUdeviceptr ptr;
    int64_t a = NowNs();
    CUresult rc = cuMemAlloc(&ptr, 1 << 20);
    CUresult rc_free = rc == CUDA_SUCCESS ? cuMemFree(ptr) : rc;
    alloc_ns.push_back(NowNs() - a);
    Check(rc, "cuMemAlloc");
    Check(rc_free, "cuMemFree");
  }

  printf("driver: %s\n", info.dli_fname != nullptr ? info.dli_fname : "?");
  printf("timer overhead %lld ns (subtracted)\n\n", static_cast<long long>(timer_ns));
  printf("%-26s %9s %9s %9s %9s %9s\n", "call", "calls", "p50 ns", "p90 ns", "p99 ns", "mean ns");
  PrintRow("cuLaunchKernel", launch_ns.size(), Summarize(launch_ns, timer_ns));
  PrintRow("cuMemAlloc+cuMemFree 1MiB", alloc_ns.size(), Summarize(alloc_ns, timer_ns));
  Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  return 0;
}
