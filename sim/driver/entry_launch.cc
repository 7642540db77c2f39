// Entry points: modules and libraries (any image is accepted, any function
// name resolves, and the name is kept so that `gpuslice_sim_spin` is
// recognised), kernel launches in every form, graphs and stream capture.
//
// The launch path is the hot one (a benchmark holds cuLaunchKernel under
// 300 ns): handle lookups are lock-free, nothing is allocated, and the only
// lock taken is the simulation's own (SimGpu::EnqueueKernel).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

constexpr std::string_view kSpinKernel = "gpuslice_sim_spin";
constexpr size_t kMaxNameLength = 4096;
constexpr uint64_t kGlobalBytes = 4096;  // every module global is one page

// The spin kernel's duration: its first parameter, a uint64 of nanoseconds,
// from kernelParams or from a CU_LAUNCH_PARAM_BUFFER_POINTER buffer.
uint64_t SpinNs(const Function& fn, void** params, void** extra) {
  if (!fn.spin) return 0;
  uint64_t ns = 0;
  if (params != nullptr) {
    if (params[0] != nullptr) memcpy(&ns, params[0], sizeof ns);
    return ns;
  }
  if (extra == nullptr) return 0;
  const void* buffer = nullptr;
  size_t size = 0;
  for (int i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr) {
      size = *static_cast<const size_t*>(extra[i + 1]);
    }
  }
  if (buffer != nullptr && size >= sizeof ns) memcpy(&ns, buffer, sizeof ns);
  return ns;
}

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, CUstream stream, void** params, void** extra, bool cooperative) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(f));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  const uint32_t grid[3] = {gx, gy, gz};
  const uint32_t block[3] = {bx, by, bz};
  if (cooperative) {
    // Every block must be resident at once.
    const DeviceInfo& info = GpuInfo(ctx->device);
    const uint64_t threads = std::max<uint64_t>(uint64_t{bx} * by * bz, 1);
    const uint64_t per_sm =
        std::min<uint64_t>(info.max_threads_per_sm / threads, info.max_blocks_per_sm);
    if (uint64_t{gx} * gy * gz > per_sm * Visible(ctx->device).sm_count) {
      return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
  }
  return EnqueueKernel(*ctx, st, *fn, Raw(f), grid, block, SpinNs(*fn, params, extra));
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = config->attrs[i].value.cooperative != 0;
    }
  }
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->hStream, params, extra, cooperative);
}

// ---- modules --------------------------------------------------------------------------------

CUresult LoadModule(CUmodule* module, const void* image, bool library) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module m;
  m.library = library;
  if (!library) {
    CUresult rc = CUDA_SUCCESS;
    if (CurrentContext(&rc) == nullptr) return rc;
    m.ctx = CurrentHandle();
  }
  const uint64_t h = D().modules.Add(std::move(m));
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *module = AsHandle<CUmodule>(h);
  return CUDA_SUCCESS;
}

CUresult LoadModuleFile(CUmodule* module, const char* path, bool library) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (path == nullptr || module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
  close(fd);
  return LoadModule(module, path, library);
}

