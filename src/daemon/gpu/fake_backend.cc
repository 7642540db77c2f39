#include "daemon/gpu/fake_backend.h"

#include <algorithm>
#include <utility>

namespace gpuslice::daemon {

FakeBackend::FakeBackend(uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-fake-" + std::to_string(i);
    g.name = "Fake H100";
    g.memory_total_bytes = 80ull << 30;
    g.memory_free_bytes = g.memory_total_bytes;
    g.power_draw_mw = 70'000;
    g.power_limit_mw = 700'000;
    g.power_min_mw = 200'000;
    g.power_max_mw = 700'000;
    g.power_default_mw = 700'000;
    g.sm_clock_mhz = 1980;
    g.memory_clock_mhz = 2619;
    g.max_sm_clock_mhz = 1980;
    g.max_memory_clock_mhz = 2619;
    g.temperature_c = 34;
    gpus_.push_back(g);
  }
  processes_.resize(count);
  utilization_.resize(count);
  busy_.resize(count);
}

uint32_t FakeBackend::DeviceCount() const {
  MutexLock lock(mu_);
  return static_cast<uint32_t>(gpus_.size());
}

StatusOr<GpuInfo> FakeBackend::Read(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (std::find(failing_reads_.begin(), failing_reads_.end(), index) != failing_reads_.end()) {
    return Unavailable("GPU " + std::to_string(index) + " is lost (injected)");
  }
  return gpus_[index];
}

StatusOr<SettingValue> FakeBackend::Get(uint32_t index, SettingKind kind) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  const GpuInfo& g = gpus_[index];
  switch (kind) {
    case SettingKind::kPowerLimit:
      return SettingValue(PowerLimit{g.power_limit_mw});
    case SettingKind::kGpuClocks:
      return SettingValue(GpuClocks{g.locked_gpu_clocks});
    case SettingKind::kMemoryClocks:
      return SettingValue(MemoryClocks{g.locked_memory_clocks});
    case SettingKind::kPersistence:
      return SettingValue(Persistence{g.persistence});
    case SettingKind::kComputeMode:
      return SettingValue(ComputeModeSetting{g.compute_mode});
  }
  return Internal("unhandled setting kind");
}

Status FakeBackend::Set(uint32_t index, const SettingValue& value) {
  std::function<void(uint32_t, const SettingValue&)> hook;
  {
    MutexLock lock(mu_);
    hook = hook_;
  }
  if (hook) hook(index, value);
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  calls_.push_back({index, value});
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if (it->index != index) continue;
    Status s = it->status;
    if (!it->sticky) failures_.erase(it);
    return s;
  }
  GpuInfo& g = gpus_[index];
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, PowerLimit>) {
          g.power_limit_mw = v.milliwatts;
        } else if constexpr (std::is_same_v<T, GpuClocks>) {
          g.locked_gpu_clocks = v.locked;
        } else if constexpr (std::is_same_v<T, MemoryClocks>) {
          g.locked_memory_clocks = v.locked;
        } else if constexpr (std::is_same_v<T, Persistence>) {
          g.persistence = v.enabled;
        } else {
          g.compute_mode = v.mode;
        }
      },
      value);
  return Status::Ok();
}

StatusOr<EnergyReading> FakeBackend::Energy(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  return EnergyReading{gpus_[index].energy_mj, gpus_[index].power_draw_mw};
}

StatusOr<std::vector<GpuProcess>> FakeBackend::Processes(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  ++process_reads_;
  return processes_[index];
}

int FakeBackend::process_reads() const {
  MutexLock lock(mu_);
  return process_reads_;
}

StatusOr<std::vector<ProcessUtilization>> FakeBackend::ProcessUtilizationSince(uint32_t index,
                                                                               uint64_t since_us) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  std::vector<ProcessUtilization> out;
  for (const ProcessUtilization& s : utilization_[index]) {
    if (s.timestamp_us > since_us) out.push_back(s);
  }
  return out;
}

StatusOr<std::vector<BusySample>> FakeBackend::BusySince(uint32_t index, uint64_t since_us) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  std::vector<BusySample> out;
  for (const BusySample& s : busy_[index]) {
    if (s.timestamp_us > since_us) out.push_back(s);
  }
  return out;
}

