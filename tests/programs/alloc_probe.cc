// gpuslice-alloc-probe: drives every device-allocation form of the CUDA
// driver API through one of the three ways a program reaches the driver, for
// the limiter's tests. Not linked against libcuda: it finds the driver as
// `--via` says.
//
//   gpuslice-alloc-probe [--via link|dlsym|procaddr] COMMAND [options]
//     --via link      names resolved in the global scope (as the dynamic
//                     linker binds a program linked against libcuda.so.1)
//     --via dlsym     dlopen("libcuda.so.1") + dlsym(handle, name) (default)
//     --via procaddr  only cuGetProcAddress_v2 comes from dlsym; every other
//                     entry point from it (cudaVersion 13000)
//   COMMANDS
//     info                      {"free":F,"total":T,"device_total":D}
//     alloc --api A [--chunk B] [--fine B] [--sync] [--max N] [--threads T]
//           [--hold-s S] [--free] [--free-hold-s S] [--go-file F]
//         A: alloc, pitch, managed, async, pool (the default pool, named),
//            created (cuMemPoolCreate'd pool, named), current (that pool made
//            current with cuDeviceSetMemPool, then cuMemAllocAsync), vmm,
//            array, array3d, mipmap, context (a cuCtxCreate_v4 per step).
//            --free destroys a created pool after freeing (before the sync)
//         Allocates chunks until the driver refuses (or N per thread), prints
//         {"api":A,"granted":N,"granted_bytes":B,"error":"...","free":F,"total":T}
//         then holds S seconds; with --free frees everything and prints
//         {"freed":N,"free_after":F}. With --go-file, prints {"ready":true}
//         once its context exists and starts allocating when F exists.
//         --fine B: once refused, goes on in B pieces until refused again
//         (granted_bytes counts both). --sync: cuStreamSynchronize after each
//         allocation (as a program using cudaMallocAsync might).
//         --free-hold-s S: after freeing, prints {"freed":N} (no memory
//         query) and holds S seconds.
//     fork --chunk B [--hold-s S]  cuInit, then fork: the child fills the
//         device (and holds it S seconds) and exits, then the parent does; prints
//         {"child_granted":N, "child_error":"...","parent_granted":M,"parent_error":"..."}
//     switch --chunk B [--hold-s S]  on devices 0 and 1 (primary contexts):
//         B on 0 (cuCtxSetCurrent), 2B on 1 (cuCtxSetCurrent), B on 0
//         (cuCtxPushCurrent), 2B on 1 (cuCtxPopCurrent back to 1), then
//         prints {"granted":4} and holds S seconds (the limiter must charge
//         each to the device current when it was made)
//     graph --api node|upload|capture --chunk B --fine P [--hold-s S]  a graph whose
//         allocation node takes B (see Graph below): launched, destroyed,
//         trimmed, with a cuMemAlloc of P tried after each step
//     absent                    calls cuInit found by dlsym(RTLD_DEFAULT)
//         without loading any driver; prints {"cuInit":rc}
//
// Exit codes: 0 done, 2 bad arguments, 3 a CUDA call failed unexpectedly.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void Usage(const std::string& problem) {
  fprintf(stderr,
          "gpuslice-alloc-probe: %s\n"
          "usage: gpuslice-alloc-probe [--via link|dlsym|procaddr] "
          "info|alloc|fork|absent [options]\n",
          problem.c_str());
  exit(2);
}

// The entry points the probe uses, by exported name.
struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxPushCurrent_v2)(CUcontext);
  CUresult (*cuCtxPopCurrent_v2)(CUcontext*);
  CUresult (*cuCtxCreate_v4)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
  CUresult (*cuMemGetInfo_v2)(size_t*, size_t*);
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemAllocPitch_v2)(CUdeviceptr*, size_t*, size_t, size_t, unsigned);
  CUresult (*cuMemAllocManaged)(CUdeviceptr*, size_t, unsigned);
  CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool*, CUdevice);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*cuMemPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
  CUresult (*cuMemPoolDestroy)(CUmemoryPool);
  CUresult (*cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
  CUresult (*cuArrayCreate_v2)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
  CUresult (*cuArray3DCreate_v2)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
  CUresult (*cuArrayDestroy)(CUarray);
  CUresult (*cuMipmappedArrayCreate)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
  CUresult (*cuMipmappedArrayDestroy)(CUmipmappedArray);
  CUresult (*cuCtxDestroy_v2)(CUcontext);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  // The graph command's (BindGraph).
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamBeginCapture_v2)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphCreate)(CUgraph*, unsigned);
  CUresult (*cuGraphAddMemAllocNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                     CUDA_MEM_ALLOC_NODE_PARAMS*);
  CUresult (*cuGraphAddMemFreeNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphInstantiateWithParams)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuDeviceGraphMemTrim)(CUdevice);
};

