#include "limiter/real/real_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "common/thread_annotations.h"

namespace gpuslice::limiter::real {
namespace {

using DlsymFn = void* (*)(void*, const char*);

// Loads one library into its table on first use. The tables are constant-
// initialised PODs: no constructor runs before main, none runs at exit.
template <typename Table>
class Loader {
 public:
  using FillFn = void (*)(Table*, void*);
  constexpr Loader(const char* soname, FillFn fill) : soname_(soname), fill_(fill) {}

  const Table& Get() {
    if (state_.load(std::memory_order_acquire) == kDone) return table_;
    // A library's constructor that calls back into an interposed name while
    // it is being loaded on this thread gets the empty table.
    if (loading_here_) return empty_;
    MutexLock lock(mu_);
    if (state_.load(std::memory_order_relaxed) != kDone) {
      loading_here_ = true;
      void* h = dlopen(soname_, RTLD_LAZY | RTLD_NOLOAD);
      if (h == nullptr) h = dlopen(soname_, RTLD_LAZY | RTLD_LOCAL);
      if (h != nullptr) {
        table_.loaded = true;
        fill_(&table_, h);
        handle_.store(h, std::memory_order_release);
      }
      loading_here_ = false;
      state_.store(kDone, std::memory_order_release);
    }
    return table_;
  }

  void* handle() const { return handle_.load(std::memory_order_acquire); }
  // True once the library was looked for (found or not).
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // The table once loaded from a library that was found, else nullptr.
  const Table* IfLoaded() const {
    return state_.load(std::memory_order_acquire) == kDone && table_.loaded ? &table_ : nullptr;
  }

 private:
  static constexpr int kDone = 1;
  const char* soname_;
  FillFn fill_;
  std::atomic<int> state_{0};
  std::atomic<void*> handle_{nullptr};
  Mutex mu_;  // serialises loading
  Table table_{};
  Table empty_{};
  static inline thread_local bool loading_here_ __attribute__((tls_model("initial-exec"))) = false;
};

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(RealDlsym(handle, name));
}

void FillCuda(CudaTable* t, void* h) {
#define GS_CUDA_HOOK(name, params, args) Resolve(h, #name, &t->name);
#include "limiter/shims/cuda_hooks.inc"
#undef GS_CUDA_HOOK
  Resolve(h, "cuDeviceGetCount", &t->cuDeviceGetCount);
  Resolve(h, "cuDeviceGetUuid_v2", &t->cuDeviceGetUuid_v2);
  Resolve(h, "cuCtxGetDevice", &t->cuCtxGetDevice);
  Resolve(h, "cuCtxGetCurrent", &t->cuCtxGetCurrent);
  Resolve(h, "cuStreamGetCtx", &t->cuStreamGetCtx);
  Resolve(h, "cuStreamGetDevice", &t->cuStreamGetDevice);
  Resolve(h, "cuStreamSynchronize", &t->cuStreamSynchronize);
  Resolve(h, "cuStreamIsCapturing", &t->cuStreamIsCapturing);
  Resolve(h, "cuStreamQuery", &t->cuStreamQuery);
  Resolve(h, "cuEventCreate", &t->cuEventCreate);
  Resolve(h, "cuEventRecord", &t->cuEventRecord);
  Resolve(h, "cuEventQuery", &t->cuEventQuery);
  Resolve(h, "cuEventElapsedTime", &t->cuEventElapsedTime);
  Resolve(h, "cuEventDestroy_v2", &t->cuEventDestroy_v2);
  Resolve(h, "cuArrayGetMemoryRequirements", &t->cuArrayGetMemoryRequirements);
  Resolve(h, "cuMemPoolGetAttribute", &t->cuMemPoolGetAttribute);
  Resolve(h, "cuDeviceGetMemPool", &t->cuDeviceGetMemPool);
  Resolve(h, "cuDeviceGetDefaultMemPool", &t->cuDeviceGetDefaultMemPool);
  Resolve(h, "cuDriverGetVersion", &t->cuDriverGetVersion);
  Resolve(h, "cuDeviceGetGraphMemAttribute", &t->cuDeviceGetGraphMemAttribute);
  Resolve(h, "cuGraphGetNodes", &t->cuGraphGetNodes);
  Resolve(h, "cuGraphNodeGetType", &t->cuGraphNodeGetType);
  Resolve(h, "cuGraphMemAllocNodeGetParams", &t->cuGraphMemAllocNodeGetParams);
  Resolve(h, "cuMipmappedArrayGetMemoryRequirements", &t->cuMipmappedArrayGetMemoryRequirements);
}

void FillNvml(NvmlTable* t, void* h) {
#define GS_NVML_HOOK(name, params, args) Resolve(h, #name, &t->name);
#include "limiter/shims/nvml_hooks.inc"
#undef GS_NVML_HOOK
  Resolve(h, "nvmlDeviceGetUUID", &t->nvmlDeviceGetUUID);
  Resolve(h, "nvmlDeviceGetCount_v2", &t->nvmlDeviceGetCount_v2);
  Resolve(h, "nvmlDeviceGetHandleByIndex_v2", &t->nvmlDeviceGetHandleByIndex_v2);
  Resolve(h, "nvmlInit_v2", &t->nvmlInit_v2);
  Resolve(h, "nvmlDeviceGetHandleByUUID", &t->nvmlDeviceGetHandleByUUID);
  Resolve(h, "nvmlDeviceGetSamples", &t->nvmlDeviceGetSamples);
}

Loader<CudaTable>& CudaLoader() {
  static constinit Loader<CudaTable> loader("libcuda.so.1", &FillCuda);
  return loader;
}
Loader<NvmlTable>& NvmlLoader() {
  static constinit Loader<NvmlTable> loader("libnvidia-ml.so.1", &FillNvml);
  return loader;
}

}  // namespace

const CudaTable& detail::CudaSlow() {
  const CudaTable& table = CudaLoader().Get();
  // Not while the library loads on this thread (Get answered the empty table).
  if (CudaLoader().done()) detail::loaded_cuda.store(&table, std::memory_order_release);
  return table;
}
const NvmlTable& Nvml() { return NvmlLoader().Get(); }
const CudaTable* CudaIfLoaded() { return CudaLoader().IfLoaded(); }
void* CudaHandle() { return CudaLoader().handle(); }
void* NvmlHandle() { return NvmlLoader().handle(); }

void* RealDlsym(void* handle, const char* name) {
  // dlvsym is not interposed; ask for glibc's dlsym by version (2.34 moved it
  // into libc; older glibc has only the 2.2.5 one).
  static std::atomic<DlsymFn> real{nullptr};
  DlsymFn fn = real.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (fn == nullptr) fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    real.store(fn, std::memory_order_release);
  }
  return fn != nullptr ? fn(handle, name) : nullptr;
}

}  // namespace gpuslice::limiter::real