CUresult UnloadModule(uint64_t handle) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Module m;
  if (!D().modules.Remove(handle, &m)) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& [name, fn] : m.functions) D().functions.Remove(fn);
  std::unique_lock lock(D().ranges_mu);
  for (const auto& [name, ptr] : m.globals) {
    auto it = D().ranges.find(static_cast<uintptr_t>(ptr));
    if (it == D().ranges.end()) continue;  // its context went first
    munmap(HostPtr(ptr), it->second.mapped);
    D().ranges.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult GetFunction(uint64_t module, const char* name, uint64_t* out) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t length = strnlen(name, kMaxNameLength + 1);
  if (length == 0 || length > kMaxNameLength) return CUDA_ERROR_INVALID_VALUE;
  Module* m = D().modules.Get(module);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(D().mu);
  uint64_t& fn = m->functions[std::string(name, length)];
  if (D().functions.Get(fn) == nullptr) {
    Function f;
    f.name.assign(name, length);
    f.spin = f.name == kSpinKernel;
    f.module = module;
    fn = D().functions.Add(std::move(f));
    if (fn == 0) {
      m->functions.erase(std::string(name, length));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  *out = fn;
  return CUDA_SUCCESS;
}

CUresult GetGlobal(uint64_t module, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (name == nullptr || strnlen(name, kMaxNameLength + 1) > kMaxNameLength) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Module* m = D().modules.Get(module);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(D().mu);
  CUdeviceptr& ptr = m->globals[name];
  if (ptr == 0) {
    void* p =
        mmap(nullptr, kGlobalBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      m->globals.erase(name);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    Range r;
    r.bytes = r.mapped = kGlobalBytes;
    r.kind = RangeKind::kGlobal;
    r.ctx = m->ctx;
    std::unique_lock rl(D().ranges_mu);
    D().ranges[reinterpret_cast<uintptr_t>(p)] = r;
    ptr = reinterpret_cast<CUdeviceptr>(p);
  }
  if (dptr != nullptr) *dptr = ptr;
  if (bytes != nullptr) *bytes = kGlobalBytes;
  return CUDA_SUCCESS;
}

CUresult FunctionAttribute(const Function& fn, CUfunction_attribute attrib, int dev, int* out) {
  const DeviceInfo& info = GpuInfo(dev);
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *out = static_cast<int>(info.max_threads_per_block);
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *out = 0;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *out = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *out = static_cast<int>(info.cc_major * 10 + info.cc_minor);
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *out = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out = fn.max_dynamic_shared;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *out = -1;
      break;
    default:
      if (attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *out = 0;
  }
  return CUDA_SUCCESS;
}

int CurrentDeviceOr0() {
  CUresult rc = CUDA_SUCCESS;
  Context* ctx = CurrentContext(&rc);
  return ctx != nullptr ? ctx->device : 0;
}

// ---- graphs -----------------------------------------------------------------------------------

uint64_t NodeHandle(uint64_t graph, uint32_t index) { return GraphNodeHandle(graph, index); }

CUresult AddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                       CUfunction func, const unsigned grid[3], const unsigned block[3],
                       void** params, void** extra) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (node == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Function* fn = D().functions.Get(Raw(func));
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelNode k;
  k.function = Raw(func);
  std::copy_n(grid, 3, k.grid);
  std::copy_n(block, 3, k.block);
  if (k.grid[0] == 0 || k.grid[1] == 0 || k.grid[2] == 0 ||
      uint64_t{k.block[0]} * k.block[1] * k.block[2] == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  k.spin_ns = SpinNs(*fn, params, extra);
  std::lock_guard lock(D().mu);
  g->kernels.push_back(k);
  g->types.push_back(CU_GRAPH_NODE_TYPE_KERNEL);
  *node = AsHandle<CUgraphNode>(NodeHandle(Raw(graph), g->nodes++));
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* exec, CUgraph graph, unsigned long long flags = 0) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphExec e;
  {
    std::lock_guard lock(D().mu);
    e.kernels = g->kernels;
    // Its memory nodes: no physical memory yet (mapped at its first launch).
    e.allocs = g->allocs;
  }
  for (const GraphAlloc& a : e.allocs) {
    e.need += a.bytes;
    if (e.device < 0) e.device = a.device;
  }
  e.auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  const uint64_t h = D().graph_execs.Add(std::move(e));
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *exec = AsHandle<CUgraphExec>(h);
  return CUDA_SUCCESS;
}

CUresult LaunchGraph(CUgraphExec exec, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const GraphExec* e = D().graph_execs.Get(Raw(exec));
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  for (const KernelNode& k : e->kernels) {
    if (D().functions.Get(k.function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  }
  // Its memory nodes' physical memory first (graph_memory.cc).
  if (CUresult rc = MapGraphExec(Raw(exec), st != nullptr ? st->ctx : CurrentHandle(), true);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  for (const KernelNode& k : e->kernels) {
    const Function* fn = D().functions.Get(k.function);
    if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // unloaded meanwhile
    if (CUresult rc = EnqueueKernel(*ctx, st, *fn, k.function, k.grid, k.block, k.spin_ns);
        rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

// Maps the exec's graph memory on `stream`'s context (cuGraphUpload).
CUresult UploadGraph(CUgraphExec exec, CUstream stream) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().graph_execs.Get(Raw(exec)) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  // An upload maps the graph's memory as its first launch would.
  return MapGraphExec(Raw(exec), st != nullptr ? st->ctx : CurrentHandle(), false);
}

// ---- stream capture ----------------------------------------------------------------------------

CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (st == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // default streams
  if (st->capture_graph.load() != 0) return CUDA_ERROR_ILLEGAL_STATE;
  const uint64_t g = D().graphs.Add(Graph{});
  if (g == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  st->capture_id = D().next_unique_id.fetch_add(1);
  st->capture_graph.store(g, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream stream, CUgraph* graph) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  if (st == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  const uint64_t g = st->capture_graph.exchange(0);
  if (g == 0) return CUDA_ERROR_ILLEGAL_STATE;
  *graph = AsHandle<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult CaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                     CUgraph* graph) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  Stream* st = nullptr;
  if (CUresult rc = ResolveStream(stream, &ctx, &st); rc != CUDA_SUCCESS) return rc;
  const uint64_t g = st != nullptr ? st->capture_graph.load() : 0;
  *status = g != 0 ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id != nullptr && g != 0) *id = st->capture_id;
  if (graph != nullptr) *graph = AsHandle<CUgraph>(g);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

// ---- modules ------------------------------------------------------------------------------

GS_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule(module, image, false);
}
GS_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  return LoadModuleFile(module, path, false);
}
GS_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n,
                                      CUjit_option* options, void** values) {
  if (n > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return LoadModule(module, image, false);
}
GS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return LoadModule(module, image, false);
}
GS_EXPORT CUresult cuModuleUnload(CUmodule module) { return UnloadModule(Raw(module)); }

GS_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (f == nullptr) return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  uint64_t h = 0;
  CUresult rc = GetFunction(Raw(module), name, &h);
  if (rc == CUDA_SUCCESS) *f = AsHandle<CUfunction>(h);
  return rc;
}

GS_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule module,
                                        const char* name) {
  return GetGlobal(Raw(module), name, dptr, bytes);
}

GS_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

// ---- libraries (context-independent modules) ----------------------------------------------------

GS_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                                     unsigned int, CUlibraryOption*, void**, unsigned int) {
  return LoadModule(reinterpret_cast<CUmodule*>(library), code, true);
}
GS_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option*,
                                         void**, unsigned int, CUlibraryOption*, void**,
                                         unsigned int) {
  return LoadModuleFile(reinterpret_cast<CUmodule*>(library), path, true);
}
GS_EXPORT CUresult cuLibraryUnload(CUlibrary library) { return UnloadModule(Raw(library)); }

GS_EXPORT CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  if (kernel == nullptr) return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  uint64_t h = 0;
  CUresult rc = GetFunction(Raw(library), name, &h);
  if (rc == CUDA_SUCCESS) *kernel = AsHandle<CUkernel>(h);
  return rc;
}