Api g_api{};

template <typename Fn>
void Bind(Fn* slot, const char* name, const std::string& via, void* lib) {
  void* p = nullptr;
  if (via == "link") {
    p = dlsym(RTLD_DEFAULT, name);
  } else if (via == "dlsym") {
    p = dlsym(lib, name);
  } else {
    using GetProc =
        CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    static auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
    if (get == nullptr) Usage("the driver has no cuGetProcAddress_v2");
    // The name a program asks for is the base name, without _v2.
    std::string base = name;
    if (base.size() > 3 && base.ends_with("_v2")) base.resize(base.size() - 3);
    if (base.size() > 3 && base.ends_with("_v4")) base.resize(base.size() - 3);
    CUdriverProcAddressQueryResult status;
    if (get(base.c_str(), &p, 13000, 0, &status) != CUDA_SUCCESS) p = nullptr;
  }
  if (p == nullptr) {
    fprintf(stderr, "gpuslice-alloc-probe: cannot resolve %s via %s\n", name, via.c_str());
    exit(3);
  }
  *slot = reinterpret_cast<Fn>(p);
}

void BindAll(const std::string& via) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    fprintf(stderr, "gpuslice-alloc-probe: %s\n", dlerror());
    exit(3);
  }
#define GS_BIND(name) Bind(&g_api.name, #name, via, lib)
  GS_BIND(cuGetErrorName);
  GS_BIND(cuInit);
  GS_BIND(cuDeviceGet);
  GS_BIND(cuDevicePrimaryCtxRetain);
  GS_BIND(cuCtxSetCurrent);
  GS_BIND(cuCtxPushCurrent_v2);
  GS_BIND(cuCtxPopCurrent_v2);
  GS_BIND(cuCtxCreate_v4);
  GS_BIND(cuMemGetInfo_v2);
  GS_BIND(cuDeviceTotalMem_v2);
  GS_BIND(cuMemAlloc_v2);
  GS_BIND(cuMemFree_v2);
  GS_BIND(cuMemAllocPitch_v2);
  GS_BIND(cuMemAllocManaged);
  GS_BIND(cuMemAllocAsync);
  GS_BIND(cuMemFreeAsync);
  GS_BIND(cuDeviceGetDefaultMemPool);
  GS_BIND(cuMemAllocFromPoolAsync);
  GS_BIND(cuMemPoolCreate);
  GS_BIND(cuMemPoolDestroy);
  GS_BIND(cuDeviceSetMemPool);
  GS_BIND(cuMemCreate);
  GS_BIND(cuMemRelease);
  GS_BIND(cuArrayCreate_v2);
  GS_BIND(cuArray3DCreate_v2);
  GS_BIND(cuArrayDestroy);
  GS_BIND(cuMipmappedArrayCreate);
  GS_BIND(cuMipmappedArrayDestroy);
  GS_BIND(cuCtxDestroy_v2);
  GS_BIND(cuStreamSynchronize);
#undef GS_BIND
}

void BindGraph(const std::string& via) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
#define GS_BIND(name) Bind(&g_api.name, #name, via, lib)
  GS_BIND(cuStreamCreate);
  GS_BIND(cuStreamBeginCapture_v2);
  GS_BIND(cuStreamEndCapture);
  GS_BIND(cuGraphCreate);
  GS_BIND(cuGraphAddMemAllocNode);
  GS_BIND(cuGraphAddMemFreeNode);
  GS_BIND(cuGraphInstantiateWithFlags);
  GS_BIND(cuGraphInstantiateWithParams);
  GS_BIND(cuGraphLaunch);
  GS_BIND(cuGraphExecDestroy);
  GS_BIND(cuGraphDestroy);
  GS_BIND(cuDeviceGraphMemTrim);
#undef GS_BIND
}

const char* Name(CUresult rc) {
  const char* name = "unknown error";
  g_api.cuGetErrorName(rc, &name);
  return name;
}

void Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  fprintf(stderr, "gpuslice-alloc-probe: %s failed: %s (%d)\n", what, Name(rc),
          static_cast<int>(rc));
  exit(3);
}

