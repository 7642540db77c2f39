// NvmlBackend's MIG management: NVML's "MIG Management" calls, as NVIDIA
// documents them. One compute instance per GPU instance is what the daemon
// makes (all of the GPU instance's slices, the shared engine profile); a
// GPU instance made otherwise is listed with its first compute instance.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>

#include "daemon/gpu/nvml_api.h"
#include "daemon/gpu/nvml_backend.h"

namespace gpuslice::daemon {
namespace {

// At most 8 memory slices, so at most 8 placements or instances of a profile.
constexpr unsigned int kMaxMigEntries = 8;

// "MIG 1g.10gb" -> "1g.10gb".
std::string ProfileName(const char* name) {
  std::string s(name);
  if (s.starts_with("MIG ")) s.erase(0, 4);
  return s;
}

}  // namespace

Status NvmlBackend::MigReady(uint32_t index) const {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  const Api& a = *api_;
  bool present = a.nvmlDeviceGetMigMode != nullptr;
#define GS_NVML_MIG_PRESENT(name, args) present = present && a.name != nullptr;
  GS_NVML_MIG_FUNCTIONS(GS_NVML_MIG_PRESENT)
#undef GS_NVML_MIG_PRESENT
  if (!present) return Unimplemented("this NVML has no MIG management (driver too old?)");
  unsigned int current = 0;
  unsigned int pending = 0;
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetMigMode(devices_[index], &current, &pending),
                           "nvmlDeviceGetMigMode", index));
  if (current != NVML_DEVICE_MIG_ENABLE) {
    return FailedPrecondition("GPU " + std::to_string(index) +
                              " is not in MIG mode (the operator enables it: nvidia-smi -i " +
                              std::to_string(index) + " -mig 1)");
  }
  return Status::Ok();
}

StatusOr<std::vector<MigProfile>> NvmlBackend::MigProfiles(uint32_t index) {
  GS_RETURN_IF_ERROR(MigReady(index));
  const Api& a = *api_;
  const nvmlDevice_t d = devices_[index];
  std::vector<MigProfile> out;
  for (unsigned int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = nvmlGpuInstanceProfileInfo_v2;
    const nvmlReturn_t rc = a.nvmlDeviceGetGpuInstanceProfileInfoV(d, p, &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) continue;
    GS_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetGpuInstanceProfileInfoV", index));
    MigProfile m{.id = info.id,
                 .name = ProfileName(info.name),
                 .slices = info.sliceCount,
                 .memory_bytes = info.memorySizeMB << 20,
                 .sm_count = info.multiprocessorCount,
                 .placements = {}};
    std::array<nvmlGpuInstancePlacement_t, kMaxMigEntries> places{};
    unsigned int n = places.size();
    GS_RETURN_IF_ERROR(
        Check(a.nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, info.id, places.data(), &n),
              "nvmlDeviceGetGpuInstancePossiblePlacements_v2", index));
    for (unsigned int i = 0; i < n && i < places.size(); ++i) {
      m.placements.push_back({.start = places[i].start, .size = places[i].size});
    }
    out.push_back(std::move(m));
  }
  std::ranges::sort(out, [](const MigProfile& x, const MigProfile& y) {
    return std::pair(x.slices, x.memory_bytes) < std::pair(y.slices, y.memory_bytes);
  });
  return out;
}

StatusOr<nvmlComputeInstanceProfileInfo_t> NvmlBackend::WholeComputeProfile(nvmlGpuInstance_t gi,
                                                                            uint32_t index) const {
  std::optional<nvmlComputeInstanceProfileInfo_t> best;
  for (unsigned int p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlComputeInstanceProfileInfo_t info{};
    if (api_->nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) != NVML_SUCCESS) {
      continue;  // a size this GPU instance does not offer
    }
    if (!best || info.sliceCount > best->sliceCount) best = info;
  }
  if (!best)
    return Internal("GPU " + std::to_string(index) + ": a GPU instance offers no compute instance");
  return *best;
}

