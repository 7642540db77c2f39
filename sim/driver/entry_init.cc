// Entry points: initialisation, versions, error strings, cuGetProcAddress.
// cuDriverGetVersion, cuGetErrorName/String and cuGetProcAddress work before
// cuInit, as on the real driver.
#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/log.h"
#include "cuda_abi/proc_address.h"
#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

// By the error's int value: callers may pass any int (AbiCode).
const char* ErrorName(int e) {
  switch (e) {
#define GS_CU_ERROR(name) \
  case name:              \
    return #name;
#include "sim/driver/error_names.inc"
#undef GS_CU_ERROR
    default:
      return nullptr;
  }
}

// The int a caller passed as a CUresult. Applications pass any int there (an
// unknown code must fail cleanly), and reading a value outside CUresult's
// range through the enum type is undefined (clang's -fsanitize=enum reports
// it), so its bytes are read as the int they are.
int AbiCode(const CUresult& error) {
  static_assert(sizeof(CUresult) == sizeof(int));
  int code = 0;
  std::memcpy(&code, &error, sizeof code);
  return code;
}

// A readable description: a fixed text for the common errors, else the
// name's words ("CUDA_ERROR_LAUNCH_FAILED" -> "launch failed"). The strings
// live as long as the process.
const char* ErrorString(int e) {
  switch (e) {
    case CUDA_SUCCESS:
      return "no error";
    case CUDA_ERROR_INVALID_VALUE:
      return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "initialization error";
    case CUDA_ERROR_NO_DEVICE:
      return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE:
      return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE:
      return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND:
      return "named symbol not found";
    case CUDA_ERROR_NOT_READY:
      return "device not ready";
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
      return "CUDA-capable device(s) is/are busy or unavailable";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "operation not supported";
    default:
      break;
  }
  static std::string* texts[1024] = {};  // by error value; CUresult values are < 1000
  const char* name = ErrorName(e);
  const int index = e;
  if (name == nullptr || index < 0 || index >= 1024) return nullptr;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (texts[index] == nullptr) {
    std::string words = name + strlen("CUDA_ERROR_");
    for (char& c : words) c = c == '_' ? ' ' : static_cast<char>(tolower(c));
    texts[index] = new std::string(std::move(words));
  }
  return texts[index]->c_str();
}

// This library's own handle: cuGetProcAddress looks names up here, never in
// the global scope, so that an interposer's wrappers are not handed back.
void* SelfHandle() {
  static void* handle = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&SelfHandle), &info) == 0 || info.dli_fname == nullptr) {
      return static_cast<void*>(nullptr);
    }
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return handle;
}

CUresult GetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const auto r = cuda_abi::ResolveProcAddress(symbol, version, flags);
  if (status != nullptr) *status = static_cast<CUdriverProcAddressQueryResult>(r.lookup);
  if (r.lookup != cuda_abi::ProcLookup::kFound) return CUDA_ERROR_NOT_FOUND;
  const std::string name(r.symbol);
  void* self = SelfHandle();
  *pfn = self != nullptr ? dlsym(self, name.c_str()) : nullptr;
  if (*pfn == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

GS_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  if (d.initialized.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard lock(d.mu);
  if (d.initialized.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  if (d.init_failed) return d.init_error;
  gpuslice::InitLogging(gpuslice::LogLevel::kWarn);
  auto options = gpuslice::sim::OptionsFromEnv();
  auto gpu = options.ok()
                 ? gpuslice::sim::SimGpu::Open(*options)
                 : gpuslice::StatusOr<std::unique_ptr<gpuslice::sim::SimGpu>>(options.status());
  if (!gpu.ok()) {
    // Fail closed and say why, once; every later call returns the same error.
    fprintf(stderr, "gpuslice simulated driver: cuInit failed: %s\n",
            gpu.status().message().c_str());
    d.init_failed = true;
    d.init_error = CUDA_ERROR_NOT_INITIALIZED;
    return d.init_error;
  }
  // The devices CUDA_VISIBLE_DEVICES names (every GPU, or a GPU in MIG mode
  // its MIG devices, when unset); none: no device, as the real driver says.
  d.visible = (*gpu)->WithState([](gpuslice::sim::SimState& s) {
    return gpuslice::sim::VisibleDevices(s, getenv("CUDA_VISIBLE_DEVICES"));
  });
  if (d.visible.empty()) {
    d.init_failed = true;
    d.init_error = CUDA_ERROR_NO_DEVICE;
    return d.init_error;
  }
  d.gpu = std::move(*gpu);
  d.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = ErrorName(AbiCode(error));
  return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = ErrorString(AbiCode(error));
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

// The runtime's private tables are not simulated.
GS_EXPORT CUresult cuGetExportTable(const void** table, const CUuuid*) {
  if (table != nullptr) *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
