#include "daemon/gpu/nvml_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "daemon/gpu/nvml_api.h"
#include "nvml_abi/sample_value.h"

namespace gpuslice::daemon {

int DriverMajor(std::string_view version) {
  int major = 0;
  size_t i = 0;
  for (; i < version.size() && version[i] >= '0' && version[i] <= '9' && major < 100000; ++i) {
    major = major * 10 + (version[i] - '0');
  }
  return i == 0 ? 0 : major;
}

namespace {

StatusCode CodeOf(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_ERROR_NO_PERMISSION:
      return StatusCode::kPermissionDenied;
    case NVML_ERROR_INVALID_ARGUMENT:
      return StatusCode::kInvalidArgument;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_IN_USE:
      return StatusCode::kFailedPrecondition;
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return StatusCode::kResourceExhausted;
    case NVML_ERROR_NOT_FOUND:
      return StatusCode::kNotFound;
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return StatusCode::kUnimplemented;
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

StatusOr<std::unique_ptr<NvmlBackend>> NvmlBackend::Open(const char* library) {
  std::unique_ptr<NvmlBackend> b(new NvmlBackend);
  b->handle_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (b->handle_ == nullptr) {
    const char* err = dlerror();
    return Unavailable(std::string("cannot load ") + library + ": " +
                       (err != nullptr ? err : "unknown error"));
  }
  b->api_ = std::make_unique<Api>();
  // NOLINTBEGIN(bugprone-macro-parentheses): `name` is a declarator and a symbol name.
#define GS_NVML_RESOLVE(name, args)                                                            \
  b->api_->name = reinterpret_cast<decltype(&::name)>(dlsym(b->handle_, #name));               \
  if (b->api_->name == nullptr) {                                                              \
    return Unavailable(std::string(library) + " does not export " #name " (driver too old?)"); \
  }
  GS_NVML_FUNCTIONS(GS_NVML_RESOLVE)
#undef GS_NVML_RESOLVE
#define GS_NVML_RESOLVE_OPTIONAL(name, args) \
  b->api_->name = reinterpret_cast<decltype(&::name)>(dlsym(b->handle_, #name));
  GS_NVML_OPTIONAL_FUNCTIONS(GS_NVML_RESOLVE_OPTIONAL)
#undef GS_NVML_RESOLVE_OPTIONAL
  // NOLINTEND(bugprone-macro-parentheses)
  nvmlReturn_t rc = b->api_->nvmlInit_v2();
  if (rc != NVML_SUCCESS) {
    b->api_->nvmlShutdown = nullptr;  // nothing to shut down
    return Unavailable(std::string("nvmlInit failed: ") + b->api_->nvmlErrorString(rc));
  }
  unsigned int count = 0;
  GS_RETURN_IF_ERROR(b->Check(b->api_->nvmlDeviceGetCount_v2(&count), "nvmlDeviceGetCount", 0));
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    GS_RETURN_IF_ERROR(
        b->Check(b->api_->nvmlDeviceGetHandleByIndex_v2(i, &d), "nvmlDeviceGetHandleByIndex", i));
    b->devices_.push_back(d);
  }
  if (char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
      b->api_->nvmlSystemGetDriverVersion != nullptr &&
      b->api_->nvmlSystemGetDriverVersion(v, sizeof v) == NVML_SUCCESS) {
    b->driver_version_ = v;
  }
  {
    MutexLock lock(b->mu_);  // not shared yet; taken for the analysis
    b->locked_gpu_.resize(count);
    b->locked_mem_.resize(count);
  }
  b->WatchXids();
  return b;
}

// The XID events of an NVML event set (xid_watch.h): registered for
// nvmlEventTypeXidCriticalError on every GPU that supports it.
class NvmlBackend::XidSource final : public XidWatch::Source {
 public:
  XidSource(const Api& api, nvmlEventSet_t set, std::vector<nvmlDevice_t> devices)
      : api_(api), set_(set), devices_(std::move(devices)) {}
  ~XidSource() override { api_.nvmlEventSetFree(set_); }
  XidSource(const XidSource&) = delete;
  XidSource& operator=(const XidSource&) = delete;

  StatusOr<std::optional<XidWatch::Event>> Wait(std::chrono::milliseconds timeout) override {
    nvmlEventData_t data{};
    const nvmlReturn_t rc =
        api_.nvmlEventSetWait_v2(set_, &data, static_cast<unsigned int>(timeout.count()));
    if (rc == NVML_ERROR_TIMEOUT) return std::optional<XidWatch::Event>();
    if (rc != NVML_SUCCESS) {
      return Unavailable(std::string("nvmlEventSetWait: ") + api_.nvmlErrorString(rc));
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) {
      return std::optional<XidWatch::Event>();
    }
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i] == data.device) {
        return std::optional(XidWatch::Event{static_cast<uint32_t>(i), data.eventData});
      }
    }
    return std::optional<XidWatch::Event>();  // a device we did not register
  }

 private:
  const Api& api_;
  nvmlEventSet_t set_;
  const std::vector<nvmlDevice_t> devices_;
};

void NvmlBackend::WatchXids() {
  const Api& a = *api_;
  if (a.nvmlEventSetCreate == nullptr || a.nvmlEventSetFree == nullptr ||
      a.nvmlDeviceGetSupportedEventTypes == nullptr || a.nvmlDeviceRegisterEvents == nullptr ||
      a.nvmlEventSetWait_v2 == nullptr) {
    GS_LOG(kWarn, "gpu", "event=xid_watch_unavailable why=\"NVML has no event sets\"");
    return;
  }
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t rc = a.nvmlEventSetCreate(&set); rc != NVML_SUCCESS) {
    GS_LOG(kWarn, "gpu", "event=xid_watch_unavailable why=\"nvmlEventSetCreate: %s\"",
           a.nvmlErrorString(rc));
    return;
  }
  int registered = 0;
  for (size_t i = 0; i < devices_.size(); ++i) {
    unsigned long long supported = 0;  // NOLINT(google-runtime-int): NVML's type
    nvmlReturn_t rc = a.nvmlDeviceGetSupportedEventTypes(devices_[i], &supported);
    if (rc == NVML_SUCCESS && (supported & nvmlEventTypeXidCriticalError) != 0) {
      rc = a.nvmlDeviceRegisterEvents(devices_[i], nvmlEventTypeXidCriticalError, set);
    } else if (rc == NVML_SUCCESS) {
      rc = NVML_ERROR_NOT_SUPPORTED;
    }
    if (rc == NVML_SUCCESS) {
      ++registered;
    } else {
      GS_LOG(kWarn, "gpu", "event=xid_watch_unavailable gpu=%zu why=\"%s\"", i,
             a.nvmlErrorString(rc));
    }
  }
  auto source = std::make_unique<XidSource>(a, set, devices_);
  if (registered == 0) return;  // the source frees the set
  xids_ = std::make_unique<XidWatch>(std::move(source));
  xids_->Start();
}

NvmlBackend::~NvmlBackend() {
  xids_.reset();  // its thread waits on NVML: ended before the shutdown
  if (api_ != nullptr && api_->nvmlShutdown != nullptr) api_->nvmlShutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

Status NvmlBackend::Check(nvmlReturn_t rc, const char* what, uint32_t index) const {
  if (rc == NVML_SUCCESS) return Status::Ok();
  return {CodeOf(rc), std::string(what) + " on GPU " + std::to_string(index) + ": " +
                          api_->nvmlErrorString(rc)};
}

uint32_t NvmlBackend::DeviceCount() const { return static_cast<uint32_t>(devices_.size()); }

StatusOr<GpuFacts> NvmlBackend::Facts(uint32_t index) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  if (api_->nvmlDeviceGetCudaComputeCapability == nullptr ||
      api_->nvmlSystemGetDriverVersion == nullptr) {
    return Unimplemented("this NVML has no compute capability or driver version query");
  }
  GpuFacts f;
  int major = 0;
  int minor = 0;
  GS_RETURN_IF_ERROR(
      Check(api_->nvmlDeviceGetCudaComputeCapability(devices_[index], &major, &minor),
            "nvmlDeviceGetCudaComputeCapability", index));
  f.compute_capability = std::to_string(major) + "." + std::to_string(minor);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  GS_RETURN_IF_ERROR(Check(api_->nvmlSystemGetDriverVersion(version, sizeof version),
                           "nvmlSystemGetDriverVersion", index));
  f.driver_version = version;
  return f;
}

StatusOr<GpuInfo> NvmlBackend::Read(uint32_t index) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  const nvmlDevice_t d = devices_[index];
  const Api& a = *api_;
  GpuInfo g;
  g.index = index;
  if (xids_ != nullptr) {
    const XidState x = xids_->Of(index);
    g.xid_errors = x.errors;
    g.last_xid = x.last;
    g.critical_xid = x.critical;
  }
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetUUID(d, buf, sizeof buf), "nvmlDeviceGetUUID", index));
  g.uuid = buf;
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetName(d, buf, sizeof buf), "nvmlDeviceGetName", index));
  g.name = buf;
  nvmlMemory_t mem{};
  GS_RETURN_IF_ERROR(Check(a.nvmlDeviceGetMemoryInfo(d, &mem), "nvmlDeviceGetMemoryInfo", index));
  g.memory_total_bytes = mem.total;
  g.memory_used_bytes = mem.used;
  g.memory_free_bytes = mem.free;
  // Optional readings: a GPU that does not support one reports 0.
  if (nvmlUtilization_t u{}; a.nvmlDeviceGetUtilizationRates(d, &u) == NVML_SUCCESS) {
    g.utilization_gpu_percent = u.gpu;
    g.utilization_memory_percent = u.memory;
  }
  unsigned int v = 0;
  if (a.nvmlDeviceGetPowerUsage(d, &v) == NVML_SUCCESS) g.power_draw_mw = v;
  if (a.nvmlDeviceGetPowerManagementLimit(d, &v) == NVML_SUCCESS) g.power_limit_mw = v;
  if (a.nvmlDeviceGetPowerManagementDefaultLimit(d, &v) == NVML_SUCCESS) g.power_default_mw = v;
  unsigned int lo = 0;
  unsigned int hi = 0;
  if (a.nvmlDeviceGetPowerManagementLimitConstraints(d, &lo, &hi) == NVML_SUCCESS) {
    g.power_min_mw = lo;
    g.power_max_mw = hi;
  }
  if (unsigned long long e = 0; a.nvmlDeviceGetTotalEnergyConsumption(d, &e) == NVML_SUCCESS) {
    g.energy_mj = e;
  }
  if (a.nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &v) == NVML_SUCCESS) g.sm_clock_mhz = v;
  if (a.nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &v) == NVML_SUCCESS) g.memory_clock_mhz = v;
  if (a.nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &v) == NVML_SUCCESS) g.max_sm_clock_mhz = v;
  if (a.nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_MEM, &v) == NVML_SUCCESS) {
    g.max_memory_clock_mhz = v;
  }
  if (a.nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) g.temperature_c = v;
  if (nvmlEnableState_t p{}; a.nvmlDeviceGetPersistenceMode(d, &p) == NVML_SUCCESS) {
    g.persistence = p == NVML_FEATURE_ENABLED;
  }
  if (nvmlComputeMode_t m{}; a.nvmlDeviceGetComputeMode(d, &m) == NVML_SUCCESS) {
    g.compute_mode = static_cast<ComputeMode>(m);
  }
  g.features.driver_version = driver_version_;
  if (unsigned int current = 0, pending = 0;
      a.nvmlDeviceGetMigMode != nullptr &&
      a.nvmlDeviceGetMigMode(d, &current, &pending) == NVML_SUCCESS) {
    g.features.mig = current == NVML_DEVICE_MIG_ENABLE;
  }
  // An r615 library exports the setter; the simulated one (one binary for
  // every driver version) exports it always, so the version decides too.
  g.features.memory_limits_api =
      a.nvmlDeviceSetMemoryLimits_v1 != nullptr && DriverMajor(driver_version_) >= 615;
  MutexLock lock(mu_);
  g.locked_gpu_clocks = locked_gpu_[index];
  g.locked_memory_clocks = locked_mem_[index];
  return g;
}

