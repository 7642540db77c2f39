// launch_latency: the cost of driver calls as a CUDA program sees it.
//
// Linked against libcuda.so.1 by soname like any CUDA program, so the library
// search path picks the driver: the simulated one under `gpuslice sim run`,
// and the same program measures the limiter (LD_PRELOAD) on top of it
// (bench/limiter_overhead compares the two). Three figures:
//
// - cuLaunchKernel, each call timed on its own (clock_gettime around it, the
//   timer's own median cost subtracted): p50, p90, p99, mean;
// - a cuMemAlloc_v2 + cuMemFree_v2 pair of 1 MiB, timed the same way, and
//   interleaved with it the same pair made on the driver's own entry points
//   (found in libcuda's symbol table, past any interposer): with the limiter
//   preloaded, the difference of the two is what it adds, measured in one
//   process (no run-to-run noise of the driver's own cost); without it, the
//   two are the same function and the difference is the method's error;
// - launch throughput: launches per second in bursts of kBatch launches with
//   one clock pair around each burst and none around single calls; the
//   figure is the median burst's rate (a burst the scheduler cut into does
//   not decide it); the overall rate of all bursts and the rate of the burst
//   at the fastest tenth (where a loaded machine cut in least) are reported
//   beside it.
//
//   gpuslice sim run -- build/release/bin/gpuslice-bench-launch
//       [--launches N] [--allocs N] [--burst N] [--json]
//
// Launches go out in batches below the driver's queue limit, with a
// synchronise between batches that is not timed, so every figure is the
// uncontended launch path and never a wait for the device. Kernels are the
// simulator's spin kernel with a spin of 0 ns. `--json` prints one object
// instead of the table, for scripts that compare runs.
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr long kBatch = 512;  // below the simulated driver's max_pending (1024)

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

struct Percentiles {
  size_t calls;
  double p50, p90, p99, mean;
};

// REQUIRES: !samples.empty().
Percentiles Summarize(std::vector<int64_t>& samples, int64_t timer_ns) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    size_t i =
        std::min(samples.size() - 1, static_cast<size_t>(q * static_cast<double>(samples.size())));
    return std::max<double>(0, static_cast<double>(samples[i] - timer_ns));
  };
  double sum = 0;
  for (int64_t s : samples) sum += static_cast<double>(s - timer_ns);
  return {samples.size(), at(0.50), at(0.90), at(0.99), sum / static_cast<double>(samples.size())};
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(rc, &name);
  fprintf(stderr, "gpuslice-bench-launch: %s failed: %s (%d)\n", what, name, rc);
  exit(1);
}

// `s` as a JSON string literal.
std::string JsonString(const char* s) {
  std::string out = "\"";
  for (; *s != '\0'; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void PrintRow(const char* what, const Percentiles& p) {
  printf("%-26s %9zu %9.0f %9.0f %9.0f %9.0f\n", what, p.calls, p.p50, p.p90, p.p99, p.mean);
}

void PrintJsonPercentiles(const char* key, const Percentiles& p) {
  printf(
      "  \"%s\": {\"calls\": %zu, \"p50_ns\": %.0f, \"p90_ns\": %.0f, \"p99_ns\": %.0f, "
      "\"mean_ns\": %.1f},\n",
      key, p.calls, p.p50, p.p90, p.p99, p.mean);
}

struct Options {
  long launches = 200'000;  // timed one by one
  long allocs = 20'000;     // alloc+free pairs
  long burst = 1'000'000;   // launches for the throughput figure
  bool json = false;
  bool alloc_only = false;  // only the allocation pair (any driver, a real GPU's too)
};

// Parses argv into `opts`; returns -1 to go on, else the exit code.
int ParseArgs(int argc, char** argv, Options* opts) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--launches" || arg == "--allocs" || arg == "--burst") && i + 1 < argc) {
      char* end = nullptr;
      long value = strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1) {
        fprintf(stderr, "gpuslice-bench-launch: %s needs a positive number\n", arg.c_str());
        return 2;
      }
      if (arg == "--launches") {
        opts->launches = value;
      } else if (arg == "--allocs") {
        opts->allocs = value;
      } else {
        opts->burst = value;
      }
    } else if (arg == "--json") {
      opts->json = true;
    } else if (arg == "--alloc-only") {
      opts->alloc_only = true;
    } else {
      fprintf(stderr,
              "usage: gpuslice-bench-launch [--launches N] [--allocs N] [--burst N] [--json] "
              "[--alloc-only]\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  return -1;
}

// The driver's own definition of `name`: looked up in the dynamic symbol
// table of the loaded libcuda.so*, so neither an interposed symbol nor an
// interposed dlsym answers. nullptr if not found.
// NOLINTBEGIN(performance-no-int-to-ptr): ELF addresses are integers by definition.
void* DriverSymbol(const char* name) {
  struct Query {
    const char* name;
    void* found;
  } query{name, nullptr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* q = static_cast<Query*>(data);
        if (info->dlpi_name == nullptr || strstr(info->dlpi_name, "/libcuda.so") == nullptr) {
          return 0;
        }
        const ElfW(Dyn)* dyn = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          }
        }
        const ElfW(Sym)* symtab = nullptr;
        const char* strtab = nullptr;
        for (; dyn != nullptr && dyn->d_tag != DT_NULL; ++dyn) {
          if (dyn->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(dyn->d_un.d_ptr);
          if (dyn->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(dyn->d_un.d_ptr);
        }
        // The linker lays .dynstr out right after .dynsym: the symbols end there.
        if (symtab == nullptr || strtab == nullptr ||
            reinterpret_cast<const char*>(symtab) > strtab) {
          return 0;
        }
        for (const ElfW(Sym)* s = symtab; reinterpret_cast<const char*>(s + 1) <= strtab; ++s) {
          if (s->st_name != 0 && s->st_shndx != SHN_UNDEF &&
              ELF64_ST_TYPE(s->st_info) == STT_FUNC && strcmp(strtab + s->st_name, q->name) == 0) {
            q->found = reinterpret_cast<void*>(info->dlpi_addr + s->st_value);
            return 1;
          }
        }
        return 0;
      },
      &query);
  return query.found;
}
// NOLINTEND(performance-no-int-to-ptr)

