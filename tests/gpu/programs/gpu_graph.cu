// gpuslice-gpu-graph: captures --kernels spin kernels of --kernel-us each into
// a CUDA graph and launches it in a loop for --seconds; prints one JSON line
// with the graph launches, the kernel time measured with CUDA events, the wall
// time and busy = kernel time / wall time. The events are recorded by nodes of
// the graph itself (first and last), so a launch a limiter holds back on the
// host adds nothing to the measured time.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>

#include "args.h"
#include "spin.cuh"

using gpuslice::gpu_tier::Flag;
using gpuslice::gpu_tier::Number;
using gpuslice::gpu_tier::SpinFor;

int main(int argc, char** argv) {
  const int kernels = std::stoi(Flag(argc, argv, "kernels", "10"));
  const double kernel_us = Number(Flag(argc, argv, "kernel-us", "200"));
  const double seconds = Number(Flag(argc, argv, "seconds", "5"));

  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaGraph_t graph;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  // External: an event-record node of the graph (a plain record in a capture
  // only orders work inside the graph).
  cudaEventRecordWithFlags(start, stream, cudaEventRecordExternal);
  for (int i = 0; i < kernels; ++i) {
    SpinFor<<<1, 1, 0, stream>>>(static_cast<uint64_t>(kernel_us * 1000));
  }
  cudaEventRecordWithFlags(stop, stream, cudaEventRecordExternal);
  cudaError_t rc = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (rc == cudaSuccess) rc = cudaGraphInstantiate(&exec, graph, 0);
  if (rc != cudaSuccess) {
    printf("{\"program\":\"graph\",\"error\":\"%s\"}\n", cudaGetErrorName(rc));
    return 2;
  }
  double kernel_ms = 0;
  long launches = 0;
  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end && rc == cudaSuccess) {
    rc = cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    kernel_ms += ms;
    ++launches;
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  if (rc == cudaSuccess) rc = cudaGetLastError();
  printf(
      "{\"program\":\"graph\",\"kernels\":%d,\"kernel_us\":%.1f,\"launches\":%ld,"
      "\"kernel_ms\":%.3f,\"wall_ms\":%.3f,\"busy\":%.4f,\"error\":\"%s\",\"pid\":%d}\n",
      kernels, kernel_us, launches, kernel_ms, wall_ms, kernel_ms / wall_ms,
      rc == cudaSuccess ? "" : cudaGetErrorName(rc), static_cast<int>(getpid()));
  return rc == cudaSuccess ? 0 : 1;
}