void FakeBackend::AddBusy(uint32_t index, const std::vector<BusySample>& samples) {
  MutexLock lock(mu_);
  if (index < gpus_.size()) busy_[index].insert(busy_[index].end(), samples.begin(), samples.end());
}

void FakeBackend::SetProcesses(uint32_t index, std::vector<GpuProcess> processes) {
  MutexLock lock(mu_);
  if (index < gpus_.size()) processes_[index] = std::move(processes);
}

void FakeBackend::AddUtilization(uint32_t index, const std::vector<ProcessUtilization>& samples) {
  MutexLock lock(mu_);
  if (index < gpus_.size()) {
    utilization_[index].insert(utilization_[index].end(), samples.begin(), samples.end());
  }
}

std::vector<FakeBackend::Call> FakeBackend::Calls() const {
  MutexLock lock(mu_);
  return calls_;
}

void FakeBackend::SetHook(std::function<void(uint32_t, const SettingValue&)> hook) {
  MutexLock lock(mu_);
  hook_ = std::move(hook);
}

void FakeBackend::FailSets(uint32_t index, Status status, bool sticky) {
  MutexLock lock(mu_);
  failures_.push_back({index, std::move(status), sticky});
}

void FakeBackend::FailReads(uint32_t index, bool fail) {
  MutexLock lock(mu_);
  std::erase(failing_reads_, index);
  if (fail) failing_reads_.push_back(index);
}

void FakeBackend::Mutate(uint32_t index, const std::function<void(GpuInfo&)>& f) {
  MutexLock lock(mu_);
  if (index < gpus_.size()) f(gpus_[index]);
}

Status FakeBackend::SetMemoryLimits(uint32_t index, const std::string& cgroup, uint64_t soft_bytes,
                                    uint64_t hard_bytes) {
  MutexLock lock(mu_);
  ++memory_limit_calls_;
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (auto f = memory_limit_failures_.find(index); f != memory_limit_failures_.end()) {
    return f->second;
  }
  if (!gpus_[index].features.memory_limits_api) {
    return {StatusCode::kUnimplemented, "driver has no memory limits"};
  }
  if (soft_bytes > hard_bytes) return InvalidArgument("soft limit above hard limit");
  if (soft_bytes == 0 && hard_bytes == kNoMemoryLimit) {
    if (auto f = memory_limit_clear_failures_.find(index);
        f != memory_limit_clear_failures_.end()) {
      return f->second;
    }
    memory_limits_[index].erase(cgroup);
  } else {
    memory_limits_[index][cgroup] = MemoryLimit{soft_bytes, hard_bytes};
  }
  return Status::Ok();
}

std::map<std::string, FakeBackend::MemoryLimit> FakeBackend::MemoryLimits(uint32_t index) const {
  MutexLock lock(mu_);
  auto it = memory_limits_.find(index);
  return it == memory_limits_.end() ? std::map<std::string, MemoryLimit>{} : it->second;
}

int FakeBackend::memory_limit_calls() const {
  MutexLock lock(mu_);
  return memory_limit_calls_;
}

void FakeBackend::FailMemoryLimits(uint32_t index, Status status) {
  MutexLock lock(mu_);
  if (status.ok()) {
    memory_limit_failures_.erase(index);
  } else {
    memory_limit_failures_[index] = std::move(status);
  }
}

void FakeBackend::FailMemoryLimitClears(uint32_t index, Status status) {
  MutexLock lock(mu_);
  if (status.ok()) {
    memory_limit_clear_failures_.erase(index);
  } else {
    memory_limit_clear_failures_[index] = std::move(status);
  }
}

