// Copies model results (nvml_model.h) into caller-owned NVML arrays, with
// NVML's sizing rules. Pure: no locking, no state. Unit-tested directly.
//
// Sizing rules (NVIDIA's documented behaviour):
//  - running processes: on entry *count is the capacity of `infos`. If it is
//    smaller than the number of processes, *count is set to that number and
//    NVML_ERROR_INSUFFICIENT_SIZE returned (so a call with *count == 0 sizes the
//    array, and succeeds when there is nothing to report). NULL `infos` with a
//    non-zero capacity that would be written to is NVML_ERROR_INVALID_ARGUMENT.
//  - process utilization: no sample newer than lastSeenTimeStamp is
//    NVML_ERROR_NOT_FOUND (with *count = 0); a NULL buffer or a capacity below
//    the number of samples is NVML_ERROR_INSUFFICIENT_SIZE with *count set to
//    the number needed.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "nvml_abi/nvml.h"
#include "sim/nvml/nvml_model.h"

namespace gpuslice::sim::nvml {

// gpuInstanceId / computeInstanceId of a process when MIG is off.
inline constexpr unsigned int kNoInstance = 0xFFFFFFFFu;

// Info is nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t or nvmlProcessInfo_t.
template <typename Info>
nvmlReturn_t FillRunningProcesses(const std::vector<RunningProcess>& procs, unsigned int* count,
                                  Info* infos) {
  static_assert(std::is_same_v<Info, nvmlProcessInfo_v1_t> ||
                std::is_same_v<Info, nvmlProcessInfo_v2_t> ||
                std::is_same_v<Info, nvmlProcessInfo_t>);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto n = static_cast<unsigned int>(procs.size());
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < n; ++i) {
    Info info;
    memset(&info, 0, sizeof info);
    info.pid = static_cast<unsigned int>(procs[i].pid);
    info.usedGpuMemory = procs[i].used_bytes;
    if constexpr (!std::is_same_v<Info, nvmlProcessInfo_v1_t>) {
      info.gpuInstanceId = kNoInstance;
      info.computeInstanceId = kNoInstance;
    }
    infos[i] = info;
  }
  *count = n;
  return NVML_SUCCESS;
}

inline nvmlReturn_t FillProcessSamples(const std::vector<ProcessSample>& samples,
                                       nvmlProcessUtilizationSample_t* out, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto n = static_cast<unsigned int>(samples.size());
  if (n == 0) {
    *count = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  if (out == nullptr || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n; ++i) {
    nvmlProcessUtilizationSample_t s;
    memset(&s, 0, sizeof s);
    s.pid = static_cast<unsigned int>(samples[i].pid);
    s.timeStamp = samples[i].timestamp_us;
    s.smUtil = samples[i].sm_percent;
    s.memUtil = samples[i].mem_percent;
    out[i] = s;
  }
  *count = n;
  return NVML_SUCCESS;
}

}  // namespace gpuslice::sim::nvml
