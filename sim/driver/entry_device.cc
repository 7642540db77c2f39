// Entry points: device enumeration and properties, from the simulation's
// config (sim/core/config.h) so that programs see the device it describes.
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>

#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

int I(uint64_t v) { return v > INT_MAX ? INT_MAX : static_cast<int>(v); }

// Attribute values of the simulated device: the config's numbers where it has
// them, else those of the device class it models (Hopper-like defaults).
// NOT_FOUND for an attribute this driver does not know (INVALID_VALUE then).
bool Attribute(int dev, CUdevice_attribute attrib, int* out) {
  const DeviceInfo& info = GpuInfo(dev);
  const uint32_t blocks_per_sm = info.max_blocks_per_sm;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *out = I(info.max_threads_per_block);
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *out = 64;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *out = INT_MAX;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *out = 65535;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *out = 49152;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *out = 232448;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *out = 233472;
      return true;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      *out = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *out = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *out = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *out = INT_MAX;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *out = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *out = I(uint64_t{info.max_sm_clock_mhz} * 1000);
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *out = I(uint64_t{info.max_mem_clock_mhz} * 1000);
      return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *out = I(info.memory_bus_width);
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *out = 512;
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *out = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *out = I(Visible(dev).sm_count);  // a MIG device's own
      return true;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:  // 0 here; 1 for an MPS client (cuDeviceGetAttribute)
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      *out = D().gpu->WithState(
          [&](SimState& s) { return I(s.devices[Visible(dev).device].compute_mode); });
      return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *out = I(info.pci_bus);
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *out = I(info.pci_device);
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *out = I(info.pci_domain);
      return true;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *out = 50 << 20;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      *out = 32 << 20;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *out = I(info.max_threads_per_sm);
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *out = I(blocks_per_sm);
      return true;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *out = 3;
      return true;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *out = I(info.cc_major);
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *out = I(info.cc_minor);
      return true;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
      *out = dev;
      return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      *out = 2;
      return true;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      *out = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      *out = info.cc_major >= 9 ? 1 : 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      *out = 4;
      return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      *out = -1;
      return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
      *out = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      *out = 131072;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      *out = 16384;
      return true;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      *out = 512;
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

GS_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = VisibleCount();
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = CheckDevice(ordinal); rc != CUDA_SUCCESS) return rc;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, static_cast<size_t>(len), "%s", Visible(dev).name.c_str());
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (a MIG device's "MIG-..."):
  // 32 hex digits after the prefix.
  const char* text = Visible(dev).uuid.c_str();
  if (strncmp(text, "GPU-", 4) == 0 || strncmp(text, "MIG-", 4) == 0) text += 4;
  int n = 0;
  int high = -1;
  for (const char* p = text; *p != '\0' && n < 16; ++p) {
    if (*p == '-') continue;
    if (!isxdigit(static_cast<unsigned char>(*p))) break;
    const int digit = isdigit(static_cast<unsigned char>(*p)) ? *p - '0' : (tolower(*p) - 'a' + 10);
    if (high < 0) {
      high = digit;
    } else {
      uuid->bytes[n++] = static_cast<char>(high << 4 | digit);
      high = -1;
    }
  }
  return n == 16 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

GS_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = Visible(dev).total_bytes;  // a MIG device's: its GPU instance's
  return CUDA_SUCCESS;
}

// The 32-bit form: the total, saturated to what an unsigned int holds.
GS_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  if (CUresult rc = cuDeviceTotalMem_v2(&total, dev); rc != CUDA_SUCCESS) return rc;
  *bytes = total > UINT_MAX ? UINT_MAX : static_cast<unsigned int>(total);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo& info = GpuInfo(dev);
  snprintf(id, static_cast<size_t>(len), "%04X:%02X:%02X.0", info.pci_domain, info.pci_bus,
           info.pci_device);
  return CUDA_SUCCESS;
}

// Accepts "[domain:]bus:device.function" in hex, any case, as the driver does.
GS_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int consumed = 0;
  if (sscanf(pciBusId, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &consumed) != 4 ||
      pciBusId[consumed] != '\0') {
    domain = 0;
    consumed = 0;
    if (sscanf(pciBusId, "%x:%x.%x%n", &bus, &device, &function, &consumed) != 3 ||
        pciBusId[consumed] != '\0') {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (int i = 0; i < VisibleCount(); ++i) {
    const DeviceInfo& info = GpuInfo(i);
    if (info.pci_domain == domain && info.pci_bus == bus && info.pci_device == device &&
        function == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

GS_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *major = I(GpuInfo(dev).cc_major);
  *minor = I(GpuInfo(dev).cc_minor);
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int v = 0;
  if (!Attribute(dev, attrib, &v)) {
    // Known to the toolkit but not modelled: 0, as a device without the feature.
    if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    v = 0;
  }
  if (attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ||
      attrib == CU_DEVICE_ATTRIBUTE_MPS_ENABLED) {
    // An MPS client sees the SMs its active thread percentage gives it; the
    // real driver connects at initialisation, this one at the first question.
    uint32_t percent = D().mps_thread_percent[dev].load(std::memory_order_relaxed);
    uint32_t partition_sms = D().mps_sm_count[dev].load(std::memory_order_relaxed);
    if (percent == 0) {
      MpsAttachment mps;
      bool is_client = false;
      if (ConnectMps(dev, &mps, &is_client) == CUDA_SUCCESS && is_client) {
        percent = mps.thread_percent;
        partition_sms = mps.sm_count;
      }
    }
    if (percent > 0) {
      // In a static SM partition, exactly its SMs.
      v = attrib == CU_DEVICE_ATTRIBUTE_MPS_ENABLED ? 1
          : partition_sms > 0                       ? I(partition_sms)
                                                    : I(MpsSmCount(Visible(dev).sm_count, percent));
    }
  }
  *value = v;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo& info = GpuInfo(dev);
  *prop = CUdevprop{};
  prop->maxThreadsPerBlock = I(info.max_threads_per_block);
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = I(info.max_threads_per_block);
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = INT_MAX;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->sharedMemPerBlock = 49152;
  prop->totalConstantMemory = 65536;
  prop->SIMDWidth = 32;
  prop->memPitch = INT_MAX;
  prop->regsPerBlock = 65536;
  prop->clockRate = I(uint64_t{info.max_sm_clock_mhz} * 1000);
  prop->textureAlign = 512;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (CUresult rc = CheckDevice(dev); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = CheckDevice(peerDev); rc != CUDA_SUCCESS) return rc;
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *canAccessPeer = 0;  // no peer links are simulated
  return CUDA_SUCCESS;
}