// Launches `n` spin kernels (n <= kBatch), timing each one into `samples`
// when it is non-null; returns the time of the whole batch.
int64_t LaunchBatch(CUfunction spin, void** params, long n, std::vector<int64_t>* samples) {
  const int64_t start = NowNs();
  for (long i = 0; i < n; ++i) {
    if (samples != nullptr) {
      int64_t a = NowNs();
      CUresult rc = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      samples->push_back(NowNs() - a);
      Check(rc, "cuLaunchKernel");
    } else {
      Check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    }
  }
  return NowNs() - start;
}

}  // namespace

// Times `n` cuMemAlloc_v2 + cuMemFree_v2 pairs of 1 MiB into `through`
// and, interleaved, the same pairs on the driver's own entry points into
// `direct`. False if those were not found (`direct` stays empty).
bool AllocPairs(long n, std::vector<int64_t>* through, std::vector<int64_t>* direct_ns) {
  using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
  using FreeFn = CUresult (*)(CUdeviceptr);
  const auto direct_alloc = reinterpret_cast<AllocFn>(DriverSymbol("cuMemAlloc_v2"));
  const auto direct_free = reinterpret_cast<FreeFn>(DriverSymbol("cuMemFree_v2"));
  const bool paired = direct_alloc != nullptr && direct_free != nullptr;
  through->reserve(n);
  direct_ns->reserve(n);
  for (long i = 0; i < n; ++i) {
    // The two pairs alternate which goes first.
    for (int turn = 0; turn < 2; ++turn) {
      const bool direct = paired && (turn == (i & 1));
      if (!paired && turn == 1) break;
      CUdeviceptr ptr;
      int64_t a = NowNs();
      CUresult rc = direct ? direct_alloc(&ptr, 1 << 20) : cuMemAlloc(&ptr, 1 << 20);
      CUresult rc_free = rc != CUDA_SUCCESS ? rc : direct ? direct_free(ptr) : cuMemFree(ptr);
      (direct ? direct_ns : through)->push_back(NowNs() - a);
      Check(rc, "cuMemAlloc");
      Check(rc_free, "cuMemFree");
    }
  }
  return paired;
}

