#include "daemon/mps_gpu_control.h"

#include <string>
#include <variant>

#include "common/assert.h"

namespace gpuslice::daemon {
namespace {

Status CheckIndex(GpuBackend& backend, int index) {
  if (index < 0 || static_cast<uint32_t>(index) >= backend.DeviceCount()) {
    return NotFound("no GPU " + std::to_string(index));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int> MpsGpuControl::DeviceCount() { return static_cast<int>(backend_.DeviceCount()); }

StatusOr<std::string> MpsGpuControl::Uuid(int index) {
  GS_RETURN_IF_ERROR(CheckIndex(backend_, index));
  auto info = backend_.Read(static_cast<uint32_t>(index));
  if (!info.ok()) return info.status();
  return info->uuid;
}

StatusOr<ComputeMode> MpsGpuControl::GetComputeMode(int index) {
  GS_RETURN_IF_ERROR(CheckIndex(backend_, index));
  auto value = backend_.Get(static_cast<uint32_t>(index), SettingKind::kComputeMode);
  if (!value.ok()) return value.status();
  const auto* mode = std::get_if<ComputeModeSetting>(&*value);
  // GpuBackend::Get answers with a value of the kind asked for (backend.h).
  if (GS_BUG_IF(mode == nullptr, "the backend answered a compute-mode query with another setting"))
    return Internal("the backend answered a compute-mode query with another setting");
  return mode->mode;
}

Status MpsGpuControl::CheckComputeModeSettable(int index) {
  GS_RETURN_IF_ERROR(CheckIndex(backend_, index));
  return manager_.CheckSettable(static_cast<uint32_t>(index), SettingKind::kComputeMode);
}

Status MpsGpuControl::HoldComputeMode(int index, ComputeMode mode, ComputeMode baseline) {
  GS_RETURN_IF_ERROR(CheckIndex(backend_, index));
  return manager_.HoldComputeMode(static_cast<uint32_t>(index), mode, kHolder, baseline);
}

Status MpsGpuControl::ReleaseComputeMode(int index) {
  GS_RETURN_IF_ERROR(CheckIndex(backend_, index));
  Status s = manager_.ReleaseComputeMode(static_cast<uint32_t>(index), kHolder);
  return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
}

}  // namespace gpuslice::daemon