GS_EXPORT CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (D().modules.Get(Raw(library)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *module = AsHandle<CUmodule>(Raw(library));  // a library is its own module
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                      const char* name) {
  return GetGlobal(Raw(library), name, dptr, bytes);
}

// A CUkernel is a CUfunction in this driver (the real one allows the cast too).
GS_EXPORT CUresult cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (D().functions.Get(Raw(kernel)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *f = AsHandle<CUfunction>(Raw(kernel));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuKernelGetLibrary(CUlibrary* library, CUkernel kernel) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(kernel));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *library = AsHandle<CUlibrary>(fn->module);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuFuncGetName(const char** name, CUfunction f) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(f));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}
GS_EXPORT CUresult cuKernelGetName(const char** name, CUkernel k) {
  return cuFuncGetName(name, AsHandle<CUfunction>(Raw(k)));
}

GS_EXPORT CUresult cuFuncGetModule(CUmodule* module, CUfunction f) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(f));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = AsHandle<CUmodule>(fn->module);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().functions.Get(Raw(f)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuFuncLoad(CUfunction f) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  return D().functions.Get(Raw(f)) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

GS_EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction f) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(f));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return FunctionAttribute(*fn, attrib, CurrentDeviceOr0(), value);
}

GS_EXPORT CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attrib, CUkernel k,
                                        CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  const Function* fn = D().functions.Get(Raw(k));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return FunctionAttribute(*fn, attrib, dev, value);
}

GS_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  Function* fn = D().functions.Get(Raw(f));
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > 232448) return CUDA_ERROR_INVALID_VALUE;
      fn->max_dynamic_shared = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

GS_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel k,
                                        CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  return cuFuncSetAttribute(AsHandle<CUfunction>(Raw(k)), attrib, value);
}