Status NvmlBackend::SetMemoryLimits(uint32_t index, const std::string& cgroup, uint64_t soft_bytes,
                                    uint64_t hard_bytes) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  if (api_->nvmlDeviceSetMemoryLimits_v1 == nullptr) {
    return {StatusCode::kUnimplemented,
            "the NVML library has no nvmlDeviceSetMemoryLimits_v1 (driver before r615)"};
  }
  nvmlSetMemoryLimits_v1_t limits{cgroup.c_str(), soft_bytes, hard_bytes};
  return Check(api_->nvmlDeviceSetMemoryLimits_v1(devices_[index], &limits),
               "nvmlDeviceSetMemoryLimits_v1", index);
}

StatusOr<std::vector<GpuProcess>> NvmlBackend::Processes(uint32_t index) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  std::vector<nvmlProcessInfo_t> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto n = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t rc =
        api_->nvmlDeviceGetComputeRunningProcesses_v3(devices_[index], &n, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {  // processes started meanwhile: grow and ask again
      infos.resize(n + 16);
      continue;
    }
    GS_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetComputeRunningProcesses_v3", index));
    std::vector<GpuProcess> out;
    out.reserve(n);
    for (unsigned int i = 0; i < n; ++i) {
      GpuProcess p{.pid = infos[i].pid, .used_memory_bytes = std::nullopt};
      if (infos[i].usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
        p.used_memory_bytes = infos[i].usedGpuMemory;
      }
      out.push_back(p);
    }
    return out;
  }
  return Unavailable("nvmlDeviceGetComputeRunningProcesses_v3 on GPU " + std::to_string(index) +
                     ": the process list kept growing");
}

