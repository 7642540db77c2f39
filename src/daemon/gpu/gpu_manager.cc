#include "daemon/gpu/gpu_manager.h"

#include <cstdio>

#include "common/log.h"

namespace gpuslice::daemon {
namespace {

std::string Watts(uint32_t mw) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", mw / 1000.0);
  return buf;
}

Status CheckClock(const std::optional<ClockRange>& r, uint32_t max_mhz, const char* what,
                  uint32_t gpu) {
  if (!r || max_mhz == 0 || r->max_mhz <= max_mhz) return Status::Ok();
  return InvalidArgument(std::string(what) + " " + std::to_string(r->min_mhz) + "-" +
                         std::to_string(r->max_mhz) + " MHz is out of range for GPU " +
                         std::to_string(gpu) + " (valid: up to " + std::to_string(max_mhz) +
                         " MHz)");
}

}  // namespace

Status ValidateSetting(const GpuInfo& gpu, const SettingValue& value) {
  if (const auto* p = std::get_if<PowerLimit>(&value)) {
    if (gpu.power_max_mw == 0) return Status::Ok();  // constraints unknown: the driver decides
    if (p->milliwatts < gpu.power_min_mw || p->milliwatts > gpu.power_max_mw) {
      return InvalidArgument("power limit " + Watts(p->milliwatts) + " W is out of range for GPU " +
                             std::to_string(gpu.index) + " (valid: " + Watts(gpu.power_min_mw) +
                             "-" + Watts(gpu.power_max_mw) + " W)");
    }
  } else if (const auto* c = std::get_if<GpuClocks>(&value)) {
    return CheckClock(c->locked, gpu.max_sm_clock_mhz, "locked GPU clock range", gpu.index);
  } else if (const auto* m = std::get_if<MemoryClocks>(&value)) {
    return CheckClock(m->locked, gpu.max_memory_clock_mhz, "locked memory clock range", gpu.index);
  }
  return Status::Ok();
}

GpuManager::GpuManager(GpuBackend& backend, const Clock& clock) : backend_(backend), clock_(clock) {
  for (uint32_t i = 0; i < backend.DeviceCount(); ++i) {
    executors_.push_back(std::make_unique<SerialExecutor>());
  }
}

GpuManager::~GpuManager() { Stop(); }

void GpuManager::Stop() {
  for (auto& e : executors_) e->Stop();
}

void GpuManager::SetChangeListener(std::function<void(uint32_t)> listener) {
  listener_ = std::move(listener);
}

void GpuManager::Changed(uint32_t gpu) {
  if (listener_) listener_(gpu);
}

template <typename R, typename F>
std::future<R> GpuManager::Run(uint32_t gpu, F f) {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  if (gpu >= executors_.size()) {
    promise->set_value(NotFound("no GPU " + std::to_string(gpu)));
  } else if (!executors_[gpu]->Submit([promise, f = std::move(f)] { promise->set_value(f()); })) {
    promise->set_value(Unavailable("the daemon is stopping"));
  }
  return future;
}

std::vector<std::future<Status>> GpuManager::Set(const std::vector<uint32_t>& gpus,
                                                 const SettingValue& value,
                                                 const LeaseOptions& lease) {
  std::optional<int64_t> expires;
  if (lease.duration_ns && !lease.permanent) expires = clock_.NowNs() + *lease.duration_ns;
  bool stopping;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
  }
  std::vector<std::future<Status>> out;
  out.reserve(gpus.size());
  for (uint32_t gpu : gpus) {
    if (stopping) {
      std::promise<Status> p;
      p.set_value(Unavailable("the daemon is stopping"));
      out.push_back(p.get_future());
      continue;
    }
    out.push_back(Run<Status>(
        gpu, [this, gpu, value, lease, expires] { return SetOnGpu(gpu, value, lease, expires); }));
  }
  return out;
}