std::vector<MigProfile> FakeH100MigProfiles() {
  constexpr uint64_t kEighth = 10ull << 30;
  auto every = [](uint32_t size, uint32_t step, uint32_t last) {
    std::vector<MigPlacement> out;
    for (uint32_t start = 0; start <= last; start += step) out.push_back({start, size});
    return out;
  };
  return {{19, "1g.10gb", 1, 1 * kEighth, 16, every(1, 1, 6)},
          {15, "1g.20gb", 1, 2 * kEighth, 26, every(2, 2, 6)},
          {14, "2g.20gb", 2, 2 * kEighth, 32, every(2, 2, 4)},
          {9, "3g.40gb", 3, 4 * kEighth, 60, every(4, 4, 4)},
          {5, "4g.40gb", 4, 4 * kEighth, 64, every(4, 4, 0)},
          {0, "7g.80gb", 7, 8 * kEighth, 132, every(8, 8, 0)}};
}

void FakeBackend::EnableMig(uint32_t index, bool enabled) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return;
  gpus_[index].features.mig = enabled;
  if (enabled) {
    mig_[index];
  } else {
    mig_.erase(index);
  }
}

void FakeBackend::FailMigCreates(uint32_t index, Status status) {
  MutexLock lock(mu_);
  mig_[index].next_create_failure = std::move(status);
}

void FakeBackend::SetMigInUse(uint32_t index, uint32_t gpu_instance_id, bool in_use) {
  MutexLock lock(mu_);
  auto& v = mig_[index].in_use;
  std::erase(v, gpu_instance_id);
  if (in_use) v.push_back(gpu_instance_id);
}

StatusOr<std::vector<MigProfile>> FakeBackend::MigProfiles(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (!gpus_[index].features.mig) return FailedPrecondition("GPU is not in MIG mode");
  return FakeH100MigProfiles();
}

StatusOr<std::vector<MigInstance>> FakeBackend::MigInstances(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (!gpus_[index].features.mig) return FailedPrecondition("GPU is not in MIG mode");
  return mig_[index].instances;
}

StatusOr<MigInstance> FakeBackend::CreateMigInstance(uint32_t index, uint32_t profile_id,
                                                     MigPlacement placement) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (!gpus_[index].features.mig) return FailedPrecondition("GPU is not in MIG mode");
  FakeMig& m = mig_[index];
  if (!m.next_create_failure.ok()) return std::exchange(m.next_create_failure, Status::Ok());
  const std::vector<MigProfile> profiles = FakeH100MigProfiles();
  auto p = std::ranges::find(profiles, profile_id, &MigProfile::id);
  if (p == profiles.end()) return InvalidArgument("no such profile");
  if (std::ranges::find(p->placements, placement) == p->placements.end()) {
    return InvalidArgument("a placement the profile may not take");
  }
  for (const MigInstance& other : m.instances) {
    if (other.placement.Overlaps(placement)) return ResourceExhausted("the placement is taken");
  }
  uint32_t id = 1;
  while (std::ranges::find(m.instances, id, &MigInstance::gpu_instance_id) != m.instances.end()) {
    ++id;
  }
  MigInstance made{.gpu_instance_id = id,
                   .compute_instance_id = 0,
                   .profile_id = p->id,
                   .profile = p->name,
                   .placement = placement,
                   .uuid = "MIG-fake-" + std::to_string(index) + "-" + std::to_string(++mig_uuids_),
                   .memory_bytes = p->memory_bytes,
                   .memory_used_bytes = 0};
  m.instances.push_back(made);
  std::ranges::sort(m.instances, {}, &MigInstance::gpu_instance_id);
  return made;
}

Status FakeBackend::DestroyMigInstance(uint32_t index, uint32_t gpu_instance_id) {
  MutexLock lock(mu_);
  if (index >= gpus_.size()) return NotFound("no GPU " + std::to_string(index));
  if (!gpus_[index].features.mig) return FailedPrecondition("GPU is not in MIG mode");
  FakeMig& m = mig_[index];
  if (std::ranges::find(m.in_use, gpu_instance_id) != m.in_use.end()) {
    return FailedPrecondition("a process uses the instance");
  }
  if (std::erase_if(m.instances, [&](const MigInstance& i) {
        return i.gpu_instance_id == gpu_instance_id;
      }) == 0) {
    return NotFound("no GPU instance " + std::to_string(gpu_instance_id));
  }
  return Status::Ok();
}

}  // namespace gpuslice::daemon
