// The simulated libnvidia-ml.so.1: NVML entry points over the shared
// simulator state (sim/core). Every query advances the simulation to now
// (SimGpu::WithState) and answers from the state; nvml_model.h says how the
// derived quantities are computed.
//
// Contracts kept for every entry point:
//  - nothing throws across the C boundary; an internal failure is
//    NVML_ERROR_UNKNOWN;
//  - before nvmlInit (or after the last nvmlShutdown) every call that needs the
//    device state returns NVML_ERROR_UNINITIALIZED; nvmlErrorString and
//    nvmlSystemGetCudaDriverVersion[_v2] work at any time;
//  - a handle not issued by this library, or a NULL out-pointer, is
//    NVML_ERROR_INVALID_ARGUMENT;
//  - setters need root: geteuid() == 0 and GPUSLICE_SIM_AS_USER is not "1"
//    (tests set it to exercise NVML_ERROR_NO_PERMISSION); otherwise
//    NVML_ERROR_NO_PERMISSION. Arguments are validated first, so an
//    out-of-range value is NVML_ERROR_INVALID_ARGUMENT for anyone;
//  - the library is an observer of the simulation (OpenOptions::observer): it
//    never registers the calling process, so nvidia-smi or a monitoring daemon
//    does not show up as a GPU process, and it accepts a state made from any
//    config;
//  - setters write the shared state, so every process of the simulation (and
//    the simulated driver, e.g. for EXCLUSIVE_PROCESS) sees them at once.
//
// Thread-safety: init/shutdown take the library lock exclusively, every other
// call shares it; the simulator state has its own process-shared lock.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/log.h"
#include "common/process.h"
#include "nvml_abi/nvml.h"
#include "sim/core/memory_limits.h"
#include "sim/core/mig_state.h"
#include "sim/core/nvml_faults.h"
#include "sim/core/sim_gpu.h"
#include "sim/core/xid_log.h"
#include "sim/nvml/nvml_fill.h"
#include "sim/nvml/nvml_model.h"

#define GS_NVML_API extern "C" __attribute__((visibility("default")))

// The object an nvmlDevice_t points to: one per simulated device, owned by
// the library for its whole life, so handles stay valid across shutdown/init.
struct nvmlDevice_st {
  int index;
};

// MIG handles: one object per GPU-instance and compute-instance record of
// every device (sim/core/state.h), and one MIG device handle per compute
// instance record; a handle is valid while its record is in use.
struct nvmlGpuInstance_st {
  int device;
  int slot;  // in DeviceState::gpu_instances
};
struct nvmlComputeInstance_st {
  int device;
  int gi;    // in DeviceState::gpu_instances
  int slot;  // in that record's compute
};

// An event set (nvmlEventSetCreate): per registered device, the event types
// and the offset in the XID control file (sim/core/xid_log.h) from which its
// XIDs are delivered; `next` is where the set has read the file up to.
struct nvmlEventSet_st {
  std::mutex mu;
  unsigned long long types[gpuslice::sim::kMaxDevices] = {};  // guarded by mu
  uint64_t from[gpuslice::sim::kMaxDevices] = {};             // guarded by mu
  uint64_t next = 0;                                          // guarded by mu
  std::deque<gpuslice::sim::XidRecord> ready;                 // guarded by mu
};

namespace gpuslice::sim::nvml {
namespace {

// The node's driver version comes from the config (SimParams::driver_version);
// NVML's own version is "<CUDA major>.<driver version>", and r615 is CUDA 13.4.
int CudaDriverVersionFor(const char* driver_version) {
  return HasCgroupMemoryLimits(driver_version) ? 13040 : 13000;
}
// The original nvmlPciInfo_t: the first 36 bytes of today's layout, then 16
// reserved bytes (zero) where busId now begins.
constexpr size_t kPciInfoV1Size = 52;
constexpr size_t kPciInfoV1Filled = 36;

// The documented ABI sizes (LP64); the limiter relies on them too.
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(sizeof(nvmlProcessDetail_v1_t) == 32);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(sizeof(nvmlBAR1Memory_t) == 24);
static_assert(nvmlMemory_v2 == (40u | (2u << 24)));
static_assert(offsetof(nvmlPciInfo_t, busId) == kPciInfoV1Filled);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventData) == 16);

struct Library {
  std::shared_mutex mu;
  int refcount = 0;             // guarded by mu
  std::unique_ptr<SimGpu> gpu;  // guarded by mu; set iff refcount > 0
  // guarded by mu; set with gpu: the faults to inject (docs/sim-nvml.md "NVML faults")
  std::unique_ptr<NvmlFaultInjector> faults;
  nvmlDevice_st devices[kMaxDevices];
  nvmlGpuInstance_st gpu_instances[kMaxDevices][kMaxGpuInstances];
  nvmlComputeInstance_st compute_instances[kMaxDevices][kMaxGpuInstances][kMaxComputeInstances];
  nvmlDevice_st mig_devices[kMaxDevices][kMaxGpuInstances][kMaxComputeInstances];
  std::mutex sets_mu;
  std::set<nvmlEventSet_t> sets;  // guarded by sets_mu: the live event sets

  Library() {
    for (int i = 0; i < kMaxDevices; ++i) {
      devices[i].index = i;
      for (int g = 0; g < kMaxGpuInstances; ++g) {
        gpu_instances[i][g] = {i, g};
        for (int c = 0; c < kMaxComputeInstances; ++c) {
          compute_instances[i][g][c] = {i, g, c};
          mig_devices[i][g][c].index = -1;  // not a GPU: DeviceIndex() refuses it
        }
      }
    }
  }
};

// Never destroyed: entry points may run during process exit. The library is
// linked -z nodelete, so a dlclose() leaves this reachable (no leak).
Library& Lib() {
  static auto* lib = new Library();
  return *lib;
}

// The device index a handle names, or -1 if it is not one of ours (compared
// as integers: an arbitrary pointer must not be dereferenced).
int DeviceIndex(nvmlDevice_t device, uint32_t device_count) {
  const auto p = reinterpret_cast<uintptr_t>(device);
  const auto base = reinterpret_cast<uintptr_t>(&Lib().devices[0]);
  if (p < base) return -1;
  const uintptr_t offset = p - base;
  if (offset % sizeof(nvmlDevice_st) != 0) return -1;
  const uintptr_t index = offset / sizeof(nvmlDevice_st);
  return index < device_count ? static_cast<int>(index) : -1;
}

bool CallerIsRoot() {
  const char* as_user = getenv("GPUSLICE_SIM_AS_USER");
  if (as_user != nullptr && strcmp(as_user, "1") == 0) return false;
  return geteuid() == 0;
}