Status GpuManager::SetOnGpu(uint32_t gpu, const SettingValue& value, const LeaseOptions& lease,
                            std::optional<int64_t> expires_ns) {
  const SettingKind kind = KindOf(value);
  const Key key{gpu, static_cast<int>(kind)};
  GS_ASSIGN_OR_RETURN(GpuInfo info, backend_.Read(gpu));
  GS_RETURN_IF_ERROR(ValidateSetting(info, value));
  if (lease.permanent) {
    GS_RETURN_IF_ERROR(backend_.Set(gpu, value));
    size_t dropped = 0;
    {
      std::lock_guard lock(mu_);
      if (auto it = stacks_.find(key); it != stacks_.end()) {
        dropped = it->second.leases.size();
        stacks_.erase(it);
      }
    }
    GS_LOG(kInfo, "gpusliced",
           "event=setting_applied gpu=%u setting=%s value=%s holder=%s permanent=true "
           "dropped_leases=%zu",
           gpu, SettingName(kind).data(), SettingValueText(value).c_str(), lease.holder.c_str(),
           dropped);
    Changed(gpu);
    return Status::Ok();
  }
  bool has_stack;
  {
    std::lock_guard lock(mu_);
    has_stack = stacks_.count(key) != 0;
  }
  std::optional<SettingValue> baseline;
  if (!has_stack) {
    GS_ASSIGN_OR_RETURN(SettingValue current, backend_.Get(gpu, kind));
    baseline = current;
  }
  GS_RETURN_IF_ERROR(backend_.Set(gpu, value));
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] = stacks_.try_emplace(key, Stack{baseline.value_or(value), {}});
    auto& leases = it->second.leases;
    std::erase_if(leases, [&](const Lease& l) { return l.holder == lease.holder; });
    leases.push_back(Lease{next_id_++, lease.holder, value, expires_ns});
  }
  GS_LOG(kInfo, "gpusliced",
         "event=setting_applied gpu=%u setting=%s value=%s holder=%s lease_ns=%lld", gpu,
         SettingName(kind).data(), SettingValueText(value).c_str(), lease.holder.c_str(),
         static_cast<long long>(lease.duration_ns.value_or(-1)));
  Changed(gpu);
  return Status::Ok();
}

std::vector<std::future<Status>> GpuManager::Release(const std::vector<uint32_t>& gpus,
                                                     SettingKind kind, const std::string& holder) {
  std::vector<std::future<Status>> out;
  out.reserve(gpus.size());
  for (uint32_t gpu : gpus) {
    out.push_back(Run<Status>(
        gpu, [this, gpu, kind, holder] { return ReleaseOnGpu(gpu, kind, holder, std::nullopt); }));
  }
  return out;
}

Status GpuManager::ReleaseOnGpu(uint32_t gpu, SettingKind kind, const std::string& holder,
                                std::optional<uint64_t> lease_id) {
  const Key key{gpu, static_cast<int>(kind)};
  std::optional<SettingValue> next;  // what the device must show after, if it changes
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    auto it = stacks_.find(key);
    const std::vector<Lease>* leases = it == stacks_.end() ? nullptr : &it->second.leases;
    size_t i = 0;
    while (leases != nullptr && i < leases->size() &&
           ((*leases)[i].holder != holder || (lease_id && (*leases)[i].id != *lease_id))) {
      ++i;
    }
    if (leases == nullptr || i == leases->size()) {
      if (lease_id) return Status::Ok();  // an expiry raced with a release or renewal
      return NotFound(holder + " holds no " + std::string(SettingName(kind)) + " lease on GPU " +
                      std::to_string(gpu));
    }
    id = (*leases)[i].id;
    if (i + 1 == leases->size()) {
      next = leases->size() > 1 ? (*leases)[i - 1].value : it->second.baseline;
    }
  }
  Status s = next ? backend_.Set(gpu, *next) : Status::Ok();
  {
    std::lock_guard lock(mu_);
    if (auto it = stacks_.find(key); it != stacks_.end()) {
      std::erase_if(it->second.leases, [&](const Lease& l) { return l.id == id; });
      if (it->second.leases.empty()) stacks_.erase(it);
    }
  }
  if (s.ok()) {
    GS_LOG(kInfo, "gpusliced", "event=lease_ended gpu=%u setting=%s holder=%s reverted_to=%s", gpu,
           SettingName(kind).data(), holder.c_str(),
           next ? SettingValueText(*next).c_str() : "(unchanged)");
  } else {
    GS_LOG(kError, "gpusliced", "event=revert_failed gpu=%u setting=%s holder=%s error=\"%s\"", gpu,
           SettingName(kind).data(), holder.c_str(), s.message().c_str());
  }
  if (next) Changed(gpu);
  return s;
}