StatusOr<std::vector<MigInstance>> NvmlBackend::MigInstances(uint32_t index) {
  GS_ASSIGN_OR_RETURN(const std::vector<MigProfile> profiles, MigProfiles(index));
  const Api& a = *api_;
  const nvmlDevice_t d = devices_[index];
  // The MIG devices' UUIDs and memory used, by (GPU instance, compute instance).
  struct MigDevice {
    std::string uuid;
    std::optional<uint64_t> used_bytes;
  };
  std::map<std::pair<unsigned int, unsigned int>, MigDevice> mig_devices;
  unsigned int max_devices = 0;
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetMaxMigDeviceCount(d, &max_devices),
                           "nvmlDeviceGetMaxMigDeviceCount", index));
  for (unsigned int i = 0; i < max_devices; ++i) {
    nvmlDevice_t mig = nullptr;
    if (a.nvmlDeviceGetMigDeviceHandleByIndex(d, i, &mig) != NVML_SUCCESS) continue;
    unsigned int gi = 0;
    unsigned int ci = 0;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (a.nvmlDeviceGetGpuInstanceId(mig, &gi) == NVML_SUCCESS &&
        a.nvmlDeviceGetComputeInstanceId(mig, &ci) == NVML_SUCCESS &&
        a.nvmlDeviceGetUUID(mig, uuid, sizeof uuid) == NVML_SUCCESS) {
      MigDevice& m = mig_devices[{gi, ci}];
      m.uuid = uuid;
      if (nvmlMemory_t memory{}; a.nvmlDeviceGetMemoryInfo(mig, &memory) == NVML_SUCCESS) {
        m.used_bytes = memory.used;
      }
    }
  }
  std::vector<MigInstance> out;
  for (const MigProfile& p : profiles) {
    std::array<nvmlGpuInstance_t, kMaxMigEntries> gis{};
    unsigned int n = gis.size();
    GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetGpuInstances(d, p.id, gis.data(), &n),
                             "nvmlDeviceGetGpuInstances", index));
    for (unsigned int i = 0; i < n && i < gis.size(); ++i) {
      nvmlGpuInstanceInfo_t info{};
      GS_RETURN_IF_ERROR(
          Check(a.nvmlGpuInstanceGetInfo(gis[i], &info), "nvmlGpuInstanceGetInfo", index));
      MigInstance m{.gpu_instance_id = info.id,
                    .compute_instance_id = std::nullopt,
                    .profile_id = p.id,
                    .profile = p.name,
                    .placement = {.start = info.placement.start, .size = info.placement.size},
                    .uuid = "",
                    .memory_bytes = p.memory_bytes,
                    .memory_used_bytes = std::nullopt};
      for (unsigned int cp = 0; cp < NVML_COMPUTE_INSTANCE_PROFILE_COUNT && !m.compute_instance_id;
           ++cp) {
        nvmlComputeInstanceProfileInfo_t ci_profile{};
        if (a.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gis[i], cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile) !=
            NVML_SUCCESS) {
          continue;
        }
        std::array<nvmlComputeInstance_t, kMaxMigEntries> cis{};
        unsigned int cn = cis.size();
        if (a.nvmlGpuInstanceGetComputeInstances(gis[i], ci_profile.id, cis.data(), &cn) !=
                NVML_SUCCESS ||
            cn == 0) {
          continue;
        }
        nvmlComputeInstanceInfo_t ci{};
        if (a.nvmlComputeInstanceGetInfo_v2(cis[0], &ci) != NVML_SUCCESS) continue;
        m.compute_instance_id = ci.id;
        if (auto u = mig_devices.find({info.id, ci.id}); u != mig_devices.end()) {
          m.uuid = u->second.uuid;
          m.memory_used_bytes = u->second.used_bytes;
        }
      }
      out.push_back(std::move(m));
    }
  }
  std::ranges::sort(out, {}, &MigInstance::gpu_instance_id);
  return out;
}

StatusOr<MigInstance> NvmlBackend::CreateMigInstance(uint32_t index, uint32_t profile_id,
                                                     MigPlacement placement) {
  GS_RETURN_IF_ERROR(MigReady(index));
  const Api& a = *api_;
  const nvmlDevice_t d = devices_[index];
  const nvmlGpuInstancePlacement_t at{placement.start, placement.size};
  nvmlGpuInstance_t gi = nullptr;
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceCreateGpuInstanceWithPlacement(d, profile_id, &at, &gi),
                           "nvmlDeviceCreateGpuInstanceWithPlacement", index));
  nvmlGpuInstanceInfo_t gi_info{};
  Status made = Check(a.nvmlGpuInstanceGetInfo(gi, &gi_info), "nvmlGpuInstanceGetInfo", index);
  if (made.ok()) {
    auto profile = WholeComputeProfile(gi, index);
    nvmlComputeInstance_t ci = nullptr;
    made = profile.ok() ? Check(a.nvmlGpuInstanceCreateComputeInstance(gi, profile->id, &ci),
                                "nvmlGpuInstanceCreateComputeInstance", index)
                        : profile.status();
  }
  if (!made.ok()) {
    a.nvmlGpuInstanceDestroy(gi);  // nothing half-made is left
    return made;
  }
  GS_ASSIGN_OR_RETURN(const std::vector<MigInstance> all, MigInstances(index));
  for (const MigInstance& m : all) {
    if (m.gpu_instance_id == gi_info.id) return m;
  }
  return Internal("GPU " + std::to_string(index) + ": GPU instance " + std::to_string(gi_info.id) +
                  " was made but is not listed");
}

Status NvmlBackend::DestroyMigInstance(uint32_t index, uint32_t gpu_instance_id) {
  GS_RETURN_IF_ERROR(MigReady(index));
  const Api& a = *api_;
  nvmlGpuInstance_t gi = nullptr;
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetGpuInstanceById(devices_[index], gpu_instance_id, &gi),
                           "nvmlDeviceGetGpuInstanceById", index));
  for (unsigned int cp = 0; cp < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++cp) {
    nvmlComputeInstanceProfileInfo_t info{};
    if (a.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) != NVML_SUCCESS) {
      continue;
    }
    std::array<nvmlComputeInstance_t, kMaxMigEntries> cis{};
    unsigned int n = cis.size();
    if (a.nvmlGpuInstanceGetComputeInstances(gi, info.id, cis.data(), &n) != NVML_SUCCESS) continue;
    for (unsigned int i = 0; i < n && i < cis.size(); ++i) {
      GS_RETURN_IF_ERROR(
          Check(a.nvmlComputeInstanceDestroy(cis[i]), "nvmlComputeInstanceDestroy", index));
    }
  }
  return Check(a.nvmlGpuInstanceDestroy(gi), "nvmlGpuInstanceDestroy", index);
}

}  // namespace gpuslice::daemon
