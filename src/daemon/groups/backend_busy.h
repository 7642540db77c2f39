// BackendBusy: the daemon's control::DeviceBusySource, each GPU's busy
// samples read through its GpuBackend (NVML's device utilization samples).
// GPUs are found by UUID, learnt on first use.
//
// Thread-compatible: used by the group-control thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "control/device_busy.h"
#include "daemon/gpu/backend.h"

namespace gpuslice::daemon {

class BackendBusy final : public control::DeviceBusySource {
 public:
  // REQUIRES: `backend` outlives this.
  explicit BackendBusy(GpuBackend& backend) : backend_(backend) {}

  StatusOr<std::vector<control::DeviceBusySample>> BusySince(std::string_view uuid,
                                                             uint64_t since_us) override;

 private:
  GpuBackend& backend_;
  std::map<std::string, uint32_t, std::less<>> index_;  // by UUID
};

}  // namespace gpuslice::daemon