StatusOr<std::vector<ProcessUtilization>> NvmlBackend::ProcessUtilizationSince(uint32_t index,
                                                                               uint64_t since_us) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  std::vector<nvmlProcessUtilizationSample_t> samples(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto n = static_cast<unsigned int>(samples.size());
    const nvmlReturn_t rc =
        api_->nvmlDeviceGetProcessUtilization(devices_[index], samples.data(), &n, since_us);
    if (rc == NVML_ERROR_NOT_FOUND) return std::vector<ProcessUtilization>{};  // nothing newer
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      samples.resize(n + 16);
      continue;
    }
    GS_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetProcessUtilization", index));
    std::vector<ProcessUtilization> out;
    out.reserve(n);
    for (unsigned int i = 0; i < n; ++i) {
      out.push_back({samples[i].pid, samples[i].timeStamp, samples[i].smUtil});
    }
    return out;
  }
  return Unavailable("nvmlDeviceGetProcessUtilization on GPU " + std::to_string(index) +
                     ": the sample list kept growing");
}

StatusOr<std::vector<BusySample>> NvmlBackend::BusySince(uint32_t index, uint64_t since_us) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  if (api_->nvmlDeviceGetSamples == nullptr) {
    return Unimplemented("this driver's NVML has no nvmlDeviceGetSamples");
  }
  nvmlValueType_t type{};
  unsigned int n = 0;
  nvmlReturn_t rc = api_->nvmlDeviceGetSamples(devices_[index], NVML_GPU_UTILIZATION_SAMPLES,
                                               since_us, &type, &n, nullptr);
  if (rc == NVML_ERROR_NOT_FOUND) return std::vector<BusySample>{};  // nothing newer
  GS_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetSamples", index));
  std::vector<nvmlSample_t> samples(n + 8);
  n = static_cast<unsigned int>(samples.size());
  rc = api_->nvmlDeviceGetSamples(devices_[index], NVML_GPU_UTILIZATION_SAMPLES, since_us, &type,
                                  &n, samples.data());
  if (rc == NVML_ERROR_NOT_FOUND) return std::vector<BusySample>{};
  GS_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetSamples", index));
  std::vector<BusySample> out;
  out.reserve(n);
  for (unsigned int i = 0; i < n && i < samples.size(); ++i) {
    out.push_back({samples[i].timeStamp, nvml_abi::SamplePercent(type, samples[i].sampleValue)});
  }
  std::sort(out.begin(), out.end(), [](const BusySample& a, const BusySample& b) {
    return a.timestamp_us < b.timestamp_us;
  });
  return out;
}

