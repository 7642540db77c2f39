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
  if (Status s = CheckIndex(backend_, index); !s.ok()) return s;
  auto info = backend_.Read(static_cast<uint32_t>(index));
  if (!info.ok()) return info.status();
  return info->uuid;
}

StatusOr<mps::ComputeMode> MpsGpuControl::GetComputeMode(int index) {
  if (Status s = CheckIndex(backend_, index); !s.ok()) return s;
  auto value = backend_.Get(static_cast<uint32_t>(index), SettingKind::kComputeMode);
  if (!value.ok()) return value.status();
  const auto* mode = std::get_if<ComputeModeSetting>(&*value);
  // GpuBackend::Get answers with a value of the kind asked for (backend.h).
  if (GS_BUG_IF(mode == nullptr, "the backend answered a compute-mode query with another setting"))
    return Internal("the backend answered a compute-mode query with another setting");
  return mode->mode;
}

Status MpsGpuControl::SetComputeMode(int index, mps::ComputeMode mode) {
  if (Status s = CheckIndex(backend_, index); !s.ok()) return s;
  ComputeMode ours;
  switch (mode) {
    case mps::ComputeMode::kDefault:
      ours = ComputeMode::kDefault;
      break;
    case mps::ComputeMode::kProhibited:
      ours = ComputeMode::kProhibited;
      break;
    case mps::ComputeMode::kExclusiveProcess:
      ours = ComputeMode::kExclusiveProcess;
      break;
    default:
      return InvalidArgument("compute mode " + std::to_string(static_cast<int>(mode)) +
                             " is not supported (DEFAULT, PROHIBITED, EXCLUSIVE_PROCESS)");
  }
  return backend_.Set(static_cast<uint32_t>(index), ComputeModeSetting{ours});
}

}  // namespace gpuslice::daemon
