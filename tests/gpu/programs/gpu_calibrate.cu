// gpuslice-gpu-calibrate: measures what the simulator assumes about time
// slicing (sim/core/config.h: timeslice_us, switch_us, sample_us) on the real
// GPU, and prints one JSON line.
//
// Two threads each create their own context (cuCtxCreate) and run one spin
// kernel of --seconds on it at the same time. The GPU time-slices the two
// contexts; each kernel reads the global timer (shared by all contexts) in a
// tight loop and records every gap longer than --gap-ns: the time its context
// was switched out. Then, per context, a run is the time between two gaps and
// a gap is the other context's run plus two switches, so
//   timeslice_us = median run,  switch_us = (median gap − other's median run) / 2.
// Meanwhile a host thread polls nvmlDeviceGetProcessUtilization and collects
// the distinct sample timestamps of this process: sample_us = their median
// spacing (NVML's sampling window).
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "args.h"
#include "calibration_math.h"
#include "nvml_loader.h"
#include "spin.cuh"

using gpuslice::gpu_tier::Flag;
using gpuslice::gpu_tier::GlobalTimer;
using gpuslice::gpu_tier::Number;

namespace {

constexpr unsigned kMaxGaps = 1 << 16;

// Spins for `ns`; gaps[2i], gaps[2i+1] = the timer before and after the i-th
// gap longer than `gap_ns`; *count = the gaps seen (may exceed kMaxGaps).
__global__ void RecordGaps(uint64_t ns, uint64_t gap_ns, uint64_t* gaps, unsigned* count) {
  const uint64_t start = GlobalTimer();
  uint64_t prev = start;
  unsigned n = 0;
  while (prev - start < ns) {
    const uint64_t now = GlobalTimer();
    if (now - prev > gap_ns) {
      if (n < kMaxGaps) {
        gaps[2 * n] = prev;
        gaps[2 * n + 1] = now;
      }
      ++n;
    }
    prev = now;
  }
  *count = n;
}

struct Timeline {
  std::vector<uint64_t> gaps;  // before, after, before, after…
  std::string error;
};

std::string DriverError(CUresult rc) {
  const char* name = nullptr;
  cuGetErrorName(rc, &name);
  return name != nullptr ? name : std::to_string(rc);
}

void RunContext(CUdevice device, uint64_t ns, uint64_t gap_ns, std::atomic<int>* ready,
                Timeline* out) {
  CUcontext ctx = nullptr;
  if (CUresult rc = cuCtxCreate(&ctx, nullptr, 0, device); rc != CUDA_SUCCESS) {
    out->error = "cuCtxCreate: " + DriverError(rc);
    ready->fetch_add(1);
    return;
  }
  uint64_t* gaps = nullptr;
  unsigned* count = nullptr;
  cudaMalloc(&gaps, sizeof(uint64_t) * 2 * kMaxGaps);
  cudaMalloc(&count, sizeof(unsigned));
  ready->fetch_add(1);
  while (ready->load() < 2) {
  }
  RecordGaps<<<1, 1>>>(ns, gap_ns, gaps, count);
  cudaError_t rc = cudaDeviceSynchronize();
  unsigned n = 0;
  if (rc == cudaSuccess) rc = cudaMemcpy(&n, count, sizeof n, cudaMemcpyDeviceToHost);
  n = std::min(n, kMaxGaps);
  out->gaps.resize(2 * n);
  if (rc == cudaSuccess && n > 0) {
    rc = cudaMemcpy(out->gaps.data(), gaps, sizeof(uint64_t) * 2 * n, cudaMemcpyDeviceToHost);
  }
  if (rc != cudaSuccess) out->error = cudaGetErrorName(rc);
  cudaFree(gaps);
  cudaFree(count);
  cuCtxDestroy(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = Number(Flag(argc, argv, "seconds", "3"));
  const uint64_t gap_ns = static_cast<uint64_t>(Number(Flag(argc, argv, "gap-ns", "4000")));
  if (CUresult rc = cuInit(0); rc != CUDA_SUCCESS) {
    printf("{\"error\":\"cuInit: %s\"}\n", DriverError(rc).c_str());
    return 2;
  }
  CUdevice device = 0;
  cuDeviceGet(&device, 0);
  CUuuid uuid;
  std::string uuid_text;
  if (cuDeviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
    char buf[64];
    const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
    snprintf(buf, sizeof buf,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    uuid_text = buf;
  }

  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  Timeline a, b;
  const auto ns = static_cast<uint64_t>(seconds * 1e9);
  std::thread ta(RunContext, device, ns, gap_ns, &ready, &a);
  std::thread tb(RunContext, device, ns, gap_ns, &ready, &b);

  // NVML sample timestamps of this process while the kernels run.
  std::set<unsigned long long> stamps;
  std::string nvml_error;
  std::thread poller([&] {
    gpuslice::gpu_tier::RealNvml nvml;
    if (!nvml.ok()) {
      nvml_error = nvml.error();
      return;
    }
    nvmlDevice_t dev = nvml.Device(uuid_text);
    const unsigned pid = static_cast<unsigned>(getpid());
    while (!done.load()) {
      for (const auto& s : nvml.Samples(dev, 0)) {
        if (s.pid == pid) stamps.insert(s.timeStamp);
      }
      usleep(10000);
    }
  });
  ta.join();
  tb.join();
  done = true;
  poller.join();

  using gpuslice::gpu_tier::GapsUs;
  using gpuslice::gpu_tier::Median;
  using gpuslice::gpu_tier::RunsUs;
  const double run_a = Median(RunsUs(a.gaps)), run_b = Median(RunsUs(b.gaps));
  const double gap_a = Median(GapsUs(a.gaps)), gap_b = Median(GapsUs(b.gaps));
  const auto estimate = gpuslice::gpu_tier::EstimateSlices(a.gaps, b.gaps);
  const double sample_us = gpuslice::gpu_tier::SampleWindowUs({stamps.begin(), stamps.end()});
  const std::string error = !a.error.empty() ? a.error : b.error;
  printf(
      "{\"program\":\"calibrate\",\"seconds\":%.2f,\"gaps\":[%zu,%zu],"
      "\"timeslice_us\":%.1f,\"run_us\":[%.1f,%.1f],\"gap_us\":[%.1f,%.1f],"
      "\"switch_us\":%.1f,\"nvml_samples\":%zu,\"sample_us\":%.0f,\"nvml_error\":\"%s\","
      "\"error\":\"%s\",\"uuid\":\"%s\"}\n",
      seconds, a.gaps.size() / 2, b.gaps.size() / 2, estimate.timeslice_us, run_a, run_b, gap_a,
      gap_b, estimate.switch_us, stamps.size(), sample_us, nvml_error.c_str(), error.c_str(),
      uuid_text.c_str());
  return error.empty() ? 0 : 1;
}