int main(int argc, char** argv) {
  Options opts;
  if (int rc = ParseArgs(argc, argv, &opts); rc >= 0) return rc;

  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  if (opts.alloc_only) {
    std::vector<int64_t> timer(100'000);
    for (auto& t : timer) {
      int64_t a = NowNs();
      t = NowNs() - a;
    }
    std::sort(timer.begin(), timer.end());
    const int64_t timer_ns = timer[timer.size() / 2];
    std::vector<int64_t> warm, warm_direct, through, direct;
    AllocPairs(64, &warm, &warm_direct);
    const bool paired = AllocPairs(opts.allocs, &through, &direct);
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&cuMemAlloc), &info);
    printf("driver: %s\ntimer overhead %lld ns (subtracted)\n\n",
           info.dli_fname != nullptr ? info.dli_fname : "?", static_cast<long long>(timer_ns));
    printf("%-26s %9s %9s %9s %9s %9s\n", "call", "calls", "p50 ns", "p90 ns", "p99 ns", "mean ns");
    PrintRow("cuMemAlloc+cuMemFree 1MiB", Summarize(through, timer_ns));
    if (paired) PrintRow("  same, driver's own", Summarize(direct, timer_ns));
    Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    return 0;
  }
  // The simulated driver accepts any image; a real one needs a real cubin, so
  // this benchmark is for the simulator (and the limiter on top of it).
  static const char kImage[] = "gpuslice-bench";
  CUmodule module;
  Check(cuModuleLoadData(&module, kImage), "cuModuleLoadData");
  CUfunction spin;
  Check(cuModuleGetFunction(&spin, module, "gpuslice_sim_spin"), "cuModuleGetFunction");

  // Which library answers the program's own cuLaunchKernel: the driver, or
  // the limiter when it is preloaded.
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

  // Warm up: first-call lazy initialisation (the limiter attaches to its
  // segment then), page faults, caches.
  for (int i = 0; i < 8; ++i) {
    LaunchBatch(spin, params, kBatch, nullptr);
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
    CUdeviceptr ptr;
    Check(cuMemAlloc(&ptr, 1 << 20), "cuMemAlloc");
    Check(cuMemFree(ptr), "cuMemFree");
  }

  std::vector<int64_t> launch_ns;
  launch_ns.reserve(opts.launches);
  for (long done = 0; done < opts.launches;) {
    long n = std::min(kBatch, opts.launches - done);
    LaunchBatch(spin, params, n, &launch_ns);
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
    done += n;
  }

  const long bursts = (opts.burst + kBatch - 1) / kBatch;
  std::vector<int64_t> burst_ns;
  burst_ns.reserve(bursts);
  int64_t total_ns = 0;
  for (long b = 0; b < bursts; ++b) {
    burst_ns.push_back(LaunchBatch(spin, params, kBatch, nullptr));
    total_ns += burst_ns.back();
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  std::sort(burst_ns.begin(), burst_ns.end());
  const double launches_per_s = static_cast<double>(kBatch) * 1e9 /
                                static_cast<double>(std::max<int64_t>(burst_ns[bursts / 2], 1));
  const double overall_per_s = static_cast<double>(bursts * kBatch) * 1e9 /
                               static_cast<double>(std::max<int64_t>(total_ns, 1));
  // The fastest tenth of the bursts: what the path costs where other
  // processes of a loaded machine did not cut in (a figure beside the
  // median, never in place of it).
  const double fast_per_s = static_cast<double>(kBatch) * 1e9 /
                            static_cast<double>(std::max<int64_t>(burst_ns[bursts / 10], 1));

  std::vector<int64_t> alloc_ns;
  std::vector<int64_t> direct_ns;
  const bool paired = AllocPairs(opts.allocs, &alloc_ns, &direct_ns);

  const Percentiles launch = Summarize(launch_ns, timer_ns);
  const Percentiles alloc = Summarize(alloc_ns, timer_ns);
  const char* driver = info.dli_fname != nullptr ? info.dli_fname : "?";
  if (opts.json) {
    printf("{\n  \"driver\": %s,\n  \"timer_ns\": %lld,\n", JsonString(driver).c_str(),
           static_cast<long long>(timer_ns));
    PrintJsonPercentiles("launch", launch);
    PrintJsonPercentiles("alloc_free_1mib", alloc);
    if (paired) PrintJsonPercentiles("alloc_free_1mib_direct", Summarize(direct_ns, timer_ns));
    printf(
        "  \"throughput\": {\"launches\": %ld, \"burst\": %ld, \"elapsed_ns\": %lld, "
        "\"launches_per_s\": %.0f, \"overall_launches_per_s\": %.0f, "
        "\"fast_launches_per_s\": %.0f}\n}\n",
        bursts * kBatch, kBatch, static_cast<long long>(total_ns), launches_per_s, overall_per_s,
        fast_per_s);
  } else {
    printf("driver: %s\n", driver);
    printf("timer overhead %lld ns (subtracted)\n\n", static_cast<long long>(timer_ns));
    printf("%-26s %9s %9s %9s %9s %9s\n", "call", "calls", "p50 ns", "p90 ns", "p99 ns", "mean ns");
    PrintRow("cuLaunchKernel", launch);
    PrintRow("cuMemAlloc+cuMemFree 1MiB", alloc);
    if (paired) PrintRow("  same, driver's own", Summarize(direct_ns, timer_ns));
    printf(
        "\nthroughput: %.0f launches/s (median burst of %ld), %.0f overall (%ld launches), %.0f "
        "in the fastest tenth of the bursts\n",
        launches_per_s, kBatch, overall_per_s, bursts * kBatch, fast_per_s);
  }
  Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  return 0;
}
