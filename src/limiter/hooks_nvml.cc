// The NVML hooks (shims/nvml_hooks.inc): inside a group, NVML shows the
// group's slice, so nvidia-smi in a container prints `used / limit`:
//  - memory info: total = the group's limit, used = the group's usage,
//    free = the rest (never more than the device really has free);
//  - running-process lists and per-process utilization samples: only the
//    group's own processes.
// Devices without a limit, and processes that cannot attach, see NVML as is.
#include <algorithm>
#include <vector>

#include "limiter/hooks.h"
#include "limiter/process_state.h"
#include "limiter/real/real_driver.h"

namespace gpuslice::limiter::hooks {
namespace {

using real::CallNvml;

// NVML's `name` (the state's table) called with the arguments.
#define GS_REAL_NVML(name, ...) \
  CallNvml(l.nvml(), &real::NvmlTable::name, [&](auto fn) { return fn(__VA_ARGS__); })

// The group device `device` stands for, or -1 outside a group.
int GroupDeviceOf(ProcessState& l, nvmlDevice_t device) {
  if (!l.EnsureAttachedForNvml()) return -1;
  const auto get_uuid = l.nvml().nvmlDeviceGetUUID;
  if (get_uuid == nullptr) return -1;
  char uuid[96] = {};
  if (get_uuid(device, uuid, sizeof uuid) != NVML_SUCCESS) return -1;
  return l.GroupDeviceByUuid(uuid);
}

// Fills total/used/free with the group's view. False if the device has no limit.
bool GroupMemory(ProcessState& l, nvmlDevice_t device, unsigned long long* total,
                 unsigned long long* used, unsigned long long* free) {
  const int d = GroupDeviceOf(l, device);
  if (!l.HasMemoryLimit(d)) return false;
  const unsigned long long limit = std::min<unsigned long long>(l.MemoryLimit(d), *total);
  const unsigned long long group_used = l.MemoryUsed(d);
  *total = limit;
  *used = std::min(group_used, limit);
  *free = std::min<unsigned long long>(*free, limit - *used);
  return true;
}

// Calls a running-process query and keeps the group's processes. Keeps the
// NVML size protocol: with too small a buffer, NVML_ERROR_INSUFFICIENT_SIZE
// and the count needed.
template <typename Info, typename Query>
nvmlReturn_t FilteredProcesses(ProcessState& l, nvmlDevice_t device, unsigned int* count,
                               Info* infos, Query query) {
  if (count == nullptr) return query(device, count, infos);
  if (!l.EnsureAttachedForNvml()) return query(device, count, infos);
  std::vector<Info> all(64);
  nvmlReturn_t rc;
  for (;;) {
    auto n = static_cast<unsigned>(all.size());
    rc = query(device, &n, all.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && n > all.size() && n < (1u << 20)) {
      all.resize(n);
      continue;
    }
    all.resize(rc == NVML_SUCCESS ? n : 0);
    break;
  }
  if (rc != NVML_SUCCESS) return rc;
  std::erase_if(all, [&](const Info& p) { return !l.IsGroupMember(p.pid); });
  const unsigned capacity = *count;
  *count = static_cast<unsigned>(all.size());
  if (capacity < all.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  if (infos != nullptr) std::copy(all.begin(), all.end(), infos);
  return NVML_SUCCESS;
}

}  // namespace

nvmlReturn_t nvmlDeviceGetMemoryInfo(ProcessState& l, nvmlDevice_t device,
                                     nvmlMemory_t* memory) noexcept {
  const nvmlReturn_t rc = GS_REAL_NVML(nvmlDeviceGetMemoryInfo, device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr) {
    GroupMemory(l, device, &memory->total, &memory->used, &memory->free);
  }
  return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(ProcessState& l, nvmlDevice_t device,
                                        nvmlMemory_v2_t* memory) noexcept {
  const nvmlReturn_t rc = GS_REAL_NVML(nvmlDeviceGetMemoryInfo_v2, device, memory);
  if (rc == NVML_SUCCESS && memory != nullptr) {
    if (GroupMemory(l, device, &memory->total, &memory->used, &memory->free)) memory->reserved = 0;
  }
  return rc;
}

// NOLINTBEGIN(bugprone-macro-parentheses): `Info` is a type.
#define GS_FILTERED(name, Info)                                                                  \
  nvmlReturn_t name(ProcessState& l, nvmlDevice_t device, unsigned int* infoCount,               \
                    Info* infos) noexcept {                                                      \
    return FilteredProcesses(                                                                    \
        l, device, infoCount, infos,                                                             \
        [&l](nvmlDevice_t d, unsigned int* n, Info* i) { return GS_REAL_NVML(name, d, n, i); }); \
  }
GS_FILTERED(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
GS_FILTERED(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_FILTERED(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
GS_FILTERED(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
GS_FILTERED(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_FILTERED(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
GS_FILTERED(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
GS_FILTERED(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_FILTERED(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)
#undef GS_FILTERED
// NOLINTEND(bugprone-macro-parentheses)

nvmlReturn_t nvmlDeviceGetProcessUtilization(ProcessState& l, nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) noexcept {
  const nvmlReturn_t rc = GS_REAL_NVML(nvmlDeviceGetProcessUtilization, device, utilization,
                                       processSamplesCount, lastSeenTimeStamp);
  // A size query (no buffer) answers with an upper bound: left as is.
  if (rc != NVML_SUCCESS || utilization == nullptr || processSamplesCount == nullptr) return rc;
  if (!l.EnsureAttachedForNvml()) return rc;
  nvmlProcessUtilizationSample_t* end = std::remove_if(
      utilization, utilization + *processSamplesCount,
      [&](const nvmlProcessUtilizationSample_t& s) { return !l.IsGroupMember(s.pid); });
  *processSamplesCount = static_cast<unsigned>(end - utilization);
  // NVML says NOT_FOUND when no sample is newer than lastSeenTimeStamp.
  return *processSamplesCount == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

}  // namespace gpuslice::limiter::hooks
