// BackendUtilization: the daemon's control::UtilizationSource. It reads
// NVML's per-process samples through the GpuBackend, at most once per
// `refresh_ns` per GPU however many groups ask, and answers each group from
// what it keeps (the last `keep_ns` of samples). NVML's pids are the host's,
// as the registry's are.
//
// Thread-compatible: used by the group-control thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "common/clock.h"
#include "control/utilization_source.h"
#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

class BackendUtilization final : public control::UtilizationSource {
 public:
  // REQUIRES: `backend` and `clock` (CLOCK_REALTIME based, the samples' time
  // base) outlive this.
  BackendUtilization(GpuBackend& backend, const Clock& clock, int64_t refresh_ns = 50'000'000,
                     int64_t keep_ns = 10'000'000'000);

  StatusOr<std::vector<control::UtilizationSample>> SamplesSince(std::string_view uuid,
                                                                 uint64_t since_us) override;

 private:
  struct Gpu {
    uint32_t index = 0;
    int64_t fetched_ns = 0;  // clock time of the last read; 0: never
    uint64_t newest_us = 0;  // newest sample kept
    std::deque<control::UtilizationSample> samples;
  };
  // The GPU with `uuid`, learning the UUIDs on first use.
  Gpu* Find(std::string_view uuid);

  GpuBackend& backend_;
  const Clock& clock_;
  const int64_t refresh_ns_;
  const int64_t keep_ns_;
  std::map<std::string, Gpu, std::less<>> gpus_;
};

}  // namespace gpuslice::daemon
