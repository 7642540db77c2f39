// gpuslice-driver-probe: small single-purpose checks of a CUDA driver from a
// program linked like any CUDA program (libcuda.so.1 by soname). Tests run it
// on the simulated driver; it runs on a real one too.
//
//   gpuslice-driver-probe proc-address
//       Before cuInit, resolves names through cuGetProcAddress_v2 for several
//       cudaVersion/flags and prints one JSON object:
//       {"cuMemAlloc@3020":{"status":0,"symbol":"cuMemAlloc_v2","object":"libcuda.so.1"},...}
//       ("symbol" is the exported name the pointer belongs to and "object"
//       the file that exports it, via dladdr).
//   gpuslice-driver-probe fill [--chunk BYTES] [--hold-s S]
//       Allocates chunks on device 0 until the driver says
//       CUDA_ERROR_OUT_OF_MEMORY, checks that the failed call changed nothing
//       (cuMemGetInfo before and after), prints
//       {"chunks":N,"chunk":B,"error":"...","free_before_oom":F,"free_after_oom":F2}
//       and holds the memory for S seconds.
//
// Exit codes: 0 done, 2 bad arguments, 3 a CUDA call failed unexpectedly,
// 4 a check failed (described on stderr).
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void Usage(const std::string& problem) {
  fprintf(stderr,
          "gpuslice-driver-probe: %s\n"
          "usage: gpuslice-driver-probe proc-address\n"
          "       gpuslice-driver-probe fill [--chunk BYTES] [--hold-s S]\n",
          problem.c_str());
  exit(2);
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = "unknown error";
  cuGetErrorName(rc, &name);
  fprintf(stderr, "gpuslice-driver-probe: %s failed: %s (%d)\n", what, name, static_cast<int>(rc));
  exit(3);
}

int ProcAddress() {
  struct Query {
    const char* name;
    int version;
    cuuint64_t flags;
  };
  const Query queries[] = {
      {"cuMemAlloc", 3010, 0},
      {"cuMemAlloc", 3020, 0},
      {"cuCtxCreate", 11000, 0},
      {"cuCtxCreate", 12000, 0},
      {"cuCtxCreate", 13000, 0},
      {"cuLaunchKernel", 13000, 0},
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
      {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
      {"cuGetProcAddress", 13000, 0},
      {"cuLaunchKernelEx", 11000, 0},
      {"cuNoSuchFunction", 13000, 0},
  };
  printf("{");
  bool first = true;
  for (const Query& q : queries) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = cuGetProcAddress(q.name, &fn, q.version, q.flags, &status);
    Dl_info info{};
    const char* symbol =
        fn != nullptr && dladdr(fn, &info) != 0 && info.dli_sname != nullptr ? info.dli_sname : "";
    const char* object = fn != nullptr && info.dli_fname != nullptr ? info.dli_fname : "";
    if (const char* slash = strrchr(object, '/')) object = slash + 1;
    printf(R"(%s"%s@%d%s":{"rc":%d,"status":%d,"symbol":"%s","object":"%s"})", first ? "" : ",",
           q.name, q.version, q.flags != 0 ? "/ptds" : "", static_cast<int>(rc),
           static_cast<int>(status), symbol, object);
    first = false;
  }
  printf("}\n");
  return 0;
}

int Fill(unsigned long long chunk, double hold_s) {
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  std::vector<CUdeviceptr> held;
  CUresult rc = CUDA_SUCCESS;
  size_t before = 0, after = 0, total = 0;
  for (;;) {
    Check(cuMemGetInfo(&before, &total), "cuMemGetInfo");
    CUdeviceptr p = 0;
    rc = cuMemAlloc(&p, chunk);
    if (rc != CUDA_SUCCESS) break;
    held.push_back(p);
    if (held.size() > 1'000'000) {
      fprintf(stderr, "gpuslice-driver-probe: a million chunks and no OOM\n");
      return 4;
    }
  }
  Check(cuMemGetInfo(&after, &total), "cuMemGetInfo");
  const char* name = "unknown error";
  cuGetErrorName(rc, &name);
  printf(
      "{\"chunks\":%zu,\"chunk\":%llu,\"error\":\"%s\",\"free_before_oom\":%zu,"
      "\"free_after_oom\":%zu}\n",
      held.size(), chunk, name, before, after);
  fflush(stdout);
  if (rc != CUDA_ERROR_OUT_OF_MEMORY) {
    fprintf(stderr, "gpuslice-driver-probe: allocation failed with %s, not OOM\n", name);
    return 4;
  }
  if (before != after) {
    fprintf(stderr, "gpuslice-driver-probe: the failed allocation changed free memory\n");
    return 4;
  }
  if (hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
  for (CUdeviceptr p : held) Check(cuMemFree(p), "cuMemFree");
  return 0;
}

double Number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double v = strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) Usage(flag + " needs a non-negative number");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage("which probe?");
  const std::string probe = argv[1];
  if (probe == "proc-address") {
    if (argc != 2) Usage("proc-address takes no arguments");
    return ProcAddress();
  }
  if (probe != "fill") Usage("unknown probe '" + probe + "'");
  unsigned long long chunk = 1ull << 30;
  double hold_s = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(a + " needs a value");
    if (a == "--chunk") {
      chunk = static_cast<unsigned long long>(Number(a, argv[++i]));
      if (chunk == 0) Usage("--chunk must be positive");
    } else if (a == "--hold-s") {
      hold_s = Number(a, argv[++i]);
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  return Fill(chunk, hold_s);
}