StatusOr<SettingValue> NvmlBackend::Get(uint32_t index, SettingKind kind) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  const nvmlDevice_t d = devices_[index];
  switch (kind) {
    case SettingKind::kPowerLimit: {
      unsigned int mw = 0;
      GS_RETURN_IF_ERROR(Check(api_->nvmlDeviceGetPowerManagementLimit(d, &mw),
                               "nvmlDeviceGetPowerManagementLimit", index));
      return SettingValue(PowerLimit{mw});
    }
    case SettingKind::kGpuClocks: {
      MutexLock lock(mu_);
      return SettingValue(GpuClocks{locked_gpu_[index]});
    }
    case SettingKind::kMemoryClocks: {
      MutexLock lock(mu_);
      return SettingValue(MemoryClocks{locked_mem_[index]});
    }
    case SettingKind::kPersistence: {
      nvmlEnableState_t p{};
      GS_RETURN_IF_ERROR(
          Check(api_->nvmlDeviceGetPersistenceMode(d, &p), "nvmlDeviceGetPersistenceMode", index));
      return SettingValue(Persistence{p == NVML_FEATURE_ENABLED});
    }
    case SettingKind::kComputeMode: {
      nvmlComputeMode_t m{};
      GS_RETURN_IF_ERROR(
          Check(api_->nvmlDeviceGetComputeMode(d, &m), "nvmlDeviceGetComputeMode", index));
      return SettingValue(ComputeModeSetting{static_cast<ComputeMode>(m)});
    }
  }
  return Internal("unhandled setting kind");
}

