// The simulated driver's API, called in this process: libcuda.so.1 from
// ${GPUSLICE_BUILD_DIR}/sim/lib is dlopen'ed and its entry points called by
// their exported names, on a simulation of this process's own (a state file in
// a temporary directory). Ground truth comes from the same state file, opened
// as an observer.
//
// CTest runs every case in a process of its own; run together (the binary
// directly) the cases share one simulation, so each cleans up after itself and
// compares memory before and after instead of absolute values.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_abi/cuda_driver_api.h"
#include "sim/core/sim_gpu.h"

namespace gpuslice::sim {
namespace {

std::string BuildDir() {
  const char* dir = getenv("GPUSLICE_BUILD_DIR");
  return dir != nullptr ? dir : ".";
}

// The library, loaded once per process.
void* Lib() {
  static void* lib = dlopen((BuildDir() + "/sim/lib/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  return lib;
}

void* Sym(const char* name) {
  void* p = Lib() != nullptr ? dlsym(Lib(), name) : nullptr;
  if (p == nullptr) ADD_FAILURE() << "libcuda.so.1 does not export " << name;
  return p;
}

// CU(cuMemAlloc_v2)(&p, n): calls the simulated driver's export by name, typed
// as cuda.h declares it.
#define CU(name) (reinterpret_cast<decltype(&::name)>(Sym(#name)))

bool g_initialized = false;  // this process called cuInit (the pre-init test skips then)

class DriverApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static std::string state = [] {
      std::string dir = testing::TempDir() + "/driver_api_test." + std::to_string(getpid());
      mkdir(dir.c_str(), 0700);
      return dir + "/sim.state";
    }();
    state_path_ = state;
    setenv("GPUSLICE_SIM_STATE", state.c_str(), 1);
    unsetenv("GPUSLICE_SIM_CONFIG");
    ASSERT_NE(Lib(), nullptr) << dlerror();
    ASSERT_EQ(CU(cuInit)(0), CUDA_SUCCESS);
    g_initialized = true;
  }
  static void TearDownTestSuite() {
    unlink(state_path_.c_str());
    rmdir(state_path_.substr(0, state_path_.rfind('/')).c_str());
  }

  void SetUp() override {
    ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(CU(cuDevicePrimaryCtxRelease_v2)(0), CUDA_SUCCESS);
    CU(cuCtxSetCurrent)(nullptr);
  }

  static size_t FreeBytes() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(CU(cuMemGetInfo_v2)(&free_bytes, &total), CUDA_SUCCESS);
    return free_bytes;
  }

  // Ground truth: this process's kernels on device 0.
  static uint64_t KernelsRun() {
    auto gpu = SimGpu::Open({state_path_, "", /*observer=*/true});
    if (!gpu.ok()) return 0;
    return (*gpu)->WithState([](SimState& s) {
      uint64_t n = 0;
      for (const ProcessRecord& p : s.processes) {
        if (p.pid == getpid() && p.status == kProcessAlive) n += p.devices[0].kernels;
      }
      return n;
    });
  }

  CUfunction Spin() {
    static const char kImage[] = "any image";
    CUmodule module = nullptr;
    EXPECT_EQ(CU(cuModuleLoadData)(&module, kImage), CUDA_SUCCESS);
    CUfunction f = nullptr;
    EXPECT_EQ(CU(cuModuleGetFunction)(&f, module, "gpuslice_sim_spin"), CUDA_SUCCESS);
    return f;
  }

