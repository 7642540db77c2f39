// The simulated CUDA driver, libcuda.so.1 (DESIGN.md section 7): the entry
// points a driver-API program needs to initialise, enumerate devices, create
// contexts, allocate memory, load modules, launch kernels and synchronise, on
// top of SimGpu (sim/core). Exported names are the driver's own (cuMemAlloc_v2,
// cuLaunchKernel_ptsz, ...); every other exported name fails cleanly
// (unsupported.cc).
//
// Device memory is real host memory (mmap, MAP_NORESERVE) so that copies and
// memsets work; only its accounting is the simulator's.
//
// Thread-safe: driver-wide state is behind one mutex; the launch path takes
// it only to read the current context.
#include "cuda_abi/cuda_driver_api.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "cuda_abi/proc_address.h"
#include "sim/core/sim_gpu.h"

#define GS_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuslice::sim::driver {
namespace {

struct Context {
  ContextId id;
  int device;
  bool primary;
};

struct Function {
  std::string name;
};

struct Stream {
  Context* ctx;
};

struct Event {
  Context* ctx;
  int slot = -1;
  uint64_t seq = 0;  // 0: never recorded
};

struct Allocation {
  Context* ctx;
  uint64_t bytes;
};

// Driver-wide state; never destroyed (programs call the driver during exit).
struct Driver {
  std::mutex mu;
  std::unique_ptr<SimGpu> gpu;
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
  bool initialized = false;
  Context* primary[kMaxDevices] = {};
  int primary_refs[kMaxDevices] = {};
  std::map<uintptr_t, Allocation> allocations;
  std::map<std::string, std::unique_ptr<Function>> functions;
};

Driver& D() {
  static Driver* driver = new Driver;
  return *driver;
}

// The calling thread's context stack; the top is current.
thread_local std::vector<Context*> t_contexts;

Context* Current() { return t_contexts.empty() ? nullptr : t_contexts.back(); }

CUresult FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return CUDA_SUCCESS;
    case StatusCode::kResourceExhausted:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case StatusCode::kFailedPrecondition:
      return CUDA_ERROR_DEVICE_UNAVAILABLE;
    case StatusCode::kInvalidArgument:
      return CUDA_ERROR_INVALID_VALUE;
    case StatusCode::kNotFound:
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

CUresult Ready() { return D().initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult CheckDevice(CUdevice dev) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  return dev >= 0 && dev < D().gpu->device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The context work goes to for `stream` (null: the current context's).
Context* ContextOf(CUstream stream) {
  if (stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) {
    return reinterpret_cast<Stream*>(stream)->ctx;
  }
  return Current();
}

CUresult NewContext(CUdevice dev, bool primary, Context** out) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  auto id = D().gpu->CreateContext(dev);
  if (!id.ok()) {
    GS_LOG(kInfo, "sim-driver", "context on device %d: %s", dev,
           id.status().message().c_str());
    return FromStatus(id.status());
  }
  *out = new Context{*id, dev, primary};
  return CUDA_SUCCESS;
}

void DeleteContext(Context* ctx) {
  {
    std::lock_guard lock(D().mu);
    for (auto it = D().allocations.begin(); it != D().allocations.end();) {
      if (it->second.ctx != ctx) {
        ++it;
        continue;
      }
      munmap(reinterpret_cast<void*>(it->first), it->second.bytes);
      it = D().allocations.erase(it);
    }
  }
  (void)D().gpu->DestroyContext(ctx->id);  // frees the context's memory too
  std::erase(t_contexts, ctx);
  delete ctx;
}

CUresult CreateContext(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  if (CUresult rc = NewContext(dev, false, &ctx); rc != CUDA_SUCCESS) return rc;
  t_contexts.push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult Allocate(CUdeviceptr* dptr, uint64_t bytes) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (Status s = D().gpu->Allocate(ctx->id, bytes); !s.ok()) return FromStatus(s);
  const uint64_t rounded = D().gpu->RoundToGranularity(bytes);
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    D().gpu->Free(ctx->id, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lock(D().mu);
  D().allocations[reinterpret_cast<uintptr_t>(p)] = {ctx, rounded};
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult Free(CUdeviceptr dptr) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dptr == 0) return CUDA_SUCCESS;
  Allocation a;
  {
    std::lock_guard lock(D().mu);
    auto it = D().allocations.find(static_cast<uintptr_t>(dptr));
    if (it == D().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
    D().allocations.erase(it);
  }
  munmap(reinterpret_cast<void*>(dptr), a.bytes);
  D().gpu->Free(a.ctx->id, a.bytes);
  return CUDA_SUCCESS;
}

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, CUstream stream, void** params) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Context* ctx = ContextOf(stream);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t threads = uint64_t{bx} * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || threads == 0) return CUDA_ERROR_INVALID_VALUE;
  if (threads > D().gpu->device(ctx->device).max_threads_per_block) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto* fn = reinterpret_cast<const Function*>(f);
  uint64_t spin_ns = 0;
  if (params != nullptr && params[0] != nullptr) memcpy(&spin_ns, params[0], sizeof spin_ns);
  const int64_t duration = D().gpu->KernelDurationNs(
      ctx->device, fn->name, uint64_t{gx} * gy * gz, static_cast<uint32_t>(threads), spin_ns);
  auto seq = D().gpu->EnqueueKernel(ctx->id, duration);
  return seq.ok() ? CUDA_SUCCESS : FromStatus(seq.status());
}

