// MpsGpuControl: the MPS manager's view of the GPUs (mps::GpuModeControl):
// identity and compute mode read from the daemon's GPU backend, and the
// exclusive compute mode MPS needs held as a GpuManager lease of holder
// "mps", the one write path of a GPU's settings. The lease is kept across
// gpusliced's stops (GpuManager rule 12), as MPS's control daemons are, so
// no other lease ending (an expiring `/v1/gpus` compute-mode lease) and no
// restart takes the mode from under a running MPS daemon; it ends when the
// GPU's last MPS tenant leaves, and the GPU goes back to the lease below it
// or the mode from before MPS.
//
// Thread-safe as GpuManager is.
#pragma once

#include "daemon/gpu/backend.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/mps/mps_host.h"

namespace gpuslice::daemon {

class MpsGpuControl final : public mps::GpuModeControl {
 public:
  // The lease holder MPS's holds are under.
  static constexpr char kHolder[] = "mps";

  // REQUIRES: both outlive this.
  MpsGpuControl(GpuBackend& backend, GpuManager& manager) : backend_(backend), manager_(manager) {}

  StatusOr<int> DeviceCount() override;
  StatusOr<std::string> Uuid(int index) override;
  StatusOr<ComputeMode> GetComputeMode(int index) override;
  Status CheckComputeModeSettable(int index) override;
  Status HoldComputeMode(int index, ComputeMode mode, ComputeMode baseline) override;
  Status ReleaseComputeMode(int index) override;

 private:
  GpuBackend& backend_;
  GpuManager& manager_;
};

}  // namespace gpuslice::daemon