  static inline std::string state_path_;
  CUcontext ctx_ = nullptr;
};

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(DriverApiBeforeInitTest, OnlyVersionErrorsAndProcAddressWorkBeforeCuInit) {
  if (g_initialized) GTEST_SKIP() << "this process already initialised the driver";
  ASSERT_NE(Lib(), nullptr) << dlerror();
  int count = -1;
  EXPECT_EQ(CU(cuDeviceGetCount)(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p = 0;
  EXPECT_EQ(CU(cuMemAlloc_v2)(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext c = nullptr;
  EXPECT_EQ(CU(cuCtxGetCurrent)(&c), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(CU(cuDriverGetVersion)(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  const char* name = nullptr;
  EXPECT_EQ(CU(cuGetErrorName)(CUDA_ERROR_NOT_INITIALIZED, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_NOT_INITIALIZED");
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(CU(cuGetProcAddress_v2)("cuInit", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(Lib(), "cuInit"));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(CU(cuInit)(1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
}

TEST_F(DriverApiTest, DevicesReportTheConfiguredDevice) {
  int count = 0;
  ASSERT_EQ(CU(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);  // the default config
  CUdevice dev = -1;
  EXPECT_EQ(CU(cuDeviceGet)(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(CU(cuDeviceGet)(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(CU(cuDeviceGet)(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  char name[128] = {};
  EXPECT_EQ(CU(cuDeviceGetName)(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(CU(cuDeviceGetName)(name, sizeof name, 7), CUDA_ERROR_INVALID_DEVICE);
  size_t total = 0;
  EXPECT_EQ(CU(cuDeviceTotalMem_v2)(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 80 * kGiB);

  auto attr = [](CUdevice_attribute a) {
    int v = -1;
    EXPECT_EQ(CU(cuDeviceGetAttribute)(&v, a, 0), CUDA_SUCCESS) << a;
    return v;
  };
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), 2048);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_GT(attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE), 1'000'000);  // kHz
  EXPECT_GT(attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE), 1'000'000);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH), 5120);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE), CU_COMPUTEMODE_DEFAULT);
  int v = 0;
  EXPECT_EQ(CU(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuDeviceGetAttribute)(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_ERROR_INVALID_VALUE);

  int major = 0, minor = -1;
  EXPECT_EQ(CU(cuDeviceComputeCapability)(&major, &minor, 0), CUDA_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 90);
  CUdevprop prop{};
  EXPECT_EQ(CU(cuDeviceGetProperties)(&prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.SIMDWidth, 32);

  // PCI id: attributes, the string and the lookup agree.
  char bus_id[32] = {};
  ASSERT_EQ(CU(cuDeviceGetPCIBusId)(bus_id, sizeof bus_id, 0), CUDA_SUCCESS);
  char expected[32];
  snprintf(expected, sizeof expected, "%04X:%02X:%02X.0", attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
           attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
  EXPECT_STREQ(bus_id, expected);
  CUdevice found = -1;
  EXPECT_EQ(CU(cuDeviceGetByPCIBusId)(&found, bus_id), CUDA_SUCCESS);
  EXPECT_EQ(found, 0);
  EXPECT_EQ(CU(cuDeviceGetByPCIBusId)(&found, "not a bus id"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuDeviceGetByPCIBusId)(&found, "0000:ff:1f.0"), CUDA_ERROR_INVALID_DEVICE);

  CUuuid a{}, b{};
  EXPECT_EQ(CU(cuDeviceGetUuid_v2)(&a, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuDeviceGetUuid)(&b, 0), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(a.bytes, b.bytes, 16), 0);
  EXPECT_NE(std::count(a.bytes, a.bytes + 16, 0), 16);
}

TEST_F(DriverApiTest, ContextsFollowTheDriverStackRules) {
  CUcontext c = nullptr;
  EXPECT_EQ(CU(cuCtxCreate_v4)(&c, nullptr, 0, 0), CUDA_SUCCESS);
  CUcontext cur = nullptr;
  EXPECT_EQ(CU(cuCtxGetCurrent)(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, c);  // created contexts are pushed
  CUdevice dev = -1;
  EXPECT_EQ(CU(cuCtxGetDevice)(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  CUcontext popped = nullptr;
  EXPECT_EQ(CU(cuCtxPopCurrent_v2)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, c);
  EXPECT_EQ(CU(cuCtxGetCurrent)(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx_);  // the primary context below it
  EXPECT_EQ(CU(cuCtxPushCurrent_v2)(c), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxDestroy_v2)(c), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxGetCurrent)(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx_);
  // A destroyed context is an invalid one.
  EXPECT_EQ(CU(cuCtxPushCurrent_v2)(c), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CU(cuCtxDestroy_v2)(c), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CU(cuCtxDestroy_v2)(ctx_), CUDA_ERROR_INVALID_CONTEXT);  // primary: not this way
  EXPECT_EQ(CU(cuCtxCreate_v2)(&c, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuCtxCreate_v2)(&c, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuCtxCreate_v2)(&c, 0, 3), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(CU(cuCtxCreate_v3)(&c, nullptr, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxDestroy)(c), CUDA_SUCCESS);
  // Garbage handles are refused, not dereferenced.
  EXPECT_EQ(CU(cuCtxPushCurrent_v2)(reinterpret_cast<CUcontext>(0x1234)),
            CUDA_ERROR_INVALID_CONTEXT);

  // No current context.
  CU(cuCtxSetCurrent)(nullptr);
  EXPECT_EQ(CU(cuCtxGetCurrent)(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, nullptr);
  CUdeviceptr p = 0;
  EXPECT_EQ(CU(cuMemAlloc_v2)(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CU(cuCtxPopCurrent_v2)(&popped), CUDA_ERROR_INVALID_CONTEXT);

  // Primary context reference counting.
  unsigned flags = 1;
  int active = 0;
  EXPECT_EQ(CU(cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);  // retained by SetUp
  CUcontext again = nullptr;
  EXPECT_EQ(CU(cuDevicePrimaryCtxRetain)(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, ctx_);
  EXPECT_EQ(CU(cuDevicePrimaryCtxRelease_v2)(0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuDevicePrimaryCtxSetFlags_v2)(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_CTX_SCHED_BLOCKING_SYNC});
  EXPECT_EQ(CU(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
}

TEST_F(DriverApiTest, EveryDeviceAllocationFormIsAccountedAndFreed) {
  const size_t before = FreeBytes();
  auto used = [&] { return before - FreeBytes(); };
  CUdeviceptr p = 0;
  ASSERT_EQ(CU(cuMemAlloc_v2)(&p, 3 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(used(), 4 * kMiB);  // 2 MiB granularity
  EXPECT_EQ(CU(cuMemFree_v2)(p), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(CU(cuMemFree_v2)(p), CUDA_ERROR_INVALID_VALUE);  // twice
  EXPECT_EQ(CU(cuMemFree_v2)(0x12345), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemAlloc_v2)(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemAlloc_v2)(nullptr, 1), CUDA_ERROR_INVALID_VALUE);

  size_t pitch = 0;
  ASSERT_EQ(CU(cuMemAllocPitch_v2)(&p, &pitch, 1000, 1024, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(used(), 2 * kMiB);
  EXPECT_EQ(CU(cuMemFree_v2)(p), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemAllocPitch_v2)(&p, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(CU(cuMemAllocManaged)(&p, kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(used(), 2 * kMiB);
  EXPECT_EQ(CU(cuMemFree_v2)(p), CUDA_SUCCESS);

  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  // Stream-ordered: the device counts the pool's reserve (32 MiB blocks by
  // default), which keeps freed memory until a synchronize.
  ASSERT_EQ(CU(cuMemAllocAsync)(&p, 5 * kMiB, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 32 * kMiB);
  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemAllocAsync_ptsz)(&p, kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFreeAsync_ptsz)(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(used(), 32 * kMiB);
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);

  CUmemoryPool pool = nullptr;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(CU(cuMemPoolCreate)(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemAllocFromPoolAsync)(&p, 2 * kMiB, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 32 * kMiB);
  cuuint64_t pool_used = 0;
  EXPECT_EQ(CU(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &pool_used),
            CUDA_SUCCESS);
  EXPECT_EQ(pool_used, 2 * kMiB);
  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemPoolDestroy)(pool), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  CUmemoryPool default_pool = nullptr;
  EXPECT_EQ(CU(cuDeviceGetDefaultMemPool)(&default_pool, 0), CUDA_SUCCESS);
  EXPECT_NE(default_pool, nullptr);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);

  // Virtual memory management: physical memory counts from cuMemCreate until
  // it is released and unmapped.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t granularity = 0;
  ASSERT_EQ(
      CU(cuMemGetAllocationGranularity)(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      CUDA_SUCCESS);
  EXPECT_EQ(granularity, 2 * kMiB);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(CU(cuMemCreate)(&h, kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // not a multiple
  ASSERT_EQ(CU(cuMemCreate)(&h, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(used(), 4 * kMiB);
  CUdeviceptr va = 0;
  ASSERT_EQ(CU(cuMemAddressReserve)(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % granularity, 0u);
  ASSERT_EQ(CU(cuMemMap)(va, 4 * kMiB, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemMap)(va + 4 * kMiB, 4 * kMiB, 0, h, 0), CUDA_SUCCESS);  // aliased
  EXPECT_EQ(CU(cuMemMap)(va, 4 * kMiB, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
  CUmemAccessDesc access{};
  access.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(CU(cuMemSetAccess)(va, 8 * kMiB, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemsetD32_v2)(va + 16, 0xabcdef01u, 1), CUDA_SUCCESS);
  uint32_t word = 0;
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(&word, va + 4 * kMiB + 16, 4), CUDA_SUCCESS);
  EXPECT_EQ(word, 0xabcdef01u);  // both mappings show the same physical memory
  EXPECT_EQ(CU(cuMemRelease)(h), CUDA_SUCCESS);
  EXPECT_EQ(used(), 4 * kMiB);  // still mapped
  EXPECT_EQ(CU(cuMemUnmap)(va, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemUnmap)(va + 4 * kMiB, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(CU(cuMemAddressFree)(va, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemRelease)(h), CUDA_ERROR_INVALID_VALUE);

  // Arrays.
  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = 1024;
  d2.Height = 1024;
  d2.Format = CU_AD_FORMAT_FLOAT;
  d2.NumChannels = 4;  // 16 MiB
  CUarray arr = nullptr;
  ASSERT_EQ(CU(cuArrayCreate_v2)(&arr, &d2), CUDA_SUCCESS);
  EXPECT_EQ(used(), 16 * kMiB);
  EXPECT_EQ(CU(cuArrayDestroy)(arr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuArrayDestroy)(arr), CUDA_ERROR_INVALID_HANDLE);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 256;
  d3.Height = 256;
  d3.Depth = 64;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 1;  // 4 MiB
  ASSERT_EQ(CU(cuArray3DCreate_v2)(&arr, &d3), CUDA_SUCCESS);
  EXPECT_EQ(used(), 4 * kMiB);
  EXPECT_EQ(CU(cuArrayDestroy)(arr), CUDA_SUCCESS);
  CUmipmappedArray mip = nullptr;
  ASSERT_EQ(CU(cuMipmappedArrayCreate)(&mip, &d3, 2), CUDA_SUCCESS);  // 4 MiB + 512 KiB
  EXPECT_EQ(used(), 6 * kMiB);
  EXPECT_EQ(CU(cuMipmappedArrayDestroy)(mip), CUDA_SUCCESS);
  d3.NumChannels = 3;
  EXPECT_EQ(CU(cuArray3DCreate_v2)(&arr, &d3), CUDA_ERROR_INVALID_VALUE);

  // Host memory is not device memory.
  void* host = nullptr;
  ASSERT_EQ(CU(cuMemAllocHost_v2)(&host, 64 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemHostAlloc)(&host, 64 * kMiB, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  CUdeviceptr mapped = 0;
  EXPECT_EQ(CU(cuMemHostGetDevicePointer_v2)(&mapped, host, 0), CUDA_SUCCESS);
  EXPECT_EQ(mapped, reinterpret_cast<CUdeviceptr>(host));
  EXPECT_EQ(CU(cuMemFreeHost)(host), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFreeHost)(host), CUDA_ERROR_INVALID_VALUE);
}

// The default pool accounts the process's very first cuMemAllocAsync, before
// anything asked for the pool (CTest runs this case in a fresh process, so the
// pool has not been queried yet).
// Graph memory nodes (docs/sim.md "Graph memory"): no physical memory at
// node creation or instantiation; the graph pool maps an exec's allocations
// at its first launch (or upload) and keeps them between launches; a
// destroyed exec's memory stays in the graph pool until cuDeviceGraphMemTrim,
// which also unmaps idle execs; unfreed allocations keep their memory and
// block a relaunch until freed.
TEST_F(DriverApiTest, GraphMemoryIsMappedAtLaunchKeptBetweenLaunchesAndTrimmed) {
  const size_t before = FreeBytes();
  auto used = [&] { return before - FreeBytes(); };
  auto graph_mem = [&](CUgraphMem_attribute a) {
    cuuint64_t v = 0;
    EXPECT_EQ(CU(cuDeviceGetGraphMemAttribute)(0, a, &v), CUDA_SUCCESS);
    return v;
  };
  CUgraph graph = nullptr;
  ASSERT_EQ(CU(cuGraphCreate)(&graph, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  params.bytesize = 63 * kMiB;
  CUgraphNode alloc = nullptr;
  ASSERT_EQ(CU(cuGraphAddMemAllocNode)(&alloc, graph, nullptr, 0, &params), CUDA_SUCCESS);
  ASSERT_NE(params.dptr, 0u);
  CUgraphNode freed = nullptr;
  ASSERT_EQ(CU(cuGraphAddMemFreeNode)(&freed, graph, &alloc, 1, params.dptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphAddMemFreeNode)(&freed, graph, &alloc, 1, params.dptr),
            CUDA_ERROR_INVALID_VALUE);  // twice
  // The nodes as a program (or the limiter) walks them.
  size_t count = 0;
  ASSERT_EQ(CU(cuGraphGetNodes)(graph, nullptr, &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2u);
  CUgraphNode nodes[2] = {};
  ASSERT_EQ(CU(cuGraphGetNodes)(graph, nodes, &count), CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(CU(cuGraphNodeGetType)(nodes[0], &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  ASSERT_EQ(CU(cuGraphNodeGetType)(nodes[1], &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  ASSERT_EQ(CU(cuGraphMemAllocNodeGetParams)(nodes[0], &got), CUDA_SUCCESS);
  EXPECT_EQ(got.bytesize, 63 * kMiB);
  EXPECT_EQ(got.dptr, params.dptr);
  EXPECT_EQ(got.poolProps.location.id, 0);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(CU(cuGraphInstantiateWithFlags)(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);  // nothing before the launch
  EXPECT_EQ(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 64 * kMiB);
  EXPECT_EQ(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 64 * kMiB);
  EXPECT_EQ(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 64 * kMiB);
  ASSERT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);  // kept: nothing more
  EXPECT_EQ(used(), 64 * kMiB);
  ASSERT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 64 * kMiB);                          // a synchronize releases nothing of it
  ASSERT_EQ(CU(cuDeviceGraphMemTrim)(0), CUDA_SUCCESS);  // idle: unmapped, released
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 64 * kMiB);
  ASSERT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);  // mapped again
  EXPECT_EQ(used(), 64 * kMiB);
  ASSERT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(used(), 64 * kMiB);  // destroyed: still the graph pool's
  EXPECT_EQ(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  ASSERT_EQ(CU(cuDeviceGraphMemTrim)(0), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(CU(cuGraphDestroy)(graph), CUDA_SUCCESS);

  // Captured cuMemAllocAsync, not freed in the graph: live after the launch.
  ASSERT_EQ(CU(cuStreamBeginCapture_v2)(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(CU(cuMemAllocAsync)(&p, 10 * kMiB, s), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuStreamEndCapture)(s, &graph), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  ASSERT_EQ(CU(cuGraphInstantiateWithFlags)(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 10 * kMiB);
  EXPECT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_ERROR_INVALID_VALUE);  // its allocation is live
  ASSERT_EQ(CU(cuDeviceGraphMemTrim)(0), CUDA_SUCCESS);
  EXPECT_EQ(used(), 10 * kMiB);  // in use: kept
  ASSERT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemFree_v2)(p), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuDeviceGraphMemTrim)(0), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphDestroy)(graph), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

// CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD maps the graph's memory at
// instantiation, as cuGraphUpload would.
TEST_F(DriverApiTest, AnInstantiationWithUploadMapsTheGraphsMemory) {
  const size_t before = FreeBytes();
  CUgraph graph = nullptr;
  ASSERT_EQ(CU(cuGraphCreate)(&graph, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  params.bytesize = 32 * kMiB;
  CUgraphNode alloc = nullptr;
  ASSERT_EQ(CU(cuGraphAddMemAllocNode)(&alloc, graph, nullptr, 0, &params), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  CUDA_GRAPH_INSTANTIATE_PARAMS inst{};
  inst.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  inst.hUploadStream = s;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(CU(cuGraphInstantiateWithParams)(&exec, graph, &inst), CUDA_SUCCESS);
  EXPECT_EQ(inst.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), 32 * kMiB);
  ASSERT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuDeviceGraphMemTrim)(0), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(CU(cuGraphDestroy)(graph), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

// A launch whose graph memory does not fit on the device fails with
// out-of-memory and runs nothing.
TEST_F(DriverApiTest, AGraphWhoseMemoryDoesNotFitFailsItsLaunch) {
  size_t free = 0, total = 0;
  ASSERT_EQ(CU(cuMemGetInfo_v2)(&free, &total), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(CU(cuGraphCreate)(&graph, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  params.bytesize = free + 2 * kMiB;
  CUgraphNode alloc = nullptr;
  ASSERT_EQ(CU(cuGraphAddMemAllocNode)(&alloc, graph, nullptr, 0, &params), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(CU(cuGraphInstantiateWithFlags)(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphLaunch)(exec, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), free);
  EXPECT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphDestroy)(graph), CUDA_SUCCESS);
}

// CUmemPoolProps::maxSize bounds a pool's reserve: an allocation whose
// growth would pass it is refused and the pool does not grow at all.
TEST_F(DriverApiTest, APoolWithAMaximumSizeRefusesGrowthPastIt) {
  const size_t before = FreeBytes();
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  props.maxSize = 48 * kMiB;  // one 32 MiB block fits, two do not
  ASSERT_EQ(CU(cuMemPoolCreate)(&pool, &props), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(CU(cuMemAllocFromPoolAsync)(&p, 2 * kMiB, pool, s), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  EXPECT_EQ(CU(cuMemAllocFromPoolAsync)(&q, 32 * kMiB, pool, s), CUDA_ERROR_OUT_OF_MEMORY);
  cuuint64_t reserved = 0;
  EXPECT_EQ(CU(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), 0);
  EXPECT_EQ(reserved, 32 * kMiB);
  EXPECT_EQ(before - FreeBytes(), 32 * kMiB);
  EXPECT_EQ(CU(cuMemAllocFromPoolAsync)(&q, 30 * kMiB, pool, s), CUDA_SUCCESS);  // its free reserve
  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFreeAsync)(q, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemPoolDestroy)(pool), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

TEST_F(DriverApiTest, DefaultPoolCountsAsyncAllocationsMadeBeforeItIsQueried) {
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0, q = 0;
  ASSERT_EQ(CU(cuMemAllocAsync)(&p, 3 * kMiB, s), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemAllocAsync_ptsz)(&q, kMiB, nullptr), CUDA_SUCCESS);

  CUmemoryPool pool = nullptr;
  ASSERT_EQ(CU(cuDeviceGetDefaultMemPool)(&pool, 0), CUDA_SUCCESS);
  CUmemoryPool current = nullptr;
  ASSERT_EQ(CU(cuDeviceGetMemPool)(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, pool);
  auto attr = [&](CUmemPool_attribute a) {
    cuuint64_t v = 0;
    EXPECT_EQ(CU(cuMemPoolGetAttribute)(pool, a, &v), CUDA_SUCCESS);
    return v;
  };
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 6 * kMiB);       // 4 + 2 (2 MiB granularity)
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 32 * kMiB);  // one block
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 6 * kMiB);

  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 2 * kMiB);
  EXPECT_EQ(CU(cuMemFreeAsync)(q, s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 6 * kMiB);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

// docs/sim.md "Memory pools": the reserve grows in blocks, the device (and
// so NVML's per-process usage) counts the reserve, freed memory stays until a
// synchronize releases what is above the release threshold or a trim.
TEST_F(DriverApiTest, APoolsReserveGrowsInBlocksAndIsReleasedAtSynchronizeOrTrim) {
  const size_t before = FreeBytes();
  auto used = [&] { return before - FreeBytes(); };
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(CU(cuMemPoolCreate)(&pool, &props), CUDA_SUCCESS);
  auto attr = [&](CUmemPool_attribute a) {
    cuuint64_t v = 0;
    EXPECT_EQ(CU(cuMemPoolGetAttribute)(pool, a, &v), CUDA_SUCCESS);
    return v;
  };
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  std::vector<CUdeviceptr> ptrs(17);
  for (CUdeviceptr& p : ptrs) ASSERT_EQ(CU(cuMemAllocFromPoolAsync)(&p, 2 * kMiB, pool, s), 0);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 34 * kMiB);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 64 * kMiB);  // two 32 MiB blocks
  EXPECT_EQ(used(), 64 * kMiB);
  for (CUdeviceptr p : ptrs) EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(used(), 64 * kMiB);  // kept until a synchronize

  // A release threshold keeps memory across synchronizes; a trim releases it.
  cuuint64_t threshold = 40 * kMiB;
  ASSERT_EQ(CU(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), 0);
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 32 * kMiB);  // whole blocks <= 40
  EXPECT_EQ(used(), 32 * kMiB);
  EXPECT_EQ(CU(cuMemPoolTrimTo)(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 64 * kMiB);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 34 * kMiB);
  cuuint64_t zero = 0;
  EXPECT_EQ(CU(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero), 0);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);

  // Threshold 0 (the default) and the context's synchronize: back at once.
  threshold = 0;
  ASSERT_EQ(CU(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), 0);
  CUdeviceptr p = 0;
  ASSERT_EQ(CU(cuMemAllocFromPoolAsync)(&p, 50 * kMiB, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 64 * kMiB);
  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);

  // Destroyed with an allocation outstanding: its memory goes with that one.
  ASSERT_EQ(CU(cuMemAllocFromPoolAsync)(&p, 2 * kMiB, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemPoolDestroy)(pool), CUDA_SUCCESS);
  EXPECT_EQ(used(), 32 * kMiB);
  cuuint64_t v = 0;
  EXPECT_EQ(CU(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

TEST_F(DriverApiTest, OutOfMemoryFailsAndChangesNothing) {
  const size_t before = FreeBytes();
  CUdeviceptr p = 0;
  EXPECT_EQ(CU(cuMemAlloc_v2)(&p, before + kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), before);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(CU(cuMemCreate)(&h, (before / (2 * kMiB) + 1) * 2 * kMiB, &prop, 0),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), before);
  // Fill the device, then one more byte fails.
  std::vector<CUdeviceptr> held;
  for (;;) {
    CUresult rc = CU(cuMemAlloc_v2)(&p, 8 * kGiB);
    if (rc != CUDA_SUCCESS) {
      EXPECT_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY);
      break;
    }
    held.push_back(p);
    ASSERT_LT(held.size(), 20u);
  }
  const size_t full = FreeBytes();
  EXPECT_LT(full, 8 * kGiB);
  EXPECT_EQ(CU(cuMemAlloc_v2)(&p, full + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), full);
  for (CUdeviceptr q : held) EXPECT_EQ(CU(cuMemFree_v2)(q), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DriverApiTest, CopiesAndSetsMoveRealBytesAndRejectBadPointers) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(CU(cuMemAlloc_v2)(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemAlloc_v2)(&b, 4096), CUDA_SUCCESS);
  std::vector<uint8_t> in(4096), out(4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(a, in.data(), in.size()), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoD_v2_ptds)(b, a, in.size()), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(out.data(), b, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  EXPECT_EQ(CU(cuMemsetD8Async)(b, 0x5a, 10, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemsetD16_v2)(b + 10, 0x1234, 3), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoHAsync_v2_ptsz)(out.data(), b, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(out[9], 0x5a);
  EXPECT_EQ(out[10], 0x34);
  EXPECT_EQ(out[15], 0x12);
  EXPECT_EQ(CU(cuMemsetD32_v2)(b + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned

  // 2D: a 16x4 block out of a pitch-64 layout.
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = in.data();
  c.srcPitch = 64;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = b;
  c.dstPitch = 16;
  c.WidthInBytes = 16;
  c.Height = 4;
  EXPECT_EQ(CU(cuMemcpy2D_v2)(&c), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(out.data(), b, 64), CUDA_SUCCESS);
  for (size_t row = 0; row < 4; ++row) {
    EXPECT_EQ(memcmp(&out[row * 16], &in[row * 64], 16), 0) << row;
  }
  c.Height = 1000;  // past the end of b
  EXPECT_EQ(CU(cuMemcpy2D_v2)(&c), CUDA_ERROR_INVALID_VALUE);
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(CU(cuMemcpy2D_v2)(&c), CUDA_ERROR_INVALID_VALUE);  // no array given

  // Bad device pointers fail instead of crashing.
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(0xdead0000, in.data(), 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(out.data(), a + 4000, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(a, nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemsetD8_v2)(0, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuMemsetD8_v2)(0xdead0000, 0, 16), CUDA_ERROR_INVALID_VALUE);
  // Unified copies between device memory and plain host memory.
  EXPECT_EQ(CU(cuMemcpy)(reinterpret_cast<CUdeviceptr>(out.data()), a, 8), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(out.data(), in.data(), 8), 0);

  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(CU(cuMemGetAddressRange_v2)(&base, &size, a + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 4096u);
  EXPECT_EQ(CU(cuMemFree_v2)(a), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFree_v2)(b), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(a, in.data(), 16), CUDA_ERROR_INVALID_VALUE);  // freed
}

TEST_F(DriverApiTest, EveryLaunchFormAndGraphRunsItsKernels) {
  CUfunction spin = Spin();
  uint64_t ns = 1000;
  void* params[] = {&ns};
  const uint64_t start = KernelsRun();
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel_ptsz)(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchCooperativeKernel)(spin, 132, 1, 1, 1024, 1, 1, 0, s, params), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchCooperativeKernel_ptsz)(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params),
            CUDA_SUCCESS);
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 64;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;
  config.attrs = &coop;
  config.numAttrs = 1;
  EXPECT_EQ(CU(cuLaunchKernelEx)(&config, spin, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernelEx_ptsz)(&config, spin, params, nullptr), CUDA_SUCCESS);
  // Parameters passed as one buffer.
  size_t buffer_size = sizeof ns;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                   CU_LAUNCH_PARAM_END};
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, s, nullptr, extra), CUDA_SUCCESS);

  // A graph built by hand: two kernel nodes and an empty one.
  CUgraph g = nullptr;
  ASSERT_EQ(CU(cuGraphCreate)(&g, 0), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS kp{};
  kp.func = spin;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = 32;
  kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = params;
  CUgraphNode n1 = nullptr, n2 = nullptr, n3 = nullptr;
  ASSERT_EQ(CU(cuGraphAddKernelNode_v2)(&n1, g, nullptr, 0, &kp), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuGraphAddKernelNode_v2)(&n2, g, &n1, 1, &kp), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuGraphAddEmptyNode)(&n3, g, &n2, 1), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(CU(cuGraphInstantiateWithFlags)(&exec, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphLaunch_ptsz)(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphDestroy)(g), CUDA_SUCCESS);

  // A graph captured from a stream: launches into it run only when it does.
  ASSERT_EQ(CU(cuStreamBeginCapture_v2)(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(CU(cuStreamIsCapturing)(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  }
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(CU(cuStreamEndCapture)(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamEndCapture)(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(CU(cuStreamBeginCapture_v2)(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(KernelsRun() - start, 7u + 4u);  // 7 launches, 2 graph launches of 2 kernels
  ASSERT_EQ(CU(cuGraphInstantiateWithFlags)(&exec, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(KernelsRun() - start, 7u + 4u + 3u);
  EXPECT_EQ(CU(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuGraphDestroy)(g), CUDA_SUCCESS);

  // Refused launches.
  EXPECT_EQ(CU(cuLaunchCooperativeKernel)(spin, 1000, 1, 1, 1024, 1, 1, 0, s, params),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 2048, 1, 1, 0, s, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 0, 1, 1, 32, 1, 1, 0, s, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuLaunchKernel)(reinterpret_cast<CUfunction>(0x77), 1, 1, 1, 32, 1, 1, 0, s, params,
                               nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(0x5000),
                               params, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr),
            CUDA_ERROR_INVALID_HANDLE);  // destroyed stream
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(KernelsRun() - start, 14u);
}

TEST_F(DriverApiTest, EventsAndStreamsFollowTheSimulatedClock) {
  CUfunction spin = Spin();
  uint64_t ns = 20'000'000;  // 20 ms
  void* params[] = {&ns};
  CUstream s = nullptr;
  ASSERT_EQ(CU(cuStreamCreateWithPriority)(&s, 0, -1), CUDA_SUCCESS);
  int priority = 0;
  EXPECT_EQ(CU(cuStreamGetPriority)(s, &priority), CUDA_SUCCESS);
  EXPECT_EQ(priority, -1);
  CUevent start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_EQ(CU(cuEventCreate)(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventCreate)(&end, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventCreate)(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(CU(cuEventElapsedTime_v2)(&ms, start, end), CUDA_ERROR_INVALID_HANDLE);  // unrecorded
  EXPECT_EQ(CU(cuEventRecord)(start, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventRecord_ptsz)(end, s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventRecord)(untimed, s), CUDA_SUCCESS);
  // Launches return at once; the kernel is still running.
  EXPECT_EQ(CU(cuStreamQuery)(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(CU(cuEventQuery)(end), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(CU(cuEventElapsedTime_v2)(&ms, start, end), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(CU(cuEventSynchronize)(end), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventQuery)(end), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventElapsedTime)(&ms, start, end), CUDA_SUCCESS);
  EXPECT_NEAR(ms, 20.0, 0.5);
  EXPECT_EQ(CU(cuEventElapsedTime_v2)(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuStreamWaitEvent)(nullptr, end, 0), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamQuery_ptsz)(nullptr), CUDA_SUCCESS);
  CUcontext owner = nullptr;
  EXPECT_EQ(CU(cuStreamGetCtx)(s, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, ctx_);
  for (CUevent e : {start, end, untimed}) EXPECT_EQ(CU(cuEventDestroy_v2)(e), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventQuery)(end), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuEventCreate)(&start, 0x40), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuStreamCreate)(&s, 0x40), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

TEST_F(DriverApiTest, ModulesLibrariesAndFunctionsAcceptAnyImage) {
  static const char kImage[] =
      "\x7f"
      "ELF not really";
  CUmodule m = nullptr;
  ASSERT_EQ(CU(cuModuleLoadDataEx)(&m, kImage, 0, nullptr, nullptr), CUDA_SUCCESS);
  CUfunction f1 = nullptr, f2 = nullptr, f3 = nullptr;
  ASSERT_EQ(CU(cuModuleGetFunction)(&f1, m, "_Z6matmulPfS_S_"), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuModuleGetFunction)(&f2, m, "_Z6matmulPfS_S_"), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuModuleGetFunction)(&f3, m, "other"), CUDA_SUCCESS);
  EXPECT_EQ(f1, f2);
  EXPECT_NE(f1, f3);
  const char* name = nullptr;
  EXPECT_EQ(CU(cuFuncGetName)(&name, f1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z6matmulPfS_S_");
  int regs = 0;
  EXPECT_EQ(CU(cuFuncGetAttribute)(&regs, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f1),
            CUDA_SUCCESS);
  EXPECT_EQ(regs, 1024);
  CUdeviceptr global = 0;
  size_t bytes = 0;
  ASSERT_EQ(CU(cuModuleGetGlobal_v2)(&global, &bytes, m, "counter"), CUDA_SUCCESS);
  EXPECT_GE(bytes, 8u);
  uint64_t value = 42, back = 0;
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(global, &value, sizeof value), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(&back, global, sizeof back), CUDA_SUCCESS);
  EXPECT_EQ(back, 42u);
  // A non-spin kernel runs for the duration model's time; it runs.
  EXPECT_EQ(CU(cuLaunchKernel)(f1, 1000, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuModuleUnload)(m), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel)(f1, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuModuleUnload)(m), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CU(cuModuleLoad)(&m, "/nonexistent/kernels.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(CU(cuModuleLoadData)(&m, nullptr), CUDA_ERROR_INVALID_VALUE);

  // Libraries: context-independent; a CUkernel launches as a CUfunction.
  CUlibrary lib = nullptr;
  ASSERT_EQ(CU(cuLibraryLoadData)(&lib, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel k = nullptr;
  ASSERT_EQ(CU(cuLibraryGetKernel)(&k, lib, "gpuslice_sim_spin"), CUDA_SUCCESS);
  CUfunction kf = nullptr;
  EXPECT_EQ(CU(cuKernelGetFunction)(&kf, k), CUDA_SUCCESS);
  uint64_t ns = 1000;
  void* params[] = {&ns};
  const uint64_t before = KernelsRun();
  EXPECT_EQ(CU(cuLaunchKernel)(reinterpret_cast<CUfunction>(k), 1, 1, 1, 32, 1, 1, 0, nullptr,
                               params, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(CU(cuLaunchKernel)(kf, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(KernelsRun() - before, 2u);
  EXPECT_EQ(CU(cuLibraryUnload)(lib), CUDA_SUCCESS);
}

TEST_F(DriverApiTest, ProcAddressHonoursVersionAndPerThreadFlag) {
  auto resolve = [](const char* name, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult* status) {
    void* fn = nullptr;
    CUresult rc = CU(cuGetProcAddress_v2)(name, &fn, version, flags, status);
    Dl_info info{};
    std::string symbol =
        fn != nullptr && dladdr(fn, &info) != 0 && info.dli_sname != nullptr ? info.dli_sname : "";
    return std::make_pair(rc, symbol);
  };
  CUdriverProcAddressQueryResult st{};
  EXPECT_EQ(resolve("cuMemAlloc", 3020, 0, &st).second, "cuMemAlloc_v2");
  EXPECT_EQ(resolve("cuMemAlloc", 3010, 0, &st).second, "cuMemAlloc");
  // Per driver_symbols.inc: _v2 from 3020, _v3 from 11040, _v4 from 12050.
  EXPECT_EQ(resolve("cuCtxCreate", 11000, 0, &st).second, "cuCtxCreate_v2");
  EXPECT_EQ(resolve("cuCtxCreate", 12000, 0, &st).second, "cuCtxCreate_v3");
  EXPECT_EQ(resolve("cuCtxCreate", 12050, 0, &st).second, "cuCtxCreate_v4");
  EXPECT_EQ(resolve("cuCtxCreate", 2000, 0, &st).second, "cuCtxCreate");
  EXPECT_EQ(
      resolve("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st).second,
      "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(resolve("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st).second,
            "cuMemcpyHtoD_v2");
  EXPECT_EQ(
      resolve("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st).second,
      "cuLaunchKernel_ptsz");
  EXPECT_EQ(resolve("cuGetProcAddress", 13000, 0, &st).second, "cuGetProcAddress_v2");
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  auto missing = resolve("cuNoSuchFunction", 13000, 0, &st);
  EXPECT_EQ(missing.first, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  auto too_old = resolve("cuLaunchKernelEx", 11000, 0, &st);
  EXPECT_EQ(too_old.first, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  void* fn = nullptr;
  EXPECT_EQ(CU(cuGetProcAddress)("cuMemFree", &fn, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(Lib(), "cuMemFree_v2"));
  EXPECT_EQ(CU(cuGetProcAddress)("cuMemFree", &fn, 12000, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CU(cuGetProcAddress)(nullptr, &fn, 12000, 0), CUDA_ERROR_INVALID_VALUE);
  // What a resolved pointer returns is the driver's own function.
  EXPECT_EQ(CU(cuGetProcAddress)("cuDeviceGetCount", &fn, 12000, 0), CUDA_SUCCESS);
  int count = 0;
  EXPECT_EQ(reinterpret_cast<decltype(&cuDeviceGetCount)>(fn)(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
}

TEST_F(DriverApiTest, UnsupportedCallsFailCleanlyAndErrorsHaveNames) {
  // Weak stubs: any arguments, CUDA_ERROR_NOT_SUPPORTED.
  using Any = int (*)(void*, void*, void*, void*, void*, void*);
  for (const char* name : {"cuTexRefCreate", "cuGraphicsMapResources", "cuIpcGetMemHandle",
                           "cuMemcpyHtoA_v2", "cuLaunchHostFunc", "cuMemAlloc"}) {
    auto fn = reinterpret_cast<Any>(Sym(name));
    ASSERT_NE(fn, nullptr);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): deliberately bogus pointer arguments
    EXPECT_EQ(fn(reinterpret_cast<void*>(1), nullptr, reinterpret_cast<void*>(-1), nullptr, nullptr,
                 nullptr),
              CUDA_ERROR_NOT_SUPPORTED)
        << name;
  }
  const void* table = reinterpret_cast<const void*>(1);
  CUuuid id{};
  EXPECT_EQ(CU(cuGetExportTable)(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
  const char* text = nullptr;
  EXPECT_EQ(CU(cuGetErrorName)(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(CU(cuGetErrorString)(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  EXPECT_EQ(CU(cuGetErrorString)(CUDA_ERROR_LAUNCH_FAILED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "launch failed");
  EXPECT_EQ(CU(cuGetErrorName)(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);
}

// Threads have context stacks of their own and may launch concurrently.
TEST_F(DriverApiTest, ThreadsLaunchConcurrentlyWithTheirOwnCurrentContext) {
  CUfunction spin = Spin();
  const uint64_t before = KernelsRun();
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto cur = reinterpret_cast<CUcontext>(1);
      if (CU(cuCtxGetCurrent)(&cur) != CUDA_SUCCESS || cur != nullptr) ++failures;  // new thread
      if (CU(cuCtxSetCurrent)(ctx_) != CUDA_SUCCESS) ++failures;
      CUstream s = nullptr;
      if (CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++failures;
      uint64_t ns = 2000;
      void* params[] = {&ns};
      for (int i = 0; i < 200; ++i) {
        if (CU(cuLaunchKernel)(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr) != CUDA_SUCCESS) {
          ++failures;
        }
      }
      if (CU(cuStreamSynchronize)(s) != CUDA_SUCCESS) ++failures;
      if (CU(cuStreamDestroy_v2)(s) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(KernelsRun() - before, 800u);
}

}  // namespace
}  // namespace gpuslice::sim
