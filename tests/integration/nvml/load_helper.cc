// nvml_load_helper: a process of the simulation that keeps device 0 busy at a
// known duty cycle, through SimGpu directly (not libcuda.so.1), for the NVML and
// nvidia-smi integration tests.
//
//   nvml_load_helper [--kernel-us K] [--idle-us I] [--alloc-mib M]
//
// Creates a context on device 0, allocates M MiB (default 0), prints "ready"
// on stdout and then, until killed: with I == 0 keeps the launch queue full of
// K-microsecond kernels (a saturating load); otherwise runs one K-microsecond
// kernel, waits for it, and idles I microseconds (duty cycle K / (K + I)).
// Exit codes: 2 bad arguments, 3 context creation failed (message on stderr,
// e.g. a compute mode forbids it), 4 other simulator errors.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "sim/core/sim_gpu.h"

namespace {

bool ParseArg(int argc, char** argv, int* i, const char* name, long* value) {
  if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return false;
  char* end = nullptr;
  *value = strtol(argv[++*i], &end, 10);
  return *end == '\0' && *value >= 0;
}

void SleepUs(long us) {
  timespec ts{us / 1'000'000, (us % 1'000'000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpuslice::sim;
  long kernel_us = 1000, idle_us = 0, alloc_mib = 0;
  for (int i = 1; i < argc; ++i) {
    if (!ParseArg(argc, argv, &i, "--kernel-us", &kernel_us) &&
        !ParseArg(argc, argv, &i, "--idle-us", &idle_us) &&
        !ParseArg(argc, argv, &i, "--alloc-mib", &alloc_mib)) {
      fprintf(stderr, "usage: %s [--kernel-us K] [--idle-us I] [--alloc-mib M]\n", argv[0]);
      return 2;
    }
  }
  if (kernel_us <= 0) return 2;
  auto options = OptionsFromEnv();
  if (!options.ok()) {
    fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 4;
  }
  auto gpu = SimGpu::Open(*options);
  if (!gpu.ok()) {
    fprintf(stderr, "%s\n", gpu.status().ToString().c_str());
    return 4;
  }
  auto ctx = (*gpu)->CreateContext(0);
  if (!ctx.ok()) {
    fprintf(stderr, "%s\n", ctx.status().ToString().c_str());
    return 3;
  }
  if (alloc_mib > 0) {
    gpuslice::Status s = (*gpu)->Allocate(*ctx, static_cast<uint64_t>(alloc_mib) << 20);
    if (!s.ok()) {
      fprintf(stderr, "%s\n", s.ToString().c_str());
      return 4;
    }
  }
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    auto seq = (*gpu)->EnqueueKernel(*ctx, kernel_us * 1000);
    if (!seq.ok()) {
      fprintf(stderr, "%s\n", seq.status().ToString().c_str());
      return 4;
    }
    if (idle_us == 0) continue;  // EnqueueKernel blocks once max_pending are queued
    if (gpuslice::Status s = (*gpu)->Wait(*ctx, *seq); !s.ok()) {
      fprintf(stderr, "%s\n", s.ToString().c_str());
      return 4;
    }
    SleepUs(idle_us);
  }
}