// Runs f(SimState&) with the simulation advanced to now.
template <typename F>
nvmlReturn_t WithSim(F&& f) {
  try {
    Library& lib = Lib();
    std::shared_lock lock(lib.mu);
    if (lib.gpu == nullptr) return NVML_ERROR_UNINITIALIZED;
    return lib.gpu->WithState([&](SimState& s) -> nvmlReturn_t { return f(s); });
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

// Runs f(SimState&, DeviceState&, int index) for a valid handle, unless a
// fault rule (sim/core/nvml_faults.h) fails the call of entry point `fn` on
// that device first. `fn` defaults to the calling function's name, so an
// entry point that calls a helper is known by its own name: every helper
// below that reaches WithDevice takes `fn` the same way and passes it on.
template <typename F>
nvmlReturn_t WithDevice(nvmlDevice_t device, F&& f, const char* fn = __builtin_FUNCTION()) {
  return WithSim([&](SimState& s) -> nvmlReturn_t {
    const int index = DeviceIndex(device, s.device_count);
    if (index < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (Lib().faults != nullptr) {  // the library lock is held (WithSim)
      if (const int error = Lib().faults->Check(fn, index); error != NVML_SUCCESS) {
        return static_cast<nvmlReturn_t>(error);
      }
    }
    return f(s, s.devices[index], index);
  });
}

// WithDevice for setters: valid(DeviceState&) checks the arguments, then the
// caller's privilege is checked, then set(DeviceState&) applies the change.
template <typename Valid, typename Set>
nvmlReturn_t SetOnDevice(nvmlDevice_t device, Valid&& valid, Set&& set,
                         const char* fn = __builtin_FUNCTION()) {
  return WithDevice(
      device,
      [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
        if (!valid(static_cast<const DeviceState&>(d))) return NVML_ERROR_INVALID_ARGUMENT;
        if (!CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
        set(d);
        return NVML_SUCCESS;
      },
      fn);
}

// Copies a NUL-terminated string into a caller buffer of `length` bytes.
nvmlReturn_t CopyString(const char* src, char* dst, unsigned int length) {
  if (dst == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const size_t n = strlen(src);
  if (n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(dst, src, n + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Init(unsigned int /*flags: no GPU-less or no-attach mode in the sim*/) {
  try {
    Library& lib = Lib();
    std::unique_lock lock(lib.mu);
    if (lib.refcount > 0) {
      ++lib.refcount;
      return NVML_SUCCESS;
    }
    InitLogging(LogLevel::kError);
    auto options = OptionsFromEnv();
    if (!options.ok()) {
      GS_LOG(kError, "sim-nvml", "%s", options.status().ToString().c_str());
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    options->observer = true;
    auto gpu = SimGpu::Open(*options);
    if (!gpu.ok()) {
      GS_LOG(kError, "sim-nvml", "%s", gpu.status().ToString().c_str());
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    lib.gpu = std::move(gpu).value();
    lib.faults = std::make_unique<NvmlFaultInjector>(lib.gpu->path());
    lib.refcount = 1;
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t Shutdown() {
  try {
    Library& lib = Lib();
    std::unique_lock lock(lib.mu);
    if (lib.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (--lib.refcount == 0) {
      lib.gpu.reset();
      lib.faults.reset();
    }
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t DeviceCount(unsigned int* count) {
  if (count == nullptr) return WithSim([](SimState&) { return NVML_ERROR_INVALID_ARGUMENT; });
  return WithSim([&](SimState& s) {
    *count = s.device_count;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t HandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return WithSim([&](SimState& s) {
    if (device == nullptr || index >= s.device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &Lib().devices[index];
    return NVML_SUCCESS;
  });
}

// Finds the device for which match(info) holds.
template <typename Match>
nvmlReturn_t HandleWhere(const char* key, nvmlDevice_t* device, Match&& match) {
  return WithSim([&](SimState& s) {
    if (key == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < s.device_count; ++i) {
      if (match(s.devices[i].info)) {
        *device = &Lib().devices[i];
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

// Parses "domain:bus:device.function" or "bus:device.function" (hex).
bool ParsePciBusId(const char* id, unsigned* domain, unsigned* bus, unsigned* dev) {
  unsigned fn = 0;
  char tail = 0;
  if (sscanf(id, "%x:%x:%x.%x%c", domain, bus, dev, &fn, &tail) == 4) return true;
  *domain = 0;
  return sscanf(id, "%x:%x.%x%c", bus, dev, &fn, &tail) == 3;
}

nvmlReturn_t HandleByPciBusId(const char* id, nvmlDevice_t* device) {
  unsigned domain = 0, bus = 0, dev = 0;
  if (id != nullptr && !ParsePciBusId(id, &domain, &bus, &dev)) {
    return WithSim([](SimState&) { return NVML_ERROR_INVALID_ARGUMENT; });
  }
  return HandleWhere(id, device, [&](const DeviceInfo& info) {
    return info.pci_domain == domain && info.pci_bus == bus && info.pci_device == dev;
  });
}

nvmlPciInfo_t PciInfoOf(const DeviceInfo& info) {
  nvmlPciInfo_t pci;
  memset(&pci, 0, sizeof pci);
  snprintf(pci.busIdLegacy, sizeof pci.busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
           info.pci_domain & 0xFFFFu, info.pci_bus, info.pci_device);
  pci.domain = info.pci_domain;
  pci.bus = info.pci_bus;
  pci.device = info.pci_device;
  pci.pciDeviceId = info.pci_device_id;
  pci.pciSubSystemId = info.pci_subsystem_id;
  snprintf(pci.busId, sizeof pci.busId, "%s", info.pci_bus_id);
  return pci;
}

// Copies `bytes` bytes of the device's PCI info (the whole struct, or the
// 52-byte original layout for the plain entry point).
nvmlReturn_t PciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci, size_t bytes,
                     const char* fn = __builtin_FUNCTION()) {
  return WithDevice(
      device,
      [&](SimState&, DeviceState& d, int) {
        if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        nvmlPciInfo_t full = PciInfoOf(d.info);
        if (bytes == kPciInfoV1Size) memset(&full.busId[0], 0, kPciInfoV1Size - kPciInfoV1Filled);
        memcpy(pci, &full, bytes);
        return NVML_SUCCESS;
      },
      fn);
}

enum class ProcessKind { kCompute, kGraphics, kMps };

template <typename Info>
nvmlReturn_t RunningProcesses(ProcessKind kind, nvmlDevice_t device, unsigned int* count,
                              Info* infos, const char* fn = __builtin_FUNCTION()) {
  return WithDevice(
      device,
      [&](SimState& s, DeviceState&, int index) {
        // The simulator runs compute work only.
        std::vector<RunningProcess> procs;
        if (kind == ProcessKind::kCompute) procs = RunningComputeProcesses(s, index);
        if (kind == ProcessKind::kMps) procs = MpsClientProcesses(s, index);
        return FillRunningProcesses(procs, count, infos);
      },
      fn);
}

uint32_t VideoClockOf(uint32_t sm_mhz) { return sm_mhz * 8 / 9; }

// Clock of `type` given the SM and memory clocks in effect.
nvmlReturn_t PickClock(nvmlClockType_t type, uint32_t sm, uint32_t mem, unsigned int* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      *out = sm;
      return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
      *out = mem;
      return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
      *out = VideoClockOf(sm);
      return NVML_SUCCESS;
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

nvmlReturn_t Clock(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id, unsigned int* out,
                   const char* fn = __builtin_FUNCTION()) {
  return WithDevice(
      device,
      [&](SimState&, DeviceState& d, int) {
        switch (id) {
          case NVML_CLOCK_ID_CURRENT:
            return PickClock(type, CurrentSmClockMhz(d), CurrentMemClockMhz(d), out);
          case NVML_CLOCK_ID_APP_CLOCK_TARGET:
          case NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
            return PickClock(type, d.info.default_sm_clock_mhz, d.info.default_mem_clock_mhz, out);
          case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
            return PickClock(type, d.info.max_sm_clock_mhz, d.info.max_mem_clock_mhz, out);
          default:
            return NVML_ERROR_INVALID_ARGUMENT;
        }
      },
      fn);
}

// Validates and stores a locked clock range (0, 0 resets).
nvmlReturn_t LockClocks(nvmlDevice_t device, bool memory, unsigned int min_mhz,
                        unsigned int max_mhz, bool reset, const char* fn = __builtin_FUNCTION()) {
  return SetOnDevice(
      device,
      [&](const DeviceState& d) {
        const uint32_t limit = memory ? d.info.max_mem_clock_mhz : d.info.max_sm_clock_mhz;
        return reset || LockedRangeSupported(min_mhz, max_mhz, limit);
      },
      [&](DeviceState& d) {
        // The SM lock is read without the state lock by SimGpu::KernelDurationNs.
        __atomic_store_n(memory ? &d.locked_mem_min_mhz : &d.locked_sm_min_mhz, reset ? 0 : min_mhz,
                         __ATOMIC_RELAXED);
        __atomic_store_n(memory ? &d.locked_mem_max_mhz : &d.locked_sm_max_mhz, reset ? 0 : max_mhz,
                         __ATOMIC_RELAXED);
      },
      fn);
}

// Reads one uint32 of device state into *out.
template <typename Get>
nvmlReturn_t GetUint(nvmlDevice_t device, unsigned int* out, Get&& get,
                     const char* fn = __builtin_FUNCTION()) {
  return WithDevice(
      device,
      [&](SimState& s, DeviceState& d, int index) {
        if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        *out = get(s, d, index);
        return NVML_SUCCESS;
      },
      fn);
}

const char* ErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "The requested vgpu operation is not available on target device, because ECC is "
             "enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "The requested frequency is not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Version mismatch between the structure and the API";
    case NVML_ERROR_DEPRECATED:
      return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY:
      return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "The GPU could not be found";
    case NVML_ERROR_INVALID_STATE:
      return "The GPU is in an invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "The requested reset type is not supported";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error";
  }
  return "Unknown Error";
}

// This process's cgroup (read once; a process does not change cgroup under NVML
// here) and the memory it sees of device `index`.
const std::string& OwnCgroup() {
  static const std::string* cgroup = new std::string(OwnCgroupPath());
  return *cgroup;
}
MemoryView OwnMemoryView(const SimState& s, int index) {
  return ViewFromCgroup(s, index, OwnCgroup());
}

// The r615 memory-limit entry points on this node and device: an older driver's
// library has no such function (NVML_ERROR_FUNCTION_NOT_FOUND); MIG devices and
// nodes without cgroup v2 are NVML_ERROR_NOT_SUPPORTED.
nvmlReturn_t MemoryLimitsAvailable(const SimState& s, const DeviceState& d) {
  if (!HasCgroupMemoryLimits(s.params.driver_version)) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (d.mig_mode == gpuslice::sim::kMigEnabled) return NVML_ERROR_NOT_SUPPORTED;
  if (!IsCgroupV2Root(CgroupRoot())) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

// A `nameSpace` must be a cgroup directory under the cgroup v2 root:
// INVALID_ARGUMENT if it is not a path there, NOT_FOUND if no such directory.
nvmlReturn_t CheckCgroupPath(const char* path) {
  if (path == nullptr || path[0] != '/' || strlen(path) >= kCgroupPathBytes) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!CgroupAtOrBelow(path, CgroupRoot())) return NVML_ERROR_INVALID_ARGUMENT;
  struct stat st {};
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return NVML_ERROR_NOT_FOUND;
  return NVML_SUCCESS;
}

// ---- events ----
// The simulator raises only XID errors (`gpuslice sim xid`, sim/core/xid_log.h).
constexpr unsigned long long kSupportedEvents = nvmlEventTypeXidCriticalError;

bool LiveSet(nvmlEventSet_t set) {
  std::lock_guard lock(Lib().sets_mu);
  return set != nullptr && Lib().sets.contains(set);
}

nvmlReturn_t EventSetCreate(nvmlEventSet_t* set) {
  return WithSim([&](SimState&) {
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto* created = new nvmlEventSet_st();
    std::lock_guard lock(Lib().sets_mu);
    Lib().sets.insert(created);
    *set = created;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t EventSetFree(nvmlEventSet_t set) {
  return WithSim([&](SimState&) {
    std::lock_guard lock(Lib().sets_mu);
    if (set == nullptr || Lib().sets.erase(set) == 0) return NVML_ERROR_INVALID_ARGUMENT;
    delete set;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t RegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set,
                            const char* fn = __builtin_FUNCTION()) {
  std::string state_path;
  {
    std::shared_lock lock(Lib().mu);
    if (Lib().gpu != nullptr) state_path = Lib().gpu->path();
  }
  return WithDevice(
      device,
      [&](SimState&, DeviceState&, int index) {
        if (!LiveSet(set)) return NVML_ERROR_INVALID_ARGUMENT;
        if ((types & ~kSupportedEvents) != 0) return NVML_ERROR_NOT_SUPPORTED;
        std::lock_guard lock(set->mu);
        // Only what happens from now on is delivered.
        if (set->types[index] == 0) set->from[index] = XidLogSize(state_path);
        set->types[index] |= types;
        return NVML_SUCCESS;
      },
      fn);
}

// The next XID event of `set`, if one is ready.
bool NextEvent(nvmlEventSet_t set, const std::string& state_path, nvmlEventData_t* data) {
  std::lock_guard lock(set->mu);
  uint64_t next = 0;
  for (const XidRecord& r : ReadXids(state_path, set->next, &next)) set->ready.push_back(r);
  set->next = next;
  while (!set->ready.empty()) {
    const XidRecord r = set->ready.front();
    set->ready.pop_front();
    if (r.device >= kMaxDevices || (set->types[r.device] & nvmlEventTypeXidCriticalError) == 0 ||
        r.offset < set->from[r.device]) {
      continue;
    }
    data->device = &Lib().devices[r.device];
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = r.xid;
    data->gpuInstanceId = 0xFFFFFFFFu;  // no MIG instances are modelled
    data->computeInstanceId = 0xFFFFFFFFu;
    return true;
  }
  return false;
}

// Looks for an event every 10 ms until `timeoutms` has passed.
nvmlReturn_t EventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutms);
  for (;;) {
    std::string state_path;
    {
      std::shared_lock lock(Lib().mu);
      if (Lib().gpu == nullptr) return NVML_ERROR_UNINITIALIZED;
      state_path = Lib().gpu->path();
    }
    if (!LiveSet(set) || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    try {
      if (NextEvent(set, state_path, data)) return NVML_SUCCESS;
    } catch (...) {
      return NVML_ERROR_UNKNOWN;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(10)));
  }
}

// ---- MIG handles (see nvmlGpuInstance_st) ----

// The index of `p` in the array of `n` objects at `base`, or -1 (compared
// as integers: an arbitrary pointer must not be dereferenced).
template <typename T>
int IndexIn(const T* p, const T* base, size_t n) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto first = reinterpret_cast<uintptr_t>(base);
  if (at < first || (at - first) % sizeof(T) != 0) return -1;
  const uintptr_t index = (at - first) / sizeof(T);
  return index < n ? static_cast<int>(index) : -1;
}

// How many handles of each MIG kind the library has.
constexpr size_t kGpuInstanceHandles = size_t{kMaxDevices} * kMaxGpuInstances;
constexpr size_t kComputeInstanceHandles = kGpuInstanceHandles * kMaxComputeInstances;

// A GPU instance, compute instance or MIG device: the records it names.
struct MigRef {
  int device = -1;
  MigGpuInstanceRecord* gi = nullptr;
  MigComputeInstanceRecord* ci = nullptr;  // not for a GPU instance
};

// The record a GPU-instance handle names while it is in use.
std::optional<MigRef> GpuInstanceOf(SimState& s, nvmlGpuInstance_t handle) {
  const int flat = IndexIn(handle, &Lib().gpu_instances[0][0], kGpuInstanceHandles);
  if (flat < 0 || flat / kMaxGpuInstances >= static_cast<int>(s.device_count)) return std::nullopt;
  MigGpuInstanceRecord& gi =
      s.devices[flat / kMaxGpuInstances].gpu_instances[flat % kMaxGpuInstances];
  if (gi.used == 0) return std::nullopt;
  return MigRef{flat / kMaxGpuInstances, &gi, nullptr};
}

// The records a compute-instance or MIG-device handle (`flat`: its index in
// the [device][gi][ci] arrays) names while they are in use.
std::optional<MigRef> ComputeInstanceAt(SimState& s, int flat) {
  constexpr int kPerDevice = kMaxGpuInstances * kMaxComputeInstances;
  if (flat < 0 || flat / kPerDevice >= static_cast<int>(s.device_count)) return std::nullopt;
  DeviceState& d = s.devices[flat / kPerDevice];
  MigGpuInstanceRecord& gi = d.gpu_instances[flat % kPerDevice / kMaxComputeInstances];
  MigComputeInstanceRecord& ci = gi.compute[flat % kMaxComputeInstances];
  if (gi.used == 0 || ci.used == 0) return std::nullopt;
  return MigRef{flat / kPerDevice, &gi, &ci};
}
std::optional<MigRef> ComputeInstanceOf(SimState& s, nvmlComputeInstance_t handle) {
  return ComputeInstanceAt(
      s, IndexIn(handle, &Lib().compute_instances[0][0][0], kComputeInstanceHandles));
}
std::optional<MigRef> MigDeviceOf(SimState& s, nvmlDevice_t handle) {
  return ComputeInstanceAt(s,
                           IndexIn(handle, &Lib().mig_devices[0][0][0], kComputeInstanceHandles));
}

// Whether `handle` is one of the MIG device handles (live or not).
bool IsMigHandle(nvmlDevice_t handle) {
  return IndexIn(handle, &Lib().mig_devices[0][0][0], kComputeInstanceHandles) >= 0;
}

// The handles of a GPU instance's or compute instance's record.
nvmlGpuInstance_t GpuInstanceHandle(const DeviceState& d, int dev, const MigGpuInstanceRecord* gi) {
  return &Lib().gpu_instances[dev][gi - d.gpu_instances];
}
nvmlComputeInstance_t ComputeInstanceHandle(const DeviceState& d, int dev, const MigRef& ref) {
  return &Lib().compute_instances[dev][ref.gi - d.gpu_instances][ref.ci - ref.gi->compute];
}
nvmlDevice_t MigDeviceHandle(const DeviceState& d, int dev, const MigRef& ref) {
  return &Lib().mig_devices[dev][ref.gi - d.gpu_instances][ref.ci - ref.gi->compute];
}

// Runs f(SimState&, DeviceState&, MigRef) for a live handle of kind `of`.
template <typename Handle, typename Of, typename F>
nvmlReturn_t WithMig(Handle handle, Of&& of, F&& f) {
  return WithSim([&](SimState& s) -> nvmlReturn_t {
    const std::optional<MigRef> ref = of(s, handle);
    if (!ref) return NVML_ERROR_INVALID_ARGUMENT;
    return f(s, s.devices[ref->device], *ref);
  });
}

// A device's MIG geometry, NOT_SUPPORTED unless it is in MIG mode.
nvmlReturn_t MigGeometry(const DeviceState& d, const gpuslice::sim::MigGeometry** out) {
  *out = gpuslice::sim::GeometryOf(d);
  if (*out == nullptr || d.mig_mode != gpuslice::sim::kMigEnabled) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

template <typename Info>
void FillProfileInfo(const DeviceState& d, const gpuslice::sim::MigProfile& p, Info* info) {
  info->id = p.id;
  info->isP2pSupported = 0;
  info->sliceCount = p.compute_slices;
  info->instanceCount = p.instance_count;
  info->multiprocessorCount = p.sm_count;
  info->copyEngineCount = p.copy_engines;
  info->decoderCount = p.decoders;
  info->encoderCount = 0;
  info->jpegCount = p.jpegs;
  info->ofaCount = p.ofas;
  info->memorySizeMB = gpuslice::sim::MigMemoryBytes(p, d.info.total_bytes) >> 20;
}

// Copies up to *count of `all` to `out` (a null `out` asks for the count).
template <typename T>
nvmlReturn_t CopyList(const std::vector<T>& all, T* out, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (out == nullptr) {
    *count = static_cast<unsigned>(all.size());
    return NVML_SUCCESS;
  }
  if (*count < all.size()) {
    *count = static_cast<unsigned>(all.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(all.begin(), all.end(), out);
  *count = static_cast<unsigned>(all.size());
  return NVML_SUCCESS;
}

// A created instance's failure as NVML says it.
nvmlReturn_t CreateError(const Status& st) {
  switch (st.code()) {
    case StatusCode::kResourceExhausted:
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case StatusCode::kInvalidArgument:
      return NVML_ERROR_INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return NVML_ERROR_NOT_FOUND;
    case StatusCode::kFailedPrecondition:
      return NVML_ERROR_NOT_SUPPORTED;
    default:
      return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t CreateGpuInstance(nvmlDevice_t device, unsigned int profile_id,
                               const nvmlGpuInstancePlacement_t* placement, nvmlGpuInstance_t* out,
                               const char* fn) {
  return WithDevice(
      device,
      [&](SimState&, DeviceState& d, int dev) -> nvmlReturn_t {
        if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        const gpuslice::sim::MigGeometry* g = nullptr;
        if (nvmlReturn_t rc = MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
        const gpuslice::sim::MigProfile* p = g->FindById(profile_id);
        if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (!CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
        std::optional<gpuslice::sim::MigPlacement> at;
        if (placement != nullptr)
          at = gpuslice::sim::MigPlacement{placement->start, placement->size};
        auto slot = gpuslice::sim::CreateGpuInstance(d, p->index, at);
        if (!slot.ok()) return CreateError(slot.status());
        *out = &Lib().gpu_instances[dev][*slot];
        return NVML_SUCCESS;
      },
      fn);
}

}  // namespace
}  // namespace gpuslice::sim::nvml

namespace ns = gpuslice::sim::nvml;
using gpuslice::sim::DeviceState;
using gpuslice::sim::SimState;

// ---- init, errors, system ----

GS_NVML_API nvmlReturn_t nvmlInit(void) { return ns::Init(0); }
GS_NVML_API nvmlReturn_t nvmlInit_v2(void) { return ns::Init(0); }
GS_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return ns::Init(flags); }
GS_NVML_API nvmlReturn_t nvmlShutdown(void) { return ns::Shutdown(); }
GS_NVML_API const char* nvmlErrorString(nvmlReturn_t result) { return ns::ErrorString(result); }

GS_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return ns::WithSim(
      [&](SimState& s) { return ns::CopyString(s.params.driver_version, version, length); });
}

GS_NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return ns::WithSim([&](SimState& s) {
    const std::string v = "13." + std::string(s.params.driver_version);
    return ns::CopyString(v.c_str(), version, length);
  });
}

GS_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // Works before nvmlInit too: then the default (pre-r615) driver's CUDA version.
  *version = ns::CudaDriverVersionFor(gpuslice::sim::kDefaultDriverVersion);
  ns::WithSim([&](SimState& s) {
    *version = ns::CudaDriverVersionFor(s.params.driver_version);
    return NVML_SUCCESS;
  });
  return NVML_SUCCESS;
}

GS_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

GS_NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name,
                                                  unsigned int length) {
  return ns::WithSim([&](SimState& s) {
    if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    // A process of the simulation is known by its host pid, as the driver
    // knows it (the caller's /proc may be a container's); others by /proc.
    char comm[64] = "";
    for (const gpuslice::sim::ProcessRecord& p : s.processes) {
      if (p.status == gpuslice::sim::kProcessAlive && p.pid == static_cast<int32_t>(pid)) {
        snprintf(comm, sizeof comm, "%.*s", static_cast<int>(sizeof p.name), p.name);
      }
    }
    if (comm[0] == '\0') gpuslice::ProcessName(static_cast<pid_t>(pid), comm, sizeof comm);
    if (comm[0] == '\0') return NVML_ERROR_NOT_FOUND;
    snprintf(name, length, "%s", comm);  // truncates, as NVML does
    return NVML_SUCCESS;
  });
}

// ---- enumeration and identity ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return ns::DeviceCount(count); }
GS_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return ns::DeviceCount(count);
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return ns::HandleByIndex(index, device);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return ns::HandleByIndex(index, device);
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return ns::HandleWhere(uuid, device, [&](const gpuslice::sim::DeviceInfo& info) {
    return strcasecmp(info.uuid, uuid) == 0;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  return ns::HandleWhere(serial, device, [&](const gpuslice::sim::DeviceInfo& info) {
    return strcmp(info.serial, serial) == 0;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* id, nvmlDevice_t* device) {
  return ns::HandleByPciBusId(id, device);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* id, nvmlDevice_t* device) {
  return ns::HandleByPciBusId(id, device);
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  if (ns::IsMigHandle(device)) {  // "<GPU> MIG 1g.10gb"
    return ns::WithMig(
        device, ns::MigDeviceOf, [&](SimState&, DeviceState& d, const ns::MigRef& ref) {
          const std::string mig_name = std::string(d.info.name) + " MIG " +
                                       gpuslice::sim::MigDeviceProfileName(d, *ref.gi, *ref.ci);
          return ns::CopyString(mig_name.c_str(), name, length);
        });
  }
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    return ns::CopyString(d.info.name, name, length);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (ns::IsMigHandle(device)) {
    return ns::WithMig(device, ns::MigDeviceOf,
                       [&](SimState&, DeviceState&, const ns::MigRef& ref) {
                         return ns::CopyString(ref.ci->uuid, uuid, length);
                       });
  }
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    return ns::CopyString(d.info.uuid, uuid, length);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                             unsigned int length) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    return ns::CopyString(d.info.serial, serial, length);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return ns::GetUint(device, index,
                     [](SimState&, DeviceState&, int i) { return static_cast<unsigned>(i); });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  return ns::GetUint(device, minor,
                     [](SimState&, DeviceState&, int i) { return static_cast<unsigned>(i); });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return ns::PciInfo(device, pci, ns::kPciInfoV1Size);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return ns::PciInfo(device, pci, sizeof(nvmlPciInfo_t));
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return ns::PciInfo(device, pci, sizeof(nvmlPciInfo_t));
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                            int* minor) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *major = static_cast<int>(d.info.cc_major);
    *minor = static_cast<int>(d.info.cc_minor);
    return NVML_SUCCESS;
  });
}

// ---- memory and utilization ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (ns::IsMigHandle(device)) {  // its GPU instance's memory, and what contexts hold of it
    return ns::WithMig(device, ns::MigDeviceOf,
                       [&](SimState& s, DeviceState&, const ns::MigRef& ref) -> nvmlReturn_t {
                         if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                         const gpuslice::sim::MigMemory m =
                             gpuslice::sim::MigDeviceMemory(s, ref.device, *ref.gi);
                         memory->total = m.total_bytes;
                         memory->used = std::min(m.used_bytes, m.total_bytes);
                         memory->free = m.free_bytes;
                         return NVML_SUCCESS;
                       });
  }
  return ns::WithDevice(device, [&](SimState& s, DeviceState&, int index) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // Inside a cgroup with a driver memory limit: the limit's view.
    const gpuslice::sim::MemoryView v = ns::OwnMemoryView(s, index);
    memory->total = v.total_bytes;
    memory->used = v.used_bytes;
    memory->free = v.free_bytes;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState&, int index) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    // Inside a cgroup with a driver memory limit: the limit's view (documented
    // for the r615 limits: "cross-reference with GetMemoryInfo_v2 in that cgroup").
    const gpuslice::sim::MemoryView v = ns::OwnMemoryView(s, index);
    memory->total = v.total_bytes;
    memory->reserved = 0;  // the simulated driver reserves nothing outside contexts
    memory->used = v.used_bytes;
    memory->free = v.free_bytes;
    return NVML_SUCCESS;
  });
}

// ---- r615 per-cgroup memory limits (see sim/core/memory_limits.h) ----

GS_NVML_API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                      nvmlSetMemoryLimits_v1_t* limits) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState& d, int) -> nvmlReturn_t {
    if (nvmlReturn_t rc = ns::MemoryLimitsAvailable(s, d); rc != NVML_SUCCESS) return rc;
    if (limits == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (nvmlReturn_t rc = ns::CheckCgroupPath(limits->nameSpace); rc != NVML_SUCCESS) return rc;
    const bool clear = limits->softLimit == 0 && limits->hardLimit == NVML_DEVICE_MEMORY_LIMIT_MAX;
    if (!clear && (limits->softLimit > limits->hardLimit || limits->hardLimit == 0)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!ns::CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
    gpuslice::sim::PruneRemovedCgroups(d);
    gpuslice::Status st =
        gpuslice::sim::SetMemoryLimit(d, limits->nameSpace, limits->softLimit, limits->hardLimit);
    if (st.code() == gpuslice::StatusCode::kResourceExhausted) {
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    return st.ok() ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                      nvmlGetMemoryLimits_v1_t* limits) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState& d, int index) -> nvmlReturn_t {
    if (nvmlReturn_t rc = ns::MemoryLimitsAvailable(s, d); rc != NVML_SUCCESS) return rc;
    if (limits == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (nvmlReturn_t rc = ns::CheckCgroupPath(limits->nameSpace); rc != NVML_SUCCESS) return rc;
    gpuslice::sim::PruneRemovedCgroups(d);
    const gpuslice::sim::MemoryLimitRecord* m =
        gpuslice::sim::FindMemoryLimit(d, limits->nameSpace);
    limits->softLimit = m != nullptr ? m->soft_bytes : 0;
    limits->hardLimit = m != nullptr ? m->hard_bytes : NVML_DEVICE_MEMORY_LIMIT_MAX;
    limits->currentUsed = gpuslice::sim::CgroupUsedBytes(s, index, limits->nameSpace);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (bar1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const ns::Bar1Info b = ns::Bar1(d.info);
    bar1->bar1Total = b.total_bytes;
    bar1->bar1Used = b.used_bytes;
    bar1->bar1Free = b.total_bytes - b.used_bytes;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                       nvmlUtilization_t* utilization) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = ns::GpuUtilizationPercent(d);
    utilization->memory = ns::MemoryUtilizationPercent(d);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState&, int index) {
    if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    return ns::FillProcessSamples(ns::ProcessUtilization(s, index, lastSeenTimeStamp), utilization,
                                  processSamplesCount);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                              unsigned long long lastSeenTimeStamp,
                                              nvmlValueType_t* sampleValType,
                                              unsigned int* sampleCount, nvmlSample_t* samples) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState&, int index) {
    if (sampleValType == nullptr || sampleCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
    const std::vector<ns::DeviceSample> found =
        ns::GpuUtilizationSamples(s, index, lastSeenTimeStamp);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (found.empty()) {
      *sampleCount = 0;
      return NVML_ERROR_NOT_FOUND;
    }
    if (samples == nullptr) {
      *sampleCount = static_cast<unsigned int>(found.size());
      return NVML_SUCCESS;
    }
    // As many as the buffer holds, the oldest first.
    const auto n = std::min<size_t>(found.size(), *sampleCount);
    for (size_t i = 0; i < n; ++i) {
      samples[i].timeStamp = found[i].timestamp_us;
      samples[i].sampleValue.ullVal = 0;
      samples[i].sampleValue.uiVal = found[i].percent;
    }
    *sampleCount = static_cast<unsigned int>(n);
    return NVML_SUCCESS;
  });
}

// ---- running processes ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              nvmlProcessInfo_v1_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kCompute, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v2_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kCompute, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kCompute, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device,
                                                               unsigned int* count,
                                                               nvmlProcessInfo_v1_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kGraphics, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                                  unsigned int* count,
                                                                  nvmlProcessInfo_v2_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kGraphics, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                  unsigned int* count,
                                                                  nvmlProcessInfo_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kGraphics, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v1_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kMps, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nvmlProcessInfo_v2_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kMps, device, count, infos);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nvmlProcessInfo_t* infos) {
  return ns::RunningProcesses(ns::ProcessKind::kMps, device, count, infos);
}

// ---- power and energy ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  return ns::GetUint(device, power,
                     [](SimState&, DeviceState& d, int) { return ns::PowerUsageMw(d); });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device,
                                                          nvmlEnableState_t* mode) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                           unsigned int* limit) {
  return ns::GetUint(device, limit,
                     [](SimState&, DeviceState& d, int) { return d.power_limit_mw; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                      unsigned int* min_limit,
                                                                      unsigned int* max_limit) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (min_limit == nullptr || max_limit == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *min_limit = d.info.power_min_mw;
    *max_limit = d.info.power_max_mw;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                                  unsigned int* limit) {
  return ns::GetUint(device, limit,
                     [](SimState&, DeviceState& d, int) { return d.info.power_default_mw; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  return ns::GetUint(device, limit,
                     [](SimState&, DeviceState& d, int) { return d.power_limit_mw; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device,
                                                           unsigned int limit) {
  return ns::SetOnDevice(
      device,
      [&](const DeviceState& d) {
        return limit >= d.info.power_min_mw && limit <= d.info.power_max_mw;
      },
      [&](DeviceState& d) { d.power_limit_mw = limit; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                             unsigned long long* energy) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (energy == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *energy = d.energy_mj > 0 ? static_cast<unsigned long long>(d.energy_mj) : 0;
    return NVML_SUCCESS;
  });
}

// ---- clocks ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                unsigned int* clock) {
  return ns::Clock(device, type, NVML_CLOCK_ID_CURRENT, clock);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned int* clock) {
  return ns::Clock(device, type, NVML_CLOCK_ID_CUSTOMER_BOOST_MAX, clock);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                        unsigned int* clock) {
  return ns::Clock(device, type, NVML_CLOCK_ID_APP_CLOCK_TARGET, clock);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device,
                                                               nvmlClockType_t type,
                                                               unsigned int* clock) {
  return ns::Clock(device, type, NVML_CLOCK_ID_APP_CLOCK_DEFAULT, clock);
}
GS_NVML_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t type,
                                            nvmlClockId_t id, unsigned int* clock) {
  return ns::Clock(device, type, id, clock);
}

GS_NVML_API nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int min_mhz,
                                                      unsigned int max_mhz) {
  return ns::LockClocks(device, /*memory=*/false, min_mhz, max_mhz, /*reset=*/false);
}
GS_NVML_API nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  return ns::LockClocks(device, /*memory=*/false, 0, 0, /*reset=*/true);
}
GS_NVML_API nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned int min_mhz,
                                                         unsigned int max_mhz) {
  return ns::LockClocks(device, /*memory=*/true, min_mhz, max_mhz, /*reset=*/false);
}
GS_NVML_API nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) {
  return ns::LockClocks(device, /*memory=*/true, 0, 0, /*reset=*/true);
}

// ---- modes and other state ----

GS_NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device,
                                                      nvmlEnableState_t* mode) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = d.persistence != 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode) {
  return ns::SetOnDevice(
      device,
      [&](const DeviceState&) {
        return mode == NVML_FEATURE_DISABLED || mode == NVML_FEATURE_ENABLED;
      },
      [&](DeviceState& d) { d.persistence = mode == NVML_FEATURE_ENABLED ? 1 : 0; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = static_cast<nvmlComputeMode_t>(d.compute_mode);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
  const auto m = static_cast<uint32_t>(mode);
  return ns::SetOnDevice(
      device, [&](const DeviceState&) { return m < NVML_COMPUTEMODE_COUNT; },
      // The simulated driver enforces it at context creation.
      [&](DeviceState& d) { d.compute_mode = m; });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                  nvmlTemperatureSensors_t sensor,
                                                  unsigned int* temp) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (temp == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = ns::TemperatureC(d);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *state = NVML_PSTATE_0;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (speed == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;  // passively cooled, like an SXM H100
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device,
                                                    nvmlEnableState_t* active) {
  return nvmlDeviceGetDisplayMode(device, active);
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                              unsigned int* pending) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *current =
        d.mig_mode == gpuslice::sim::kMigEnabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pending = d.mig_pending_mode == gpuslice::sim::kMigEnabled ? NVML_DEVICE_MIG_ENABLE
                                                                : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
  });
}

// NVIDIA: the call sets the pending mode; the activation status says whether
// it took effect (NVML_SUCCESS) or not, e.g. NVML_ERROR_IN_USE on a GPU that
// is not idle (sim/core/mig_state.h).
GS_NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                              nvmlReturn_t* activation_status) {
  return ns::WithDevice(device, [&](SimState& s, DeviceState& d, int index) -> nvmlReturn_t {
    if (activation_status == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (gpuslice::sim::GeometryOf(d) == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    if (!ns::CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
    const gpuslice::Status st = gpuslice::sim::SetMigMode(s, index, mode);
    *activation_status = st.ok() ? NVML_SUCCESS : NVML_ERROR_IN_USE;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                              nvmlEnableState_t* pending) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                     nvmlMemoryErrorType_t type,
                                                     nvmlEccCounterType_t counter,
                                                     unsigned long long* count) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (count == nullptr || type >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        counter >= NVML_ECC_COUNTER_TYPE_COUNT) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = 0;  // simulated memory never fails
    return NVML_SUCCESS;
  });
}

// ---- events (XID errors only; docs/sim-nvml.md "XID errors") ----

GS_NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) { return ns::EventSetCreate(set); }

GS_NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { return ns::EventSetFree(set); }

GS_NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                          unsigned long long* types) {
  return ns::WithDevice(device, [&](SimState&, DeviceState&, int) {
    if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *types = ns::kSupportedEvents;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                                  nvmlEventSet_t set) {
  return ns::RegisterEvents(device, types, set);
}

GS_NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                             unsigned int timeoutms) {
  return ns::EventSetWait(set, data, timeoutms);
}

// ---- MIG (sim/core/mig_state.h; docs/sim.md "MIG mode and instances") ----

namespace mig = gpuslice::sim;

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device,
                                                             unsigned int profile,
                                                             nvmlGpuInstanceProfileInfo_t* info) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
    if (info == nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigProfile* p = g->FindByIndex(profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    ns::FillProfileInfo(d, *p, info);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t* info) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
    if (info == nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigProfile* p = g->FindByIndex(profile);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    ns::FillProfileInfo(d, *p, info);
    snprintf(info->name, sizeof info->name, "MIG %.*s", static_cast<int>(p->name.size()),
             p->name.data());
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigProfile* p = g->FindById(profile_id);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<nvmlGpuInstancePlacement_t> all;
    for (const mig::MigPlacement& at : mig::PossiblePlacements(*p))
      all.push_back({at.start, at.size});
    return ns::CopyList(all, placements, count);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                   unsigned int profile_id,
                                                                   unsigned int* count) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigProfile* p = g->FindById(profile_id);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = mig::RemainingCapacity(*p, mig::GpuInstanceUses(d));
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profile_id,
                                                     nvmlGpuInstance_t* gpu_instance) {
  return ns::CreateGpuInstance(device, profile_id, nullptr, gpu_instance, __func__);
}

GS_NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpu_instance) {
  if (placement == nullptr) {
    return ns::WithSim([](SimState&) { return NVML_ERROR_INVALID_ARGUMENT; });
  }
  return ns::CreateGpuInstance(device, profile_id, placement, gpu_instance, __func__);
}

GS_NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpu_instance) {
  return ns::WithMig(gpu_instance, ns::GpuInstanceOf,
                     [&](SimState&, DeviceState& d, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (!ns::CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
                       const gpuslice::Status st = mig::DestroyGpuInstance(d, ref.gi->id);
                       return st.ok() ? NVML_SUCCESS : NVML_ERROR_IN_USE;
                     });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id,
                                                   nvmlGpuInstance_t* gpu_instances,
                                                   unsigned int* count) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int dev) -> nvmlReturn_t {
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigProfile* p = g->FindById(profile_id);
    if (p == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<nvmlGpuInstance_t> all;
    for (const mig::MigGpuInstanceRecord& gi : d.gpu_instances) {
      if (gi.used != 0 && gi.profile == p->index) all.push_back(ns::GpuInstanceHandle(d, dev, &gi));
    }
    return ns::CopyList(all, gpu_instances, count);
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                      nvmlGpuInstance_t* gpu_instance) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int dev) -> nvmlReturn_t {
    if (gpu_instance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    const mig::MigGpuInstanceRecord* gi = mig::FindGpuInstance(d, id);
    if (gi == nullptr) return NVML_ERROR_NOT_FOUND;
    *gpu_instance = ns::GpuInstanceHandle(d, dev, gi);
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance,
                                                nvmlGpuInstanceInfo_t* info) {
  return ns::WithMig(gpu_instance, ns::GpuInstanceOf,
                     [&](SimState&, DeviceState& d, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       info->device = &ns::Lib().devices[ref.device];
                       info->id = ref.gi->id;
                       info->profileId = mig::GeometryOf(d)->FindByIndex(ref.gi->profile)->id;
                       info->placement = {ref.gi->start, ref.gi->size};
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpu_instance, unsigned int profile, unsigned int eng_profile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return ns::WithMig(
      gpu_instance, ns::GpuInstanceOf,
      [&](SimState&, DeviceState& d, const ns::MigRef& ref) -> nvmlReturn_t {
        if (info == nullptr || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
            eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
          return NVML_ERROR_INVALID_ARGUMENT;
        }
        const mig::MigProfile& gi = *mig::GeometryOf(d)->FindByIndex(ref.gi->profile);
        const uint32_t slices = mig::MigComputeSlices(profile);
        if (slices == 0 || slices > gi.compute_slices) return NVML_ERROR_NOT_SUPPORTED;
        *info = {};
        info->id = profile;
        info->sliceCount = slices;
        info->instanceCount =
            static_cast<unsigned>(mig::ComputePlacementStarts(slices, gi.compute_slices).size());
        info->multiprocessorCount = gi.sm_count * slices / gi.compute_slices;
        info->sharedCopyEngineCount = gi.copy_engines;
        info->sharedDecoderCount = gi.decoders;
        info->sharedJpegCount = gi.jpegs;
        info->sharedOfaCount = gi.ofas;
        return NVML_SUCCESS;
      });
}

GS_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t gpu_instance, unsigned int profile_id, unsigned int* count) {
  return ns::WithMig(gpu_instance, ns::GpuInstanceOf,
                     [&](SimState&, DeviceState& d, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       const uint32_t slices = mig::MigComputeSlices(profile_id);
                       if (slices == 0 || slices > mig::GpuInstanceComputeSlices(d, *ref.gi)) {
                         return NVML_ERROR_INVALID_ARGUMENT;
                       }
                       *count = mig::ComputeRemainingCapacity(d, *ref.gi, slices);
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t
nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
                                     nvmlComputeInstance_t* compute_instance) {
  return ns::WithMig(gpu_instance, ns::GpuInstanceOf,
                     [&](SimState&, DeviceState& d, ns::MigRef ref) -> nvmlReturn_t {
                       if (compute_instance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       if (!ns::CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
                       auto slot = mig::CreateComputeInstance(d, ref.gi->id, profile_id);
                       if (!slot.ok()) return ns::CreateError(slot.status());
                       ref.ci = &ref.gi->compute[*slot];
                       *compute_instance = ns::ComputeInstanceHandle(d, ref.device, ref);
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t compute_instance) {
  return ns::WithMig(compute_instance, ns::ComputeInstanceOf,
                     [&](SimState& s, DeviceState&, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (!ns::CallerIsRoot()) return NVML_ERROR_NO_PERMISSION;
                       const gpuslice::Status st =
                           mig::DestroyComputeInstance(s, ref.device, ref.gi->id, ref.ci->id);
                       return st.ok() ? NVML_SUCCESS : NVML_ERROR_IN_USE;
                     });
}

GS_NVML_API nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
                                   nvmlComputeInstance_t* compute_instances, unsigned int* count) {
  return ns::WithMig(gpu_instance, ns::GpuInstanceOf,
                     [&](SimState&, DeviceState& d, ns::MigRef ref) -> nvmlReturn_t {
                       if (mig::MigComputeSlices(profile_id) == 0)
                         return NVML_ERROR_INVALID_ARGUMENT;
                       std::vector<nvmlComputeInstance_t> all;
                       for (mig::MigComputeInstanceRecord& c : ref.gi->compute) {
                         if (c.used == 0 || c.profile != profile_id) continue;
                         ref.ci = &c;
                         all.push_back(ns::ComputeInstanceHandle(d, ref.device, ref));
                       }
                       return ns::CopyList(all, compute_instances, count);
                     });
}

GS_NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t compute_instance,
                                                       nvmlComputeInstanceInfo_t* info) {
  return ns::WithMig(compute_instance, ns::ComputeInstanceOf,
                     [&](SimState&, DeviceState& d, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       info->device = &ns::Lib().devices[ref.device];
                       info->gpuInstance = ns::GpuInstanceHandle(d, ref.device, ref.gi);
                       info->id = ref.ci->id;
                       info->profileId = ref.ci->profile;
                       info->placement = {ref.ci->start, ref.ci->size};
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t compute_instance,
                                                    nvmlComputeInstanceInfo_t* info) {
  return nvmlComputeInstanceGetInfo_v2(compute_instance, info);
}

// MIG devices: a GPU in MIG mode lists one per compute instance, in record
// order (NVIDIA's order is not documented); a MIG handle answers the calls
// below and nvmlDeviceGetUUID, nvmlDeviceGetName and
// nvmlDeviceGetMemoryInfo(_v2).

GS_NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                     unsigned int* is_mig_device) {
  return ns::WithSim([&](SimState& s) -> nvmlReturn_t {
    if (is_mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (ns::MigDeviceOf(s, device)) {
      *is_mig_device = 1;
      return NVML_SUCCESS;
    }
    if (ns::DeviceIndex(device, s.device_count) < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig_device = 0;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return ns::WithMig(device, ns::MigDeviceOf,
                     [&](SimState&, DeviceState&, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       *id = ref.gi->id;
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return ns::WithMig(device, ns::MigDeviceOf,
                     [&](SimState&, DeviceState&, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       *id = ref.ci->id;
                       return NVML_SUCCESS;
                     });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int) -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = mig::GeometryOf(d) != nullptr ? mig::kMigComputeSlices : 0;
    return NVML_SUCCESS;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                             unsigned int index,
                                                             nvmlDevice_t* mig_device) {
  return ns::WithDevice(device, [&](SimState&, DeviceState& d, int dev) -> nvmlReturn_t {
    if (mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const mig::MigGeometry* g = nullptr;
    if (nvmlReturn_t rc = ns::MigGeometry(d, &g); rc != NVML_SUCCESS) return rc;
    unsigned seen = 0;
    for (mig::MigGpuInstanceRecord& gi : d.gpu_instances) {
      if (gi.used == 0) continue;
      for (mig::MigComputeInstanceRecord& ci : gi.compute) {
        if (ci.used == 0 || seen++ != index) continue;
        *mig_device = ns::MigDeviceHandle(d, dev, ns::MigRef{dev, &gi, &ci});
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

GS_NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                                      nvmlDevice_t* device) {
  return ns::WithMig(mig_device, ns::MigDeviceOf,
                     [&](SimState&, DeviceState&, const ns::MigRef& ref) -> nvmlReturn_t {
                       if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
                       *device = &ns::Lib().devices[ref.device];
                       return NVML_SUCCESS;
                     });
}