CUresult SynchronizeContext(Context* ctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return FromStatus(D().gpu->Wait(ctx->id, D().gpu->LastSeq(ctx->id)));
}

CUresult CopyBytes(void* dst, const void* src, size_t bytes) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if ((dst == nullptr || src == nullptr) && bytes > 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > 0) memmove(dst, src, bytes);
  return CUDA_SUCCESS;
}

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

const char* ErrorName(CUresult e) {
  switch (e) {
#define GS_ERROR(name) \
  case name:           \
    return #name;
    GS_ERROR(CUDA_SUCCESS)
    GS_ERROR(CUDA_ERROR_INVALID_VALUE)
    GS_ERROR(CUDA_ERROR_OUT_OF_MEMORY)
    GS_ERROR(CUDA_ERROR_NOT_INITIALIZED)
    GS_ERROR(CUDA_ERROR_DEINITIALIZED)
    GS_ERROR(CUDA_ERROR_NO_DEVICE)
    GS_ERROR(CUDA_ERROR_INVALID_DEVICE)
    GS_ERROR(CUDA_ERROR_INVALID_IMAGE)
    GS_ERROR(CUDA_ERROR_INVALID_CONTEXT)
    GS_ERROR(CUDA_ERROR_INVALID_HANDLE)
    GS_ERROR(CUDA_ERROR_NOT_FOUND)
    GS_ERROR(CUDA_ERROR_NOT_READY)
    GS_ERROR(CUDA_ERROR_DEVICE_UNAVAILABLE)
    GS_ERROR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE)
    GS_ERROR(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    GS_ERROR(CUDA_ERROR_STUB_LIBRARY)
    GS_ERROR(CUDA_ERROR_NOT_SUPPORTED)
    GS_ERROR(CUDA_ERROR_UNKNOWN)
#undef GS_ERROR
    default:
      return nullptr;
  }
}

// This library's own handle, for cuGetProcAddress (dlsym in it, never in the
// global scope, so an interposer's names are not handed back to it).
void* SelfHandle() {
  static void* handle = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&SelfHandle), &info);
    return info.dli_fname != nullptr ? dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  }();
  return handle;
}

CUresult GetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto r = cuda_abi::ResolveProcAddress(symbol, version, flags);
  if (status != nullptr) *status = static_cast<CUdriverProcAddressQueryResult>(r.lookup);
  if (r.lookup != cuda_abi::ProcLookup::kFound) return CUDA_ERROR_NOT_FOUND;
  std::string name(r.symbol);
  *pfn = dlsym(SelfHandle(), name.c_str());
  if (*pfn == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim::driver;  // NOLINT: the C entry points below
using gpuslice::sim::SimGpu;

// ---- initialisation, version, errors ----------------------------------------

GS_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (d.initialized || d.init_result != CUDA_ERROR_NOT_INITIALIZED) return d.init_result;
  gpuslice::InitLogging(gpuslice::LogLevel::kWarn);
  auto options = gpuslice::sim::OptionsFromEnv();
  auto gpu = options.ok() ? SimGpu::Open(*options)
                          : gpuslice::StatusOr<std::unique_ptr<SimGpu>>(options.status());
  if (!gpu.ok()) {
    fprintf(stderr, "gpuslice simulated driver: %s\n", gpu.status().message().c_str());
    d.init_result = CUDA_ERROR_INVALID_VALUE;  // stays: every later cuInit says the same
    return d.init_result;
  }
  d.gpu = std::move(*gpu);
  d.initialized = true;
  d.init_result = CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = ErrorName(error);
  return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *str = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *str = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *str = "initialization error"; break;
    case CUDA_ERROR_INVALID_DEVICE: *str = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *str = "invalid device context"; break;
    case CUDA_ERROR_INVALID_HANDLE: *str = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *str = "named symbol not found"; break;
    case CUDA_ERROR_NOT_READY: *str = "device not ready"; break;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: *str = "CUDA-capable device(s) is/are busy or unavailable"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *str = "operation not supported"; break;
    default:
      *str = ErrorName(error) != nullptr ? "see the error name" : nullptr;
  }
  return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                    cuuint64_t flags) {
  return GetProcAddress(symbol, pfn, cudaVersion, flags, nullptr);
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return GetProcAddress(symbol, pfn, cudaVersion, flags, status);
}