std::future<StatusOr<EnergyReading>> GpuManager::Energy(uint32_t gpu) {
  return Run<StatusOr<EnergyReading>>(gpu, [this, gpu] { return backend_.Energy(gpu); });
}

Status GpuManager::SetComputeMode(uint32_t gpu, ComputeMode mode, const std::string& holder) {
  auto futures = Set({gpu}, ComputeModeSetting{mode}, LeaseOptions{holder, std::nullopt, false});
  return futures[0].get();
}

Status GpuManager::ReleaseComputeMode(uint32_t gpu, const std::string& holder) {
  return Release({gpu}, SettingKind::kComputeMode, holder)[0].get();
}

void GpuManager::ExpireDue() {
  const int64_t now = clock_.NowNs();
  struct Due {
    uint32_t gpu;
    SettingKind kind;
    std::string holder;
    uint64_t id;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, stack] : stacks_) {
      for (Lease& l : stack.leases) {
        if (l.expires_ns && *l.expires_ns <= now && !l.expiring) {
          l.expiring = true;
          due.push_back({key.first, static_cast<SettingKind>(key.second), l.holder, l.id});
        }
      }
    }
  }
  for (const Due& d : due) {
    GS_LOG(kInfo, "gpusliced", "event=lease_expired gpu=%u setting=%s holder=%s", d.gpu,
           SettingName(d.kind).data(), d.holder.c_str());
    // The future is dropped: the release runs on its own; errors are logged.
    (void)Run<Status>(d.gpu, [this, d] { return ReleaseOnGpu(d.gpu, d.kind, d.holder, d.id); });
  }
}

void GpuManager::RevertAll() {
  std::vector<std::future<Status>> pending;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (const auto& [key, stack] : stacks_) {
      const uint32_t gpu = key.first;
      const SettingValue baseline = stack.baseline;
      const Key k = key;
      pending.push_back(Run<Status>(gpu, [this, gpu, baseline, k] {
        Status s = backend_.Set(gpu, baseline);
        {
          std::lock_guard inner(mu_);
          stacks_.erase(k);
        }
        GS_LOG(kInfo, "gpusliced", "event=revert_on_stop gpu=%u setting=%s value=%s status=\"%s\"",
               gpu, SettingName(static_cast<SettingKind>(k.second)).data(),
               SettingValueText(baseline).c_str(), s.ToString().c_str());
        Changed(gpu);
        return s;
      }));
    }
  }
  for (auto& f : pending) f.wait();
}

std::vector<LeaseInfo> GpuManager::Leases() const {
  std::lock_guard lock(mu_);
  std::vector<LeaseInfo> out;
  for (const auto& [key, stack] : stacks_) {
    for (size_t i = 0; i < stack.leases.size(); ++i) {
      const Lease& l = stack.leases[i];
      out.push_back({key.first, static_cast<SettingKind>(key.second), l.holder, l.value,
                     stack.baseline, l.expires_ns, i + 1 == stack.leases.size()});
    }
  }
  return out;
}

}  // namespace gpuslice::daemon