GS_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (D().functions.Get(Raw(f)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return config >= CU_FUNC_CACHE_PREFER_NONE && config <= CU_FUNC_CACHE_PREFER_EQUAL
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

// ---- launches -----------------------------------------------------------------------------------

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned, CUstream stream,
                                  void** params, void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params, extra, false);
}
GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned,
                                       CUstream stream, void** params, void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params, extra, false);
}
GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned,
                                             CUstream stream, void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params, nullptr, true);
}
GS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                  unsigned gz, unsigned bx, unsigned by,
                                                  unsigned bz, unsigned, CUstream stream,
                                                  void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, stream, params, nullptr, true);
}
GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                    void** extra) {
  return LaunchEx(config, f, params, extra);
}
GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                         void** extra) {
  return LaunchEx(config, f, params, extra);
}

// ---- graphs
// ---------------------------------------------------------------------------------------

GS_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t h = D().graphs.Add(Graph{});
  if (h == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *graph = AsHandle<CUgraph>(h);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  return D().graphs.Remove(Raw(graph)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph,
                                           const CUgraphNode* deps, size_t ndeps,
                                           const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
  return AddKernelNode(node, graph, deps, ndeps, f, grid, block, p->kernelParams, p->extra);
}

GS_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                        size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return Ready() != CUDA_SUCCESS ? Ready() : CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return AddKernelNode(node, graph, deps, ndeps, p->func, grid, block, p->kernelParams, p->extra);
}

GS_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                       size_t ndeps) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (node == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  g->types.push_back(CU_GRAPH_NODE_TYPE_EMPTY);
  *node = AsHandle<CUgraphNode>(NodeHandle(Raw(graph), g->nodes++));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                               unsigned long long flags) {
  return Instantiate(exec, graph, flags);
}

GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                         char* log, size_t log_size) {
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return Instantiate(exec, graph);
}
GS_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                      char* log, size_t log_size) {
  return cuGraphInstantiate_v2(exec, graph, error_node, log, log_size);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  CUresult rc = Instantiate(exec, graph, params != nullptr ? params->flags : 0);
  if (rc == CUDA_SUCCESS && params != nullptr &&
      (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) {
    // Uploaded as part of instantiation: its memory is mapped now, as by
    // cuGraphUpload on the upload stream; when that fails the exec is not made.
    rc = UploadGraph(*exec, params->hUploadStream);
    if (rc != CUDA_SUCCESS) {
      GraphExec gone;
      D().graph_execs.Remove(Raw(*exec), &gone);
      *exec = nullptr;
    }
  }
  if (params != nullptr) {
    params->result_out =
        rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    params->hErrNode_out = nullptr;
  }
  return rc;
}
GS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(exec, graph, params);
}

GS_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return LaunchGraph(exec, stream);
}
GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return LaunchGraph(exec, stream);
}

GS_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  return UploadGraph(exec, stream);
}
GS_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return UploadGraph(exec, stream);
}

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  GraphExec gone;
  if (!D().graph_execs.Remove(Raw(exec), &gone)) return CUDA_ERROR_INVALID_VALUE;
  UnmapGraphExec(gone);  // its memory stays in the graph pool until a trim
  return CUDA_SUCCESS;
}

// ---- stream capture -----------------------------------------------------------------------------

GS_EXPORT CUresult cuStreamBeginCapture(CUstream stream) {
  return BeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
GS_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  return BeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
GS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  return BeginCapture(stream, mode);
}
GS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return BeginCapture(stream, mode);
}
GS_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return EndCapture(stream, graph);
}
GS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  return EndCapture(stream, graph);
}
GS_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return CaptureInfo(stream, status, nullptr, nullptr);
}
GS_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return CaptureInfo(stream, status, nullptr, nullptr);
}
GS_EXPORT CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status,
                                          cuuint64_t* id) {
  return CaptureInfo(stream, status, id, nullptr);
}
GS_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream stream, CUstreamCaptureStatus* status,
                                               cuuint64_t* id) {
  return CaptureInfo(stream, status, id, nullptr);
}
GS_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status,
                                             cuuint64_t* id, CUgraph* graph,
                                             const CUgraphNode** deps, size_t* ndeps) {
  if (deps != nullptr) *deps = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return CaptureInfo(stream, status, id, graph);
}
GS_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream stream, CUstreamCaptureStatus* status,
                                                  cuuint64_t* id, CUgraph* graph,
                                                  const CUgraphNode** deps, size_t* ndeps) {
  return cuStreamGetCaptureInfo_v2(stream, status, id, graph, deps, ndeps);
}