Status NvmlBackend::Set(uint32_t index, const SettingValue& value) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  const nvmlDevice_t d = devices_[index];
  const Api& a = *api_;
  return std::visit(
      [&](const auto& v) -> Status {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, PowerLimit>) {
          return Check(a.nvmlDeviceSetPowerManagementLimit(d, v.milliwatts),
                       "nvmlDeviceSetPowerManagementLimit", index);
        } else if constexpr (std::is_same_v<T, GpuClocks>) {
          Status s =
              v.locked
                  ? Check(a.nvmlDeviceSetGpuLockedClocks(d, v.locked->min_mhz, v.locked->max_mhz),
                          "nvmlDeviceSetGpuLockedClocks", index)
                  : Check(a.nvmlDeviceResetGpuLockedClocks(d), "nvmlDeviceResetGpuLockedClocks",
                          index);
          if (s.ok()) {
            MutexLock lock(mu_);
            locked_gpu_[index] = v.locked;
          }
          return s;
        } else if constexpr (std::is_same_v<T, MemoryClocks>) {
          Status s = v.locked ? Check(a.nvmlDeviceSetMemoryLockedClocks(d, v.locked->min_mhz,
                                                                        v.locked->max_mhz),
                                      "nvmlDeviceSetMemoryLockedClocks", index)
                              : Check(a.nvmlDeviceResetMemoryLockedClocks(d),
                                      "nvmlDeviceResetMemoryLockedClocks", index);
          if (s.ok()) {
            MutexLock lock(mu_);
            locked_mem_[index] = v.locked;
          }
          return s;
        } else if constexpr (std::is_same_v<T, Persistence>) {
          return Check(a.nvmlDeviceSetPersistenceMode(
                           d, v.enabled ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED),
                       "nvmlDeviceSetPersistenceMode", index);
        } else {
          return Check(a.nvmlDeviceSetComputeMode(d, static_cast<nvmlComputeMode_t>(v.mode)),
                       "nvmlDeviceSetComputeMode", index);
        }
      },
      value);
}

StatusOr<EnergyReading> NvmlBackend::Energy(uint32_t index) {
  if (index >= devices_.size()) return NotFound("no GPU " + std::to_string(index));
  EnergyReading r;
  unsigned long long e = 0;
  GS_RETURN_IF_ERROR(Check(api_->nvmlDeviceGetTotalEnergyConsumption(devices_[index], &e),
                           "nvmlDeviceGetTotalEnergyConsumption", index));
  r.energy_mj = e;
  unsigned int mw = 0;
  GS_RETURN_IF_ERROR(
      Check(api_->nvmlDeviceGetPowerUsage(devices_[index], &mw), "nvmlDeviceGetPowerUsage", index));
  r.power_mw = mw;
  return r;
}

}  // namespace gpuslice::daemon
