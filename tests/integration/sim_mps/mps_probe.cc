// gpuslice-mps-probe: a CUDA driver-API program for the MPS tests. Reports
// what an MPS client sees and how long its kernels take.
//
//   gpuslice-mps-probe [--blocks B] [--kernels N] [--alloc BYTES]
//                      [--wait-file F] [--hold-file F]
//
// Prints JSON lines on stdout: {"stage":"ready","sms":S,"mps":M,"alloc":"<CUresult name>"}
// once its context exists; then, after --wait-file F exists (if given), runs N
// kernels "work" of B blocks x 256 threads and prints
// {"stage":"done","kernel_ms":<mean, by events>}; then, after --hold-file F
// exists (if given), tries a launch and a synchronize and prints
// {"stage":"after","launch":"<name>","sync":"<name>","alloc":"<name>"}.
// Exit codes: 0 done, 2 bad arguments, 3 an unexpected CUDA failure.
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

std::string Name(CUresult rc) {
  const char* name = nullptr;
  cuGetErrorName(rc, &name);
  return name != nullptr ? name : "?";
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  fprintf(stderr, "%s failed: %s (%d)\n", what, Name(rc).c_str(), static_cast<int>(rc));
  exit(3);
}

// Waits (up to 120 s) until `path` exists; false on time-out.
bool WaitForFile(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned blocks = 1;
  long kernels = 0;
  unsigned long long alloc = 0;
  std::string wait_file, hold_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "gpuslice-mps-probe: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--blocks") {
      blocks = static_cast<unsigned>(strtoul(v, nullptr, 10));
    } else if (a == "--kernels") {
      kernels = strtol(v, nullptr, 10);
    } else if (a == "--alloc") {
      alloc = strtoull(v, nullptr, 10);
    } else if (a == "--wait-file") {
      wait_file = v;
    } else if (a == "--hold-file") {
      hold_file = v;
    } else {
      fprintf(stderr, "gpuslice-mps-probe: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  int sms = 0, mps = 0;
  Check(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "attribute");
  Check(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev), "attribute");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUdeviceptr buffer = 0;
  CUresult alloc_rc = alloc > 0 ? cuMemAlloc(&buffer, alloc) : CUDA_SUCCESS;
  printf("{\"stage\":\"ready\",\"sms\":%d,\"mps\":%d,\"alloc\":\"%s\"}\n", sms, mps,
         Name(alloc_rc).c_str());
  fflush(stdout);

  static const char kImage[] = "gpuslice-mps-probe";  // the simulator accepts any image
  CUmodule module;
  Check(cuModuleLoadData(&module, kImage), "cuModuleLoadData");
  CUfunction work;
  Check(cuModuleGetFunction(&work, module, "work"), "cuModuleGetFunction");

  if (kernels > 0) {
    if (!wait_file.empty() && !WaitForFile(wait_file)) return 3;
    CUevent start, stop;
    Check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    Check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    Check(cuEventRecord(start, nullptr), "cuEventRecord");
    for (long k = 0; k < kernels; ++k) {
      Check(cuLaunchKernel(work, blocks, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel");
    }
    Check(cuEventRecord(stop, nullptr), "cuEventRecord");
    Check(cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    Check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    printf("{\"stage\":\"done\",\"kernel_ms\":%.6f}\n", ms / static_cast<float>(kernels));
    fflush(stdout);
  }
  if (!hold_file.empty()) {
    if (!WaitForFile(hold_file)) return 3;
    CUresult launch = cuLaunchKernel(work, 1, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr);
    CUresult sync = cuCtxSynchronize();
    CUdeviceptr more = 0;
    CUresult more_rc = cuMemAlloc(&more, 1 << 20);
    printf("{\"stage\":\"after\",\"launch\":\"%s\",\"sync\":\"%s\",\"alloc\":\"%s\"}\n",
           Name(launch).c_str(), Name(sync).c_str(), Name(more_rc).c_str());
    fflush(stdout);
  }
  return 0;
}
