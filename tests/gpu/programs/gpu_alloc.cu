// gpuslice-gpu-alloc: allocates device memory with one API until the driver
// (or the limiter) refuses, first in --chunk pieces, then in --fine pieces, and
// prints one JSON line: what was allocated, the refusal's error, and
// cudaMemGetInfo before and after (under the limiter: total = the limit).
//
//   --api malloc|async|managed|vmm   (cudaMalloc, cudaMallocAsync,
//                                     cudaMallocManaged, cuMemCreate+cuMemMap)
//   --chunk 64M --fine 2M            piece sizes
//   --max 8G                         never allocate more (protects an unlimited run)
//   --hold-ms 0                      after printing, keep everything this long
//                                    (lets a test read the driver's usage)
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "args.h"

using gpuslice::gpu_tier::Bytes;
using gpuslice::gpu_tier::Flag;

namespace {

struct Allocator {
  std::string api;
  cudaStream_t stream = nullptr;
  size_t granularity = 2 << 20;
  CUdevice device = 0;
  std::vector<void*> runtime;
  struct Vmm {
    CUmemGenericAllocationHandle handle;
    CUdeviceptr va;
    size_t size;
  };
  std::vector<Vmm> vmm;

  // Allocates `size` bytes; the error's name ("" on success).
  std::string Allocate(size_t size) {
    if (api == "vmm") {
      size = (size + granularity - 1) / granularity * granularity;
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = device;
      Vmm v{0, 0, size};
      CUresult rc = cuMemCreate(&v.handle, size, &prop, 0);
      if (rc != CUDA_SUCCESS) return DriverError(rc);
      rc = cuMemAddressReserve(&v.va, size, 0, 0, 0);
      if (rc == CUDA_SUCCESS) rc = cuMemMap(v.va, size, 0, v.handle, 0);
      if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc access = {};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = cuMemSetAccess(v.va, size, &access, 1);
      }
      if (rc != CUDA_SUCCESS) {
        cuMemRelease(v.handle);
        return "map:" + DriverError(rc);
      }
      vmm.push_back(v);
      return "";
    }
    void* p = nullptr;
    cudaError_t rc = cudaSuccess;
    if (api == "malloc") {
      rc = cudaMalloc(&p, size);
    } else if (api == "async") {
      rc = cudaMallocAsync(&p, size, stream);
      if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    } else if (api == "managed") {
      rc = cudaMallocManaged(&p, size);
    } else {
      return "unknown-api";
    }
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      return cudaGetErrorName(rc);
    }
    runtime.push_back(p);
    return "";
  }

  static std::string DriverError(CUresult rc) {
    const char* name = nullptr;
    cuGetErrorName(rc, &name);
    return name != nullptr ? name : "CUDA_ERROR_" + std::to_string(rc);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Allocator a;
  a.api = Flag(argc, argv, "api", "malloc");
  const size_t chunk = Bytes(Flag(argc, argv, "chunk", "64M"));
  const size_t fine = Bytes(Flag(argc, argv, "fine", "2M"));
  const size_t max = Bytes(Flag(argc, argv, "max", "8G"));
  const int hold_ms = std::stoi(Flag(argc, argv, "hold-ms", "0"));

  cudaError_t rc = cudaFree(nullptr);  // creates the primary context
  if (rc != cudaSuccess) {
    printf("{\"api\":\"%s\",\"error\":\"init:%s\"}\n", a.api.c_str(), cudaGetErrorName(rc));
    return 2;
  }
  cudaStreamCreate(&a.stream);
  cuCtxGetDevice(&a.device);
  if (a.api == "vmm") {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = a.device;
    cuMemGetAllocationGranularity(&a.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  }
  size_t free_before = 0, total_before = 0;
  cudaMemGetInfo(&free_before, &total_before);

  size_t allocated = 0;
  int count = 0;
  std::string refusal, fine_refusal;
  for (size_t piece : {chunk, fine}) {
    std::string& error = piece == chunk ? refusal : fine_refusal;
    while (allocated + piece <= max) {
      error = a.Allocate(piece);
      if (!error.empty()) break;
      allocated += piece;
      ++count;
    }
    if (error.empty()) error = "max-reached";
  }
  size_t free_after = 0, total_after = 0;
  cudaMemGetInfo(&free_after, &total_after);
  printf(
      "{\"api\":\"%s\",\"chunk\":%zu,\"fine\":%zu,\"allocated\":%zu,\"count\":%d,"
      "\"error\":\"%s\",\"fine_error\":\"%s\",\"free_before\":%zu,\"total_before\":%zu,"
      "\"free_after\":%zu,\"total_after\":%zu,\"pid\":%d}\n",
      a.api.c_str(), chunk, fine, allocated, count, refusal.c_str(), fine_refusal.c_str(),
      free_before, total_before, free_after, total_after, static_cast<int>(getpid()));
  fflush(stdout);
  if (hold_ms > 0) usleep(static_cast<useconds_t>(hold_ms) * 1000);
  return 0;
}
