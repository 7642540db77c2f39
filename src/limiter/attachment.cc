#include "limiter/attachment.h"

#include <cerrno>
#include <cstdlib>

#include "common/quantity.h"
#include "gpuslice/paths.h"

namespace gpuslice::limiter {
namespace {

bool RegistrationDisabled(const EnvLookup& env) {
  const char* v = env(kEnvRegister);
  if (v == nullptr) return false;
  const std::string_view s(v);
  return s == "0" || s == "false" || s == "off" || s == "no";
}

StatusOr<std::chrono::milliseconds> RegisterWait(const char* v) {
  char* end = nullptr;
  errno = 0;
  const long long ms = strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || ms < 0 || ms > kMaxFirstAnswerWait.count()) {
    return InvalidArgument(std::string(kEnvRegisterWaitMs) + ": '" + std::string(v).substr(0, 64) +
                           "' is not a number of milliseconds from 0 to " +
                           std::to_string(kMaxFirstAnswerWait.count()));
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace

std::string FormatUuid(const CUuuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    const auto b = static_cast<unsigned char>(uuid.bytes[i]);
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

CUresult CudaDevices(const real::CudaTable& cu, std::vector<DriverDevice>* out) {
  if (cu.cuDeviceGetCount == nullptr || cu.cuDeviceGetUuid_v2 == nullptr) {
    return cu.loaded ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  }
  int count = 0;
  if (CUresult rc = cu.cuDeviceGetCount(&count); rc != CUDA_SUCCESS) return rc;
  std::vector<DriverDevice> devices;
  for (int i = 0; i < count; ++i) {
    CUuuid uuid{};
    if (CUresult rc = cu.cuDeviceGetUuid_v2(&uuid, i); rc != CUDA_SUCCESS) return rc;
    devices.emplace_back(i, FormatUuid(uuid));
  }
  *out = std::move(devices);
  return CUDA_SUCCESS;
}

bool NvmlDevices(const real::NvmlTable& nv, std::vector<DriverDevice>* out) {
  if (nv.nvmlDeviceGetCount_v2 == nullptr || nv.nvmlDeviceGetHandleByIndex_v2 == nullptr ||
      nv.nvmlDeviceGetUUID == nullptr) {
    return false;
  }
  unsigned count = 0;
  if (nv.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) return false;
  std::vector<DriverDevice> devices;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    char uuid[96] = {};
    if (nv.nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS ||
        nv.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != NVML_SUCCESS) {
      return false;
    }
    devices.emplace_back(static_cast<int>(i), uuid);
  }
  *out = std::move(devices);
  return true;
}

StatusOr<AttachSettings> ReadAttachSettings(const EnvLookup& env,
                                            const std::vector<DriverDevice>& devices,
                                            std::string_view cgroup_text, int pid,
                                            int32_t outermost_pid) {
  std::vector<DeviceId> ids;
  ids.reserve(devices.size());
  for (const auto& [index, uuid] : devices) ids.push_back(DeviceId{index, uuid});
  AttachSettings s;
  GS_ASSIGN_OR_RETURN(s.config, ParseLimitConfig(env, ids, cgroup_text, pid));
  GS_ASSIGN_OR_RETURN(s.daemon, DaemonAddressFromEnv(env));
  if (const char* v = env(kEnvContextBytes); v != nullptr) {
    auto bytes = ParseBytes(v);
    if (!bytes.ok()) return bytes.status().WithContext(std::string(kEnvContextBytes));
    s.context.estimate_bytes = *bytes;
    s.context.fixed = true;
  }
  if (const char* v = env(kEnvRegisterWaitMs); v != nullptr) {
    GS_ASSIGN_OR_RETURN(s.registration_wait, RegisterWait(v));
  }
  const char* dir = env(kEnvShmDir);
  s.shm_dir = dir != nullptr && *dir != '\0' ? dir : kDefaultGroupSegmentDir;
  if (!RegistrationDisabled(env)) {
    RegistrationRequest r;
    r.group = s.config.group;
    for (const auto& [index, uuid] : devices) r.devices.push_back(uuid);
    r.limits = s.config.devices;
    r.schedule = s.config.schedule;
    if (s.daemon.tcp()) r.pid = outermost_pid;  // a Unix socket's peer credentials say it there
    for (auto [name, field] :
         {std::pair{"POD_NAME", &r.pod_name}, std::pair{"POD_NAMESPACE", &r.pod_namespace},
          std::pair{"CONTAINER_NAME", &r.container_name}}) {
      if (const char* v = env(name); v != nullptr) *field = v;
    }
    s.registration = std::move(r);
  }
  return s;
}

StatusOr<Attachment> AttachToGroup(const AttachSettings& settings,
                                   const std::vector<DriverDevice>& devices) {
  auto segment = GroupSegment::Open(settings.shm_dir, settings.config.group, /*create=*/true);
  if (!segment.ok()) {
    // Without a segment limits cannot be shared, and so cannot be honoured.
    return segment.status().WithContext("group '" + settings.config.group + "'");
  }
  Attachment a{.segment = std::move(segment).value(),
               .ordinal_to_device = std::vector<int>(devices.size(), -1)};
  for (size_t i = 0; i < devices.size(); ++i) {
    GS_ASSIGN_OR_RETURN(const int d, a.segment->AttachDevice(devices[i].second));
    a.ordinal_to_device[i] = d;
    const DeviceLimits& limits = settings.config.devices[i];
    if (limits.memory_bytes) a.segment->LowerMemoryLimit(d, *limits.memory_bytes);
    if (limits.compute_percent) a.segment->LowerComputeLimit(d, *limits.compute_percent);
  }
  a.segment->ReapDead();  // members that left since the last one looked
  return a;
}

}  // namespace gpuslice::limiter