// ---- devices ----------------------------------------------------------------

GS_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = D().gpu->device_count();
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = CheckDevice(ordinal); rc != CUDA_SUCCESS) return rc;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, static_cast<size_t>(len), "%s", D().gpu->device(dev).name);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" -> 16 bytes.
  const char* text = D().gpu->device(dev).uuid + 4;
  int n = 0;
  for (const char* p = text; *p != '\0' && n < 16; ++p) {
    if (*p == '-') continue;
    unsigned byte = 0;
    if (sscanf(p, "%2x", &byte) != 1) break;
    uuid->bytes[n++] = static_cast<char>(byte);
    ++p;
  }
  return n == 16 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

GS_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = D().gpu->device(dev).total_bytes;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const auto& info = D().gpu->device(dev);
  snprintf(id, static_cast<size_t>(len), "%04x:%02x:%02x.0", info.pci_domain, info.pci_bus,
           info.pci_device);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *major = static_cast<int>(D().gpu->device(dev).cc_major);
  *minor = static_cast<int>(D().gpu->device(dev).cc_minor);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& info = D().gpu->device(dev);
  const int i = [&]() -> int {
    switch (attrib) {
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return static_cast<int>(info.max_threads_per_block);
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
      case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
      case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return static_cast<int>(info.max_sm_clock_mhz) * 1000;
      case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return static_cast<int>(info.max_mem_clock_mhz) * 1000;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return static_cast<int>(info.memory_bus_width);
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return static_cast<int>(info.sm_count);
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return static_cast<int>(info.max_threads_per_sm);
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return static_cast<int>(info.max_blocks_per_sm);
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return static_cast<int>(info.cc_major);
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return static_cast<int>(info.cc_minor);
      case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return static_cast<int>(info.pci_bus);
      case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return static_cast<int>(info.pci_device);
      case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return static_cast<int>(info.pci_domain);
      case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 << 20;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: {
        return D().gpu->WithState([&](gpuslice::sim::SimState& s) {
          return static_cast<int>(s.devices[dev].compute_mode);
        });
      }
      case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
      case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
      default: return 0;
    }
  }();
  *value = i;
  return CUDA_SUCCESS;
}

// ---- contexts -------------------------------------------------------------------

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int, CUdevice dev) {
  return CreateContext(pctx, dev);
}
GS_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}
GS_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int,
                                  CUdevice dev) {
  return CreateContext(pctx, dev);
}
GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int, CUdevice dev) {
  return CreateContext(pctx, dev);
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  auto* ctx = reinterpret_cast<Context*>(c);
  if (ctx == nullptr || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  (void)SynchronizeContext(ctx);
  DeleteContext(ctx);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuCtxDestroy(CUcontext c) { return cuCtxDestroy_v2(c); }

GS_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!t_contexts.empty()) t_contexts.pop_back();
  if (c != nullptr) t_contexts.push_back(reinterpret_cast<Context*>(c));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_contexts.push_back(reinterpret_cast<Context*>(c));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (t_contexts.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(t_contexts.back());
  t_contexts.pop_back();
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSynchronize() { return SynchronizeContext(Current()); }

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (D().primary[dev] == nullptr) {
    if (CUresult rc = NewContext(dev, true, &D().primary[dev]); rc != CUDA_SUCCESS) return rc;
  }
  ++D().primary_refs[dev];
  *pctx = reinterpret_cast<CUcontext>(D().primary[dev]);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  Context* gone = nullptr;
  {
    std::lock_guard lock(D().mu);
    if (D().primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--D().primary_refs[dev] == 0) std::swap(gone, D().primary[dev]);
  }
  if (gone != nullptr) {
    (void)SynchronizeContext(gone);
    DeleteContext(gone);
  }
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  Context* gone = nullptr;
  {
    std::lock_guard lock(D().mu);
    D().primary_refs[dev] = 0;
    std::swap(gone, D().primary[dev]);
  }
  if (gone != nullptr) DeleteContext(gone);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

GS_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  *flags = 0;
  *active = D().primary[dev] != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---- memory -----------------------------------------------------------------------

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) { return Allocate(dptr, bytes); }
GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int) {
  return Allocate(dptr, bytes);
}
GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return Allocate(dptr, bytes);
}
GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return Allocate(dptr, bytes);
}
GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                      unsigned int element) {
  if (pitch == nullptr || element == 0 || element > 16 || width == 0 || height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pitch = (width + 511) / 512 * 512;
  return Allocate(dptr, uint64_t{*pitch} * height);
}
GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return Free(dptr); }
GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return Free(dptr); }
GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return Free(dptr); }

