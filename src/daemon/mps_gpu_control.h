// MpsGpuControl: the MPS manager's view of the GPUs (mps::GpuModeControl),
// served by the daemon's GPU backend.
//
// The compute mode is set on the backend directly, not through GpuManager's
// leases: the MPS manager owns that change (it records the previous mode in
// its state file and restores it when the GPU's last tenant leaves), and it
// must outlive a daemon restart, which reverts every lease.
//
// Thread-safe as the backend is.
#pragma once

#include "daemon/gpu/backend.h"
#include "daemon/mps/mps_host.h"

namespace gpuslice::daemon {

class MpsGpuControl final : public mps::GpuModeControl {
 public:
  explicit MpsGpuControl(GpuBackend& backend) : backend_(backend) {}

  StatusOr<int> DeviceCount() override;
  StatusOr<std::string> Uuid(int index) override;
  StatusOr<mps::ComputeMode> GetComputeMode(int index) override;
  Status SetComputeMode(int index, mps::ComputeMode mode) override;

 private:
  GpuBackend& backend_;
};

}  // namespace gpuslice::daemon