CUdevice InitDevice() {
  Check(g_api.cuInit(0), "cuInit");
  CUdevice dev;
  Check(g_api.cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(g_api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(g_api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return dev;
}

// One allocation of `chunk` bytes by `api`; its handle and how to free it.
struct Held {
  uint64_t handle = 0;
  int kind = 0;  // 0 pointer, 1 async pointer, 2 vmm, 3 array, 4 mipmap, 5 context
};

// The pool --api created/current allocate from (made on first use).
std::once_flag g_pool_once;
CUmemoryPool g_pool = nullptr;

CUmemoryPool CreatedPool(CUdevice dev, bool make_current) {
  std::call_once(g_pool_once, [&] {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    Check(g_api.cuMemPoolCreate(&g_pool, &props), "cuMemPoolCreate");
    if (make_current) Check(g_api.cuDeviceSetMemPool(dev, g_pool), "cuDeviceSetMemPool");
  });
  return g_pool;
}

CUresult AllocateOne(const std::string& api, CUdevice dev, uint64_t chunk, Held* out) {
  if (api == "alloc") {
    CUdeviceptr p;
    CUresult rc = g_api.cuMemAlloc_v2(&p, chunk);
    *out = {p, 0};
    return rc;
  }
  if (api == "pitch") {
    CUdeviceptr p;
    size_t pitch = 0;
    CUresult rc = g_api.cuMemAllocPitch_v2(&p, &pitch, chunk / 1024, 1024, 4);
    *out = {p, 0};
    return rc;
  }
  if (api == "managed") {
    CUdeviceptr p;
    CUresult rc = g_api.cuMemAllocManaged(&p, chunk, CU_MEM_ATTACH_GLOBAL);
    *out = {p, 0};
    return rc;
  }
  if (api == "async") {
    CUdeviceptr p;
    CUresult rc = g_api.cuMemAllocAsync(&p, chunk, nullptr);
    *out = {p, 1};
    return rc;
  }
  if (api == "pool") {
    CUmemoryPool pool;
    Check(g_api.cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
    CUdeviceptr p;
    CUresult rc = g_api.cuMemAllocFromPoolAsync(&p, chunk, pool, nullptr);
    *out = {p, 1};
    return rc;
  }
  if (api == "created" || api == "current") {
    CUmemoryPool pool = CreatedPool(dev, api == "current");
    CUdeviceptr p;
    CUresult rc = api == "current" ? g_api.cuMemAllocAsync(&p, chunk, nullptr)
                                   : g_api.cuMemAllocFromPoolAsync(&p, chunk, pool, nullptr);
    *out = {p, 1};
    return rc;
  }
  if (api == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h;
    CUresult rc = g_api.cuMemCreate(&h, chunk, &prop, 0);
    *out = {h, 2};
    return rc;
  }
  if (api == "array" || api == "array3d" || api == "mipmap") {
    // A float4 array of `chunk` bytes: 16 bytes a texel, 1024 texels a row.
    const size_t rows = chunk / (size_t{16} * 1024);
    if (api == "array") {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = 1024;
      d.Height = rows;
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 4;
      CUarray a;
      CUresult rc = g_api.cuArrayCreate_v2(&a, &d);
      *out = {reinterpret_cast<uint64_t>(a), 3};
      return rc;
    }
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = 1024;
    d.Height = rows;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 4;
    if (api == "array3d") {
      CUarray a;
      CUresult rc = g_api.cuArray3DCreate_v2(&a, &d);
      *out = {reinterpret_cast<uint64_t>(a), 3};
      return rc;
    }
    CUmipmappedArray m;
    CUresult rc = g_api.cuMipmappedArrayCreate(&m, &d, 2);
    *out = {reinterpret_cast<uint64_t>(m), 4};
    return rc;
  }
  if (api == "context") {
    CUcontext ctx;
    CUresult rc = g_api.cuCtxCreate_v4(&ctx, nullptr, 0, dev);
    *out = {reinterpret_cast<uint64_t>(ctx), 5};
    return rc;
  }
  Usage("unknown --api '" + api + "'");
}

// NOLINTBEGIN(performance-no-int-to-ptr): the probe keeps driver handles as integers.
void Free(const Held& h) {
  switch (h.kind) {
    case 0:
      Check(g_api.cuMemFree_v2(h.handle), "cuMemFree_v2");
      break;
    case 1:
      Check(g_api.cuMemFreeAsync(h.handle, nullptr), "cuMemFreeAsync");
      break;
    case 2:
      Check(g_api.cuMemRelease(h.handle), "cuMemRelease");
      break;
    case 3:
      Check(g_api.cuArrayDestroy(reinterpret_cast<CUarray>(h.handle)), "cuArrayDestroy");
      break;
    case 4:
      Check(g_api.cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(h.handle)),
            "cuMipmappedArrayDestroy");
      break;
    default:
      Check(g_api.cuCtxDestroy_v2(reinterpret_cast<CUcontext>(h.handle)), "cuCtxDestroy_v2");
  }
}
// NOLINTEND(performance-no-int-to-ptr)

struct Options {
  std::string api = "alloc";
  uint64_t chunk = 64ull << 20;
  uint64_t fine = 0;  // 0: no second phase
  bool sync = false;
  double free_hold_s = 0;
  long max = 1'000'000;
  int threads = 1;
  double hold_s = 0;
  bool free = false;
  std::string go_file;  // when set: after init, print {"ready":true} and wait for it to exist
};

int Alloc(const Options& o) {
  const CUdevice dev = InitDevice();
  if (!o.go_file.empty()) {
    printf("{\"ready\":true}\n");
    fflush(stdout);
    while (access(o.go_file.c_str(), F_OK) != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::mutex mu;
  std::vector<Held> held;
  uint64_t granted_bytes = 0;
  CUresult last = CUDA_SUCCESS;
  std::vector<std::thread> threads;
  threads.reserve(o.threads);
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&] {
      CUcontext ctx;
      g_api.cuDevicePrimaryCtxRetain(&ctx, dev);
      g_api.cuCtxSetCurrent(ctx);
      for (uint64_t size : {o.chunk, o.fine}) {
        for (long i = 0; size != 0 && i < o.max; ++i) {
          Held h;
          CUresult rc = AllocateOne(o.api, dev, size, &h);
          if (rc == CUDA_SUCCESS && o.sync) rc = g_api.cuStreamSynchronize(nullptr);
          std::lock_guard lock(mu);
          if (rc != CUDA_SUCCESS) {
            last = rc;
            break;
          }
          held.push_back(h);
          granted_bytes += size;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  size_t free = 0, total = 0;
  Check(g_api.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo_v2");
  printf(
      "{\"api\":\"%s\",\"granted\":%zu,\"granted_bytes\":%llu,\"error\":\"%s\",\"free\":%zu,"
      "\"total\":%zu}\n",
      o.api.c_str(), held.size(), static_cast<unsigned long long>(granted_bytes),
      last == CUDA_SUCCESS ? "" : Name(last), free, total);
  fflush(stdout);
  if (o.hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.hold_s));
  if (o.free) {
    for (const Held& h : held) Free(h);
    if (g_pool != nullptr) Check(g_api.cuMemPoolDestroy(g_pool), "cuMemPoolDestroy");
    Check(g_api.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    if (o.free_hold_s > 0) {
      printf("{\"freed\":%zu}\n", held.size());
      fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(o.free_hold_s));
      return 0;
    }
    Check(g_api.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo_v2");
    printf("{\"freed\":%zu,\"free_after\":%zu}\n", held.size(), free);
  }
  return 0;
}

int Info() {
  const CUdevice dev = InitDevice();
  size_t free = 0, total = 0, device_total = 0;
  Check(g_api.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo_v2");
  Check(g_api.cuDeviceTotalMem_v2(&device_total, dev), "cuDeviceTotalMem_v2");
  printf("{\"free\":%zu,\"total\":%zu,\"device_total\":%zu}\n", free, total, device_total);
  return 0;
}

// Allocates on device 0 until refused; returns how many chunks, and the error.
long FillDevice(uint64_t chunk, CUresult* rc) {
  const CUdevice dev = InitDevice();
  long granted = 0;
  for (; granted < 1'000'000; ++granted) {
    Held h;
    *rc = AllocateOne("alloc", dev, chunk, &h);
    if (*rc != CUDA_SUCCESS) break;
  }
  return granted;
}

int Fork(uint64_t chunk, double hold_s) {
  // Like a program that forks workers after initialising the driver but
  // before creating contexts (contexts never survive a fork).
  Check(g_api.cuInit(0), "cuInit");
  int out[2];
  if (pipe(out) != 0) return 3;
  const pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    close(out[0]);
    CUresult rc = CUDA_SUCCESS;
    const long granted = FillDevice(chunk, &rc);
    if (hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
    dprintf(out[1], "%ld %s", granted, Name(rc));
    _exit(0);
  }
  close(out[1]);
  char buf[128] = {};
  const ssize_t n = read(out[0], buf, sizeof buf - 1);
  int status = 0;
  waitpid(pid, &status, 0);
  long child = -1;
  char error[96] = "";
  if (n <= 0 || sscanf(buf, "%ld %95s", &child, error) != 2) {
    fprintf(stderr, "gpuslice-alloc-probe: the child reported nothing (status %d)\n", status);
    return 3;
  }
  CUresult rc = CUDA_SUCCESS;
  const long parent = FillDevice(chunk, &rc);  // the child's memory is back by now
  printf(
      "{\"child_granted\":%ld,\"child_error\":\"%s\",\"parent_granted\":%ld,"
      "\"parent_error\":\"%s\"}\n",
      child, error, parent, Name(rc));
  return 0;
}

int Switch(uint64_t chunk, double hold_s) {
  Check(g_api.cuInit(0), "cuInit");
  CUcontext ctx[2];
  for (int d = 0; d < 2; ++d) {
    CUdevice dev;
    Check(g_api.cuDeviceGet(&dev, d), "cuDeviceGet");
    Check(g_api.cuDevicePrimaryCtxRetain(&ctx[d], dev), "cuDevicePrimaryCtxRetain");
  }
  CUdeviceptr p;
  Check(g_api.cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent");
  Check(g_api.cuMemAlloc_v2(&p, chunk), "cuMemAlloc_v2 on 0");
  Check(g_api.cuCtxSetCurrent(ctx[1]), "cuCtxSetCurrent");
  Check(g_api.cuMemAlloc_v2(&p, 2 * chunk), "cuMemAlloc_v2 on 1");
  Check(g_api.cuCtxPushCurrent_v2(ctx[0]), "cuCtxPushCurrent_v2");
  Check(g_api.cuMemAlloc_v2(&p, chunk), "cuMemAlloc_v2 on 0 (pushed)");
  CUcontext popped = nullptr;
  Check(g_api.cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2");
  Check(g_api.cuMemAlloc_v2(&p, 2 * chunk), "cuMemAlloc_v2 on 1 (popped back)");
  printf("{\"granted\":4}\n");
  fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
  return 0;
}

// The graph command: a graph whose memory node allocates `chunk` (and frees
// it in the graph), built with the node API (api "node"; "upload": and
// uploaded by its instantiation) or by capturing cuMemAllocAsync/
// cuMemFreeAsync (api "capture"); instantiated, launched
// twice, destroyed, then the device's graph memory trimmed. After the
// launches, the destruction and the trim, a cuMemAlloc of `probe` bytes is
// tried (and freed). Prints one line, then holds `hold_s` seconds:
// {"launch":E,"relaunch":E,"free_after_launch":F,"alloc_after_launch":E,
//  "alloc_after_destroy":E,"alloc_after_trim":E,"free_after_trim":F}
int Graph(const std::string& api, uint64_t chunk, uint64_t probe, double hold_s) {
  const CUdevice dev = InitDevice();
  CUstream s = nullptr;
  Check(g_api.cuStreamCreate(&s, 0), "cuStreamCreate");
  CUgraph graph = nullptr;
  if (api == "capture") {
    Check(g_api.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    CUdeviceptr p = 0;
    Check(g_api.cuMemAllocAsync(&p, chunk, s), "cuMemAllocAsync (captured)");
    Check(g_api.cuMemFreeAsync(p, s), "cuMemFreeAsync (captured)");
    Check(g_api.cuStreamEndCapture(s, &graph), "cuStreamEndCapture");
  } else if (api == "node" || api == "upload") {
    Check(g_api.cuGraphCreate(&graph, 0), "cuGraphCreate");
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    params.bytesize = chunk;
    CUgraphNode alloc = nullptr, freed = nullptr;
    Check(g_api.cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params),
          "cuGraphAddMemAllocNode");
    Check(g_api.cuGraphAddMemFreeNode(&freed, graph, &alloc, 1, params.dptr),
          "cuGraphAddMemFreeNode");
  } else {
    Usage("graph --api node|upload|capture");
  }
  CUgraphExec exec = nullptr;
  if (api == "upload") {
    // Uploaded as part of instantiation (its memory mapped then): a refusal
    // shows as the launch's error.
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    params.hUploadStream = s;
    const CUresult rc = g_api.cuGraphInstantiateWithParams(&exec, graph, &params);
    if (rc != CUDA_SUCCESS) {
      CUdeviceptr p = 0;
      const CUresult after = g_api.cuMemAlloc_v2(&p, probe);
      if (after == CUDA_SUCCESS) Check(g_api.cuMemFree_v2(p), "cuMemFree_v2");
      printf("{\"launch\":\"%s\",\"instantiate\":\"%s\",\"alloc_after_launch\":\"%s\"}\n", Name(rc),
             Name(rc), Name(after));
      fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
      return 0;
    }
  } else {
    Check(g_api.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  }
  auto try_alloc = [&] {
    CUdeviceptr p = 0;
    const CUresult rc = g_api.cuMemAlloc_v2(&p, probe);
    if (rc == CUDA_SUCCESS) Check(g_api.cuMemFree_v2(p), "cuMemFree_v2");
    return rc;
  };
  auto free_bytes = [&] {
    size_t free = 0, total = 0;
    Check(g_api.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo_v2");
    return free;
  };
  const CUresult launch = g_api.cuGraphLaunch(exec, s);
  const CUresult relaunch = g_api.cuGraphLaunch(exec, s);
  Check(g_api.cuStreamSynchronize(s), "cuStreamSynchronize");
  const size_t free_after_launch = free_bytes();
  const CUresult after_launch = try_alloc();
  Check(g_api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  const CUresult after_destroy = try_alloc();
  Check(g_api.cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim");
  const CUresult after_trim = try_alloc();
  printf(
      "{\"launch\":\"%s\",\"relaunch\":\"%s\",\"free_after_launch\":%zu,"
      "\"alloc_after_launch\":\"%s\",\"alloc_after_destroy\":\"%s\","
      "\"alloc_after_trim\":\"%s\",\"free_after_trim\":%zu}\n",
      Name(launch), Name(relaunch), free_after_launch, Name(after_launch), Name(after_destroy),
      Name(after_trim), free_bytes());
  fflush(stdout);
  Check(g_api.cuGraphDestroy(graph), "cuGraphDestroy");
  std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
  return 0;
}

int Absent() {
  using Init = CUresult (*)(unsigned);
  auto init = reinterpret_cast<Init>(dlsym(RTLD_DEFAULT, "cuInit"));
  if (init == nullptr) {
    fprintf(stderr, "gpuslice-alloc-probe: no cuInit in the global scope\n");
    return 3;
  }
  printf("{\"cuInit\":%d}\n", static_cast<int>(init(0)));
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
  int i = 1;
  std::string via = "dlsym";
  if (i + 1 < argc && std::string(argv[i]) == "--via") {
    via = argv[i + 1];
    if (via != "link" && via != "dlsym" && via != "procaddr") Usage("unknown --via '" + via + "'");
    i += 2;
  }
  if (i >= argc) Usage("which command?");
  const std::string command = argv[i++];
  if (command == "absent") return Absent();
  Options o;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--free") {
      o.free = true;
      continue;
    }
    if (a == "--sync") {
      o.sync = true;
      continue;
    }
    if (i + 1 >= argc) Usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--api") {
      o.api = v;
    } else if (a == "--chunk") {
      o.chunk = static_cast<uint64_t>(Number(a, v));
    } else if (a == "--fine") {
      o.fine = static_cast<uint64_t>(Number(a, v));
    } else if (a == "--free-hold-s") {
      o.free_hold_s = Number(a, v);
    } else if (a == "--max") {
      o.max = static_cast<long>(Number(a, v));
    } else if (a == "--threads") {
      o.threads = static_cast<int>(Number(a, v));
    } else if (a == "--hold-s") {
      o.hold_s = Number(a, v);
    } else if (a == "--go-file") {
      o.go_file = v;
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  if (o.chunk < (1 << 20) || o.threads < 1) Usage("--chunk >= 1 MiB and --threads >= 1");
  BindAll(via);
  if (command == "info") return Info();
  if (command == "alloc") return Alloc(o);
  if (command == "fork") return Fork(o.chunk, o.hold_s);
  if (command == "switch") return Switch(o.chunk, o.hold_s);
  if (command == "graph") {
    BindGraph(via);
    return Graph(o.api, o.chunk, o.fine, o.hold_s);
  }
  Usage("unknown command '" + command + "'");
}