GS_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (free_bytes == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  uint64_t f = 0, t = 0;
  D().gpu->MemoryInfo(ctx->device, &f, &t);
  *free_bytes = f;
  *total = t;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pp = malloc(bytes);  // host memory: not counted against any device
  return *pp != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
GS_EXPORT CUresult cuMemFreeHost(void* p) {
  free(p);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyBytes(Ptr(dst), Ptr(src), n);
}
GS_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return CopyBytes(Ptr(dst), src, n);
}
GS_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return CopyBytes(dst, Ptr(src), n);
}
GS_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyBytes(Ptr(dst), Ptr(src), n);
}
GS_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream) {
  return CopyBytes(Ptr(dst), src, n);
}
GS_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream) {
  return CopyBytes(dst, Ptr(src), n);
}
GS_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dst == 0 && n > 0) return CUDA_ERROR_INVALID_VALUE;
  memset(Ptr(dst), value, n);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dst == 0 && n > 0) return CUDA_ERROR_INVALID_VALUE;
  std::fill_n(static_cast<unsigned int*>(Ptr(dst)), n, value);
  return CUDA_SUCCESS;
}

// ---- modules and launches -----------------------------------------------------------

GS_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  static int any_module;  // any image is accepted; functions are named on demand
  *module = reinterpret_cast<CUmodule>(&any_module);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  return path == nullptr ? CUDA_ERROR_INVALID_VALUE : cuModuleLoadData(module, path);
}
GS_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int,
                                      CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}
GS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return cuModuleLoadData(module, image);
}
GS_EXPORT CUresult cuModuleUnload(CUmodule module) {
  return module == nullptr ? CUDA_ERROR_INVALID_HANDLE : Ready();
}

GS_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (f == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  auto& fn = D().functions[name];
  if (fn == nullptr) fn = std::make_unique<Function>(Function{name});
  *f = reinterpret_cast<CUfunction>(fn.get());
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned, CUstream stream,
                                  void** params, void**) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params);
}
GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                       CUstream stream, void** params, void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned,
                                             CUstream stream, void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params);
}
GS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                  unsigned gz, unsigned bx, unsigned by,
                                                  unsigned bz, unsigned shared, CUstream stream,
                                                  void** params) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params);
}
GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                    void**) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->hStream, params);
}
GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                         void** params, void** extra) {
  return cuLaunchKernelEx(config, f, params, extra);
}

// ---- streams and events -------------------------------------------------------------

GS_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = reinterpret_cast<CUstream>(new Stream{Current()});
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int) {
  return cuStreamCreate(stream, flags);
}
GS_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Stream*>(stream);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  return SynchronizeContext(ContextOf(stream));
}
GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) { return cuStreamSynchronize(stream); }
GS_EXPORT CUresult cuStreamQuery(CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Context* ctx = ContextOf(stream);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return D().gpu->IsComplete(ctx->id, D().gpu->LastSeq(ctx->id)) ? CUDA_SUCCESS
                                                                  : CUDA_ERROR_NOT_READY;
}

GS_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto slot = D().gpu->AllocateEventSlot(ctx->id);
  if (!slot.ok()) return FromStatus(slot.status());
  *event = reinterpret_cast<CUevent>(new Event{ctx, *slot, 0});
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuEventRecord(CUevent e, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  auto* event = reinterpret_cast<Event*>(e);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ContextOf(stream) != event->ctx) return CUDA_ERROR_INVALID_CONTEXT;
  auto seq = D().gpu->EnqueueEventRecord(event->ctx->id, event->slot);
  if (!seq.ok()) return FromStatus(seq.status());
  event->seq = *seq;
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuEventQuery(CUevent e) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  auto* event = reinterpret_cast<Event*>(e);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return event->seq == 0 || D().gpu->IsComplete(event->ctx->id, event->seq) ? CUDA_SUCCESS
                                                                           : CUDA_ERROR_NOT_READY;
}
GS_EXPORT CUresult cuEventSynchronize(CUevent e) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  auto* event = reinterpret_cast<Event*>(e);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (event->seq == 0) return CUDA_SUCCESS;
  return FromStatus(D().gpu->Wait(event->ctx->id, event->seq));
}
GS_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (ms == nullptr || a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t ta = 0, tb = 0;
  if (a->seq == 0 || b->seq == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!D().gpu->EventTime(a->ctx->id, a->slot, a->seq, &ta) ||
      !D().gpu->EventTime(b->ctx->id, b->slot, b->seq, &tb)) {
    return CUDA_ERROR_NOT_READY;
  }
  *ms = static_cast<float>(static_cast<double>(tb - ta) / 1e6);
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}
GS_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  auto* event = reinterpret_cast<Event*>(e);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (Ready() == CUDA_SUCCESS) D().gpu->FreeEventSlot(event->ctx->id, event->slot);
  delete event;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGetExportTable(const void**, const CUuuid*) { return CUDA_ERROR_NOT_SUPPORTED; }
