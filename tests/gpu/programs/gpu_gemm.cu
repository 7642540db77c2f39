// gpuslice-gpu-gemm: a cuBLAS SGEMM loop for --seconds; prints one JSON line
// with the iterations done, the kernel time measured with CUDA events (one
// pair per GEMM), the wall time, and busy = kernel time / wall time (the
// share of the GPU this process got, as the events see it).
//
// A limiter that holds a launch back does so on the host, after the start
// event is queued: with --sync 1 the GPU is idle then, so the events' time
// includes the hold. kernel_ms therefore subtracts the time spent inside the
// launch calls (launch_ms, which holds the hold and the call's own cost, both
// spent before the kernel can start); raw_ms is the events' time as measured.
// With --sync 0 events queue behind earlier work and only raw_ms is meaningful.
//
//   --n 2048 --seconds 5 --sync 1 (synchronise after every GEMM: 1, else 0)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "args.h"

using gpuslice::gpu_tier::Flag;
using gpuslice::gpu_tier::Number;

int main(int argc, char** argv) {
  const int n = std::stoi(Flag(argc, argv, "n", "2048"));
  const double seconds = Number(Flag(argc, argv, "seconds", "5"));
  const bool sync = Flag(argc, argv, "sync", "1") == "1";

  float *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = sizeof(float) * n * n;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
      cudaMalloc(&c, bytes) != cudaSuccess) {
    printf("{\"error\":\"cudaMalloc\"}\n");
    return 2;
  }
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    printf("{\"error\":\"cublasCreate\"}\n");
    return 2;
  }
  const float alpha = 1.0f, beta = 0.0f;
  // Warm up (cuBLAS picks and loads its kernel).
  cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n);
  cudaDeviceSynchronize();

  struct Pair {
    cudaEvent_t start, stop;
  };
  std::vector<Pair> pending;
  double raw_ms = 0, launch_ms = 0;
  long iterations = 0;
  auto drain = [&] {
    for (auto& p : pending) {
      cudaEventSynchronize(p.stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, p.start, p.stop);
      raw_ms += ms;
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.stop);
    }
    pending.clear();
  };
  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::duration<double>(seconds);
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  while (std::chrono::steady_clock::now() < end && status == CUBLAS_STATUS_SUCCESS) {
    Pair p;
    cudaEventCreate(&p.start);
    cudaEventCreate(&p.stop);
    cudaEventRecord(p.start);
    const auto call = std::chrono::steady_clock::now();
    status =
        cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n);
    launch_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - call).count();
    cudaEventRecord(p.stop);
    pending.push_back(p);
    ++iterations;
    if (sync || pending.size() >= 64) drain();
  }
  drain();
  cudaDeviceSynchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  const cudaError_t last = cudaGetLastError();
  const double kernel_ms = sync ? std::max(0.0, raw_ms - launch_ms) : raw_ms;
  printf(
      "{\"program\":\"gemm\",\"n\":%d,\"iterations\":%ld,\"kernel_ms\":%.3f,\"raw_ms\":%.3f,"
      "\"launch_ms\":%.3f,\"wall_ms\":%.3f,\"busy\":%.4f,\"tflops\":%.3f,\"cublas\":%d,\"error\":"
      "\"%s\",\"pid\":%d}\n",
      n, iterations, kernel_ms, raw_ms, launch_ms, wall_ms, kernel_ms / wall_ms,
      2.0 * n * n * static_cast<double>(n) * iterations / (wall_ms * 1e9), static_cast<int>(status),
      last == cudaSuccess ? "" : cudaGetErrorName(last), static_cast<int>(getpid()));
  cublasDestroy(handle);
  return status == CUBLAS_STATUS_SUCCESS && last == cudaSuccess ? 0 : 1;
}
