#include "daemon/gpu/gpu_manager.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/assert.h"
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

std::string FormatRevertMetrics(const RevertStatus& status) {
  std::string out =
      "# HELP gpuslice_lease_revert_failures_total Reverts of leased settings the GPU refused "
      "(each is retried).\n# TYPE gpuslice_lease_revert_failures_total counter\n"
      "gpuslice_lease_revert_failures_total " +
      std::to_string(status.failures_total) +
      "\n# HELP gpuslice_lease_reverts_retried_total Refused reverts that a retry applied.\n"
      "# TYPE gpuslice_lease_reverts_retried_total counter\n"
      "gpuslice_lease_reverts_retried_total " +
      std::to_string(status.retried_ok_total) +
      "\n# HELP gpuslice_lease_reverts_pending Settings whose revert the GPU refused, still "
      "retried.\n# TYPE gpuslice_lease_reverts_pending gauge\n"
      "gpuslice_lease_reverts_pending " +
      std::to_string(status.pending.size()) + "\n";
  return out;
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

void GpuManager::SetEventListener(
    std::function<void(std::string_view, const nlohmann::json&)> listener) {
  event_listener_ = std::move(listener);
}

void GpuManager::Changed(uint32_t gpu) {
  if (listener_) listener_(gpu);
}

void GpuManager::NoteApplied(const Key& key, const Status& status, bool retry) {
  const uint32_t gpu = key.first;
  const char* setting = SettingName(static_cast<SettingKind>(key.second)).data();
  int attempts = 0;
  std::string target;
  {
    MutexLock lock(mu_);
    auto it = stacks_.find(key);
    // Every caller applied the stack's value on its executor, where only it
    // changes the stack: it cannot be gone. Safe path: nothing to retry.
    if (GS_BUG_IF(it == stacks_.end(), "a setting was applied for a stack that is gone")) return;
    Stack& stack = it->second;
    target = SettingValueText(stack.Target());
    if (status.ok()) {
      if (!stack.retry) return;
      attempts = stack.retry->attempts;
      stack.retry.reset();
      ++reverts_retried_;
    } else {
      if (!stack.retry) stack.retry = Retry{0, "", std::nullopt, false};
      Retry& r = *stack.retry;
      attempts = ++r.attempts;
      r.error = status.message();
      r.next_ns.reset();  // ExpireDue schedules the next attempt (the clock is its thread's)
      r.queued = false;
      ++revert_failures_;
    }
  }
  nlohmann::json data = {
      {"gpu", gpu}, {"setting", setting}, {"value", target}, {"attempts", attempts}};
  if (status.ok()) {
    GS_LOG(kInfo, "gpusliced", "event=revert_retried gpu=%u setting=%s value=%s attempts=%d", gpu,
           setting, target.c_str(), attempts);
    if (event_listener_) event_listener_("revert_retried", data);
    return;
  }
  GS_LOG(kError, "gpusliced",
         "event=revert_failed gpu=%u setting=%s value=%s attempt=%d retry=%s error=\"%s\" "
         "action=kept_for_retry",
         gpu, setting, target.c_str(), attempts, retry ? "true" : "false",
         status.message().c_str());
  data["error"] = status.message();
  if (event_listener_) event_listener_("revert_failed", data);
}

Status GpuManager::RetryOnGpu(const Key& key) {
  const uint32_t gpu = key.first;
  const std::optional<Stack> stack = StackOf(key);
  if (!stack || !stack->retry) return Status::Ok();  // done meanwhile (a new Set, a release)
  Status s = backend_.Set(gpu, stack->Target());
  NoteApplied(key, s, true);
  if (s.ok()) {
    if (stack->leases.empty()) CommitAnyway(key, std::nullopt, "revert retried");
    Changed(gpu);
  }
  return s;
}

RevertStatus GpuManager::Reverts() const {
  MutexLock lock(mu_);
  RevertStatus out{revert_failures_, reverts_retried_, {}};
  for (const auto& [key, stack] : stacks_) {
    if (!stack.retry) continue;
    out.pending.push_back({key.first, static_cast<SettingKind>(key.second), stack.Target(),
                           stack.retry->attempts, stack.retry->error});
  }
  return out;
}

template <typename R, typename F>
std::future<R> GpuManager::Run(uint32_t gpu, F f) {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  // Callers resolve GPU ids against the same backend (ParseGpuIds, the MPS
  // module's index check): an index past the executors is our bug; the
  // request is refused.
  if (GS_BUG_IF(gpu >= executors_.size(), "GpuManager command for a GPU index out of range")) {
    promise->set_value(NotFound("no GPU " + std::to_string(gpu)));
  } else if (!executors_[gpu]->Submit([promise, f = std::move(f)] { promise->set_value(f()); })) {
    promise->set_value(Unavailable("the daemon is stopping"));
  }
  return future;
}

struct GpuManager::SetBatch {
  SetBatch(const std::vector<uint32_t>& g, SettingKind k)
      : gpus(g), kind(k), promises(g.size()), results(g.size()), undos(g.size()) {
    remaining = g.size();
  }
  const std::vector<uint32_t> gpus;
  const SettingKind kind;
  std::vector<std::promise<Status>> promises;  // fulfilled once, by FinishOne or an undo
  Mutex mu;
  size_t remaining GUARDED_BY(mu);
  std::vector<Status> results GUARDED_BY(mu);
  std::vector<std::optional<Undo>> undos GUARDED_BY(mu);
};

std::vector<std::future<Status>> GpuManager::Set(const std::vector<uint32_t>& gpus,
                                                 const SettingValue& value,
                                                 const LeaseOptions& lease) {
  Expiry expiry;
  if (lease.duration_ns && !lease.permanent) {
    expiry.ns = clock_.NowNs() + *lease.duration_ns;
    expiry.duration_ns = lease.duration_ns;
    if (persistence_.wall_clock != nullptr) {
      expiry.wall_ns = persistence_.wall_clock->NowNs() + *lease.duration_ns;
    }
  }
  bool stopping;
  {
    MutexLock lock(mu_);
    stopping = stopping_;
  }
  auto batch = std::make_shared<SetBatch>(gpus, KindOf(value));
  std::vector<std::future<Status>> out;
  out.reserve(gpus.size());
  for (auto& p : batch->promises) out.push_back(p.get_future());
  for (size_t i = 0; i < gpus.size(); ++i) {
    const uint32_t gpu = gpus[i];
    if (stopping) {
      FinishOne(batch, i, Unavailable("the daemon is stopping"), std::nullopt);
      continue;
    }
    // Same contract as Run's: an index past the executors is our bug.
    if (GS_BUG_IF(gpu >= executors_.size(), "GpuManager command for a GPU index out of range")) {
      FinishOne(batch, i, NotFound("no GPU " + std::to_string(gpu)), std::nullopt);
      continue;
    }
    const bool queued = executors_[gpu]->Submit([this, batch, i, gpu, value, lease, expiry] {
      std::optional<Undo> undo;
      Status s = SetOnGpu(gpu, value, lease, expiry, &undo);
      FinishOne(batch, i, std::move(s), std::move(undo));
    });
    if (!queued) FinishOne(batch, i, Unavailable("the daemon is stopping"), std::nullopt);
  }
  return out;
}

void GpuManager::FinishOne(const std::shared_ptr<SetBatch>& batch, size_t i, Status status,
                           std::optional<Undo> undo) {
  std::vector<Status> results;
  std::vector<std::optional<Undo>> undos;
  {
    MutexLock lock(batch->mu);
    batch->results[i] = std::move(status);
    batch->undos[i] = std::move(undo);
    if (--batch->remaining > 0) return;
    results = batch->results;
    undos = std::move(batch->undos);
  }
  // The last GPU to answer: every other GPU's command has run.
  size_t failed = results.size();
  for (size_t j = 0; j < results.size(); ++j) {
    if (!results[j].ok()) {
      failed = j;
      break;
    }
  }
  if (failed == results.size()) {
    for (auto& p : batch->promises) p.set_value(Status::Ok());
    return;
  }
  const std::string why = "GPU " + std::to_string(batch->gpus[failed]) + " refused it (" +
                          results[failed].message() + ")";
  for (size_t j = 0; j < results.size(); ++j) {
    if (!results[j].ok()) {
      batch->promises[j].set_value(results[j]);
      continue;
    }
    const uint32_t gpu = batch->gpus[j];
    const std::string msg = "not applied on GPU " + std::to_string(gpu) + ": " + why;
    if (!undos[j]) {  // nothing to undo (cannot happen for a success; kept safe)
      batch->promises[j].set_value(Aborted(msg));
      continue;
    }
    auto task = [this, batch, j, gpu, u = std::move(*undos[j]), why, msg] {
      Status s = UndoOnGpu(gpu, batch->kind, u, why);
      batch->promises[j].set_value(
          Aborted(s.ok() ? msg + "; undone"
                         : msg + "; the undo failed and is retried (" + s.message() + ")"));
    };
    // A stopping daemon reverts every lease anyway (RevertAll).
    if (!executors_[gpu]->Submit(std::move(task))) {
      batch->promises[j].set_value(Aborted(msg + "; not undone: the daemon is stopping"));
    }
  }
}

Status GpuManager::UndoOnGpu(uint32_t gpu, SettingKind kind, const Undo& undo,
                             const std::string& why) {
  const Key key{gpu, static_cast<int>(kind)};
  const std::optional<Stack> current = StackOf(key);
  Stack next;
  SettingValue shown;  // what the device shows now, as far as the stacks say
  if (undo.lease_id != 0) {
    const auto mine = [&](const Lease& l) { return l.id == undo.lease_id; };
    if (!current || std::none_of(current->leases.begin(), current->leases.end(), mine)) {
      return Status::Ok();  // ended or replaced meanwhile: nothing of it is left
    }
    shown = current->Target();
    next = *current;
    std::erase_if(next.leases, mine);
    // The same holder's lease that this one replaced comes back, where it was.
    if (undo.before) {
      const auto& old = undo.before->leases;
      for (size_t pos = 0; pos < old.size(); ++pos) {
        if (old[pos].holder != undo.holder) continue;
        next.leases.insert(
            next.leases.begin() + static_cast<std::ptrdiff_t>(std::min(pos, next.leases.size())),
            old[pos]);
        break;
      }
    }
  } else if (!current) {  // permanent, and nothing leased since
    shown = undo.value;
    next = undo.before ? *undo.before : Stack{"", undo.prior, {}, {}};
    if (next.uuid.empty()) {
      if (auto info = backend_.Read(gpu); info.ok()) next.uuid = info->uuid;
    }
  } else {  // permanent, then leased: those leases now revert to the old baseline
    shown = current->Target();
    next = *current;
    next.baseline = undo.before ? undo.before->baseline : undo.prior;
    if (undo.before) {
      std::vector<Lease> leases;
      for (const Lease& l : undo.before->leases) {
        const auto same = [&](const Lease& c) { return c.holder == l.holder; };
        if (std::none_of(current->leases.begin(), current->leases.end(), same)) {
          leases.push_back(l);
        }
      }
      leases.insert(leases.end(), current->leases.begin(), current->leases.end());
      next.leases = std::move(leases);
    }
  }
  next.retry.reset();
  const SettingValue target = next.Target();
  const bool emptied = next.leases.empty();
  // An undo is never refused for want of a save: the record catches up at
  // the next saved change (and a stale record is counted and retried).
  CommitAnyway(key, next, "undo");
  Status s;
  if (target != shown) {
    s = backend_.Set(gpu, target);
    if (!s.ok()) NoteApplied(key, s, false);
    Changed(gpu);
  }
  if (s.ok() && emptied) CommitAnyway(key, std::nullopt, "undone");
  GS_LOG(kWarn, "gpusliced",
         "event=setting_undone gpu=%u setting=%s holder=%s value=%s restored=%s status=\"%s\" "
         "reason=\"%s\"",
         gpu, SettingName(kind).data(), undo.holder.c_str(), SettingValueText(undo.value).c_str(),
         SettingValueText(target).c_str(), s.ToString().c_str(), why.c_str());
  return s;
}

Status GpuManager::SetOnGpu(uint32_t gpu, const SettingValue& value, const LeaseOptions& lease,
                            Expiry expiry, std::optional<Undo>* undo) {
  const SettingKind kind = KindOf(value);
  const Key key{gpu, static_cast<int>(kind)};
  GS_ASSIGN_OR_RETURN(GpuInfo info, backend_.Read(gpu));
  GS_RETURN_IF_ERROR(ValidateSetting(info, value));
  const std::optional<Stack> before = StackOf(key);
  if (lease.permanent) {
    SettingValue prior = value;
    if (before) {
      prior = before->Target();
    } else {
      GS_ASSIGN_OR_RETURN(prior, backend_.Get(gpu, kind));
    }
    // Saved as the new baseline of a reverting stack (rule 7): should the
    // daemon die before the device changes, the restore applies it.
    GS_RETURN_IF_ERROR(Commit(key, Stack{info.uuid, value, {}, {}}));
    if (Status s = backend_.Set(gpu, value); !s.ok()) {
      CommitAnyway(key, before, "permanent change failed");
      return s;
    }
    CommitAnyway(key, std::nullopt, "permanent change applied");
    *undo = Undo{before, prior, value, 0, lease.holder};
    GS_LOG(kInfo, "gpusliced",
           "event=setting_applied gpu=%u setting=%s value=%s holder=%s permanent=true "
           "dropped_leases=%zu",
           gpu, SettingName(kind).data(), SettingValueText(value).c_str(), lease.holder.c_str(),
           before ? before->leases.size() : size_t{0});
    Changed(gpu);
    return Status::Ok();
  }
  Stack after;
  if (before) {
    after = *before;
  } else {
    GS_ASSIGN_OR_RETURN(SettingValue current, backend_.Get(gpu, kind));
    // A baseline of another kind would make the whole lease record
    // unreadable at the next start (ParseLeaseRecords refuses it).
    if (GS_BUG_IF(KindOf(current) != kind, "the backend answered Get with another setting")) {
      return Internal("GPU " + std::to_string(gpu) + " answered a " +
                      std::string(SettingName(kind)) + " query with another setting");
    }
    if (lease.baseline) {
      if (KindOf(*lease.baseline) != kind) {
        return InvalidArgument("a baseline of another setting than " +
                               std::string(SettingName(kind)));
      }
      current = *lease.baseline;
    }
    after = Stack{info.uuid, current, {}, {}};
  }
  const SettingValue baseline = after.baseline;
  std::erase_if(after.leases, [&](const Lease& l) { return l.holder == lease.holder; });
  after.retry.reset();  // the device is about to show the new value (or `before` comes back)
  uint64_t id;
  {
    MutexLock lock(mu_);
    id = next_id_++;
  }
  after.leases.push_back(
      Lease{id, lease.holder, value, expiry.ns, expiry.wall_ns, expiry.duration_ns, lease.kept});
  GS_RETURN_IF_ERROR(Commit(key, std::move(after)));
  if (Status s = backend_.Set(gpu, value); !s.ok()) {
    CommitAnyway(key, before, "setting failed");
    return s;
  }
  *undo = Undo{before, before ? before->Target() : SettingValue(baseline), value, id, lease.holder};
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
  const std::optional<Stack> before = StackOf(key);
  auto match = [&](const Lease& l) {
    return l.holder == holder && (!lease_id || l.id == *lease_id);
  };
  const auto found = before ? std::find_if(before->leases.begin(), before->leases.end(), match)
                            : std::vector<Lease>::const_iterator();
  if (!before || found == before->leases.end()) {
    if (lease_id) return Status::Ok();  // an expiry raced with a release or renewal
    return NotFound(holder + " holds no " + std::string(SettingName(kind)) + " lease on GPU " +
                    std::to_string(gpu));
  }
  const bool was_effective = found + 1 == before->leases.end();
  Stack after = *before;
  after.leases.erase(after.leases.begin() + (found - before->leases.begin()));
  std::optional<SettingValue> next;  // what the device must show after, if it changes
  if (was_effective) {
    next = after.Target();
    after.retry.reset();  // a pending retry's target is replaced by `next`
  }
  const bool emptied = after.leases.empty();
  // An emptied stack stays in the record until the device is back (rule 7).
  if (Status saved = Commit(key, std::move(after)); !saved.ok()) {
    if (lease_id) {  // an expiry: let the next ExpireDue try again
      MutexLock lock(mu_);
      if (auto it = stacks_.find(key); it != stacks_.end()) {
        for (Lease& l : it->second.leases) {
          if (l.id == *lease_id) l.expiring = false;
        }
      }
    }
    GS_LOG(kError, "gpusliced", "event=lease_end_refused gpu=%u setting=%s holder=%s error=\"%s\"",
           gpu, SettingName(kind).data(), holder.c_str(), saved.message().c_str());
    return saved;
  }
  Status s = next ? backend_.Set(gpu, *next) : Status::Ok();
  // A refused revert keeps the stack (an emptied one stays in the record as a
  // revert to do) and is retried by ExpireDue (rule 9): the lease has ended,
  // its holder is told of the error, the device gets its value back later.
  if (!s.ok()) {
    NoteApplied(key, s, false);
  } else if (emptied) {
    CommitAnyway(key, std::nullopt, "lease ended");
  }
  if (s.ok()) {
    GS_LOG(kInfo, "gpusliced", "event=lease_ended gpu=%u setting=%s holder=%s reverted_to=%s", gpu,
           SettingName(kind).data(), holder.c_str(),
           next ? SettingValueText(*next).c_str() : "(unchanged)");
  } else {
    GS_LOG(kError, "gpusliced",
           "event=lease_ended gpu=%u setting=%s holder=%s revert=failed_will_retry", gpu,
           SettingName(kind).data(), holder.c_str());
  }
  if (next) Changed(gpu);
  return s;
}

std::future<StatusOr<EnergyReading>> GpuManager::Energy(uint32_t gpu) {
  return Run<StatusOr<EnergyReading>>(gpu, [this, gpu] { return backend_.Energy(gpu); });
}

Status GpuManager::HoldComputeMode(uint32_t gpu, ComputeMode mode, const std::string& holder,
                                   std::optional<ComputeMode> baseline) {
  LeaseOptions lease{.holder = holder, .duration_ns = std::nullopt, .kept = true};
  if (baseline) lease.baseline = ComputeModeSetting{*baseline};
  return Set({gpu}, ComputeModeSetting{mode}, lease)[0].get();
}

Status GpuManager::CheckSettable(uint32_t gpu, SettingKind kind) {
  return Run<Status>(gpu,
                     [this, gpu, kind]() -> Status {
                       GS_ASSIGN_OR_RETURN(SettingValue current, backend_.Get(gpu, kind));
                       return backend_.Set(gpu, current);
                     })
      .get();
}

Status GpuManager::ReleaseComputeMode(uint32_t gpu, const std::string& holder) {
  return Release({gpu}, SettingKind::kComputeMode, holder)[0].get();
}

void GpuManager::ExpireDue() {
  {
    // Rule 11: a record left behind by a step that could not be refused.
    MutexLock persist(persist_mu_);
    if (record_stale_ && persistence_.save) {
      nlohmann::json data;
      {
        MutexLock lock(mu_);
        data = RecordsWith(std::nullopt, std::nullopt);
      }
      if (persistence_.save(data).ok()) {
        record_stale_ = false;
        GS_LOG(kInfo, "gpusliced", "event=lease_record_saved_again");
      }
    }
  }
  const int64_t now = clock_.NowNs();
  struct Due {
    uint32_t gpu;
    SettingKind kind;
    std::string holder;
    uint64_t id;
  };
  std::vector<Due> due;
  std::vector<Key> retries;
  {
    MutexLock lock(mu_);
    for (auto& [key, stack] : stacks_) {
      if (stack.retry && !stack.retry->queued) {
        Retry& r = *stack.retry;
        if (!r.next_ns) {
          const int shift = std::min(r.attempts - 1, 16);
          r.next_ns =
              now + std::min(kFirstRetryBackoffNs << std::max(shift, 0), kMaxRetryBackoffNs);
        } else if (*r.next_ns <= now) {
          r.queued = true;
          retries.push_back(key);
        }
      }
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
  for (const Key& key : retries) {
    // Dropped like the expiries': the outcome is logged, counted and reported.
    (void)Run<Status>(key.first, [this, key] { return RetryOnGpu(key); });
  }
}

void GpuManager::RevertAll() {
  std::vector<std::future<Status>> pending;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (const auto& [key, stack] : stacks_) {
      const uint32_t gpu = key.first;
      const SettingValue baseline = stack.baseline;
      const std::string uuid = stack.uuid;
      const Key k = key;
      Stack kept{uuid, baseline, stack.leases, {}};
      std::erase_if(kept.leases, [](const Lease& l) { return !l.kept; });
      if (!kept.leases.empty()) {  // rule 12: the kept leases stay, the device at the newest
        const SettingValue shown = stack.Target();
        pending.push_back(Run<Status>(gpu, [this, gpu, k, kept, shown] {
          CommitAnyway(k, kept, "kept on stop");
          const SettingValue target = kept.Target();
          Status s;
          if (target != shown) {
            s = backend_.Set(gpu, target);
            if (!s.ok()) NoteApplied(k, s, false);
            Changed(gpu);
          }
          GS_LOG(kInfo, "gpusliced",
                 "event=kept_on_stop gpu=%u setting=%s holder=%s value=%s status=\"%s\"", gpu,
                 SettingName(static_cast<SettingKind>(k.second)).data(),
                 kept.leases.back().holder.c_str(), SettingValueText(target).c_str(),
                 s.ToString().c_str());
          return s;
        }));
        continue;
      }
      pending.push_back(Run<Status>(gpu, [this, gpu, baseline, uuid, k] {
        // Shutdown is never refused: the reverts happen whatever the record.
        CommitAnyway(k, Stack{uuid, baseline, {}, {}}, "revert on stop");
        Status s = backend_.Set(gpu, baseline);
        // A refused revert stays in the record: the next start reverts it.
        if (s.ok()) {
          CommitAnyway(k, std::nullopt, "reverted on stop");
        } else {
          NoteApplied(k, s, false);
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

void GpuManager::SetPersistence(LeasePersistence persistence) {
  GS_ASSERT(persistence.wall_clock != nullptr,
            "lease persistence without a wall clock: expiries could not be saved");
  persistence_ = std::move(persistence);
}

std::optional<GpuManager::Stack> GpuManager::StackOf(const Key& key) const {
  MutexLock lock(mu_);
  auto it = stacks_.find(key);
  if (it == stacks_.end()) return std::nullopt;
  return it->second;
}

nlohmann::json GpuManager::RecordsWith(const std::optional<Key>& key,
                                       const std::optional<Stack>& after) const {
  std::vector<LeaseStackRecord> records;
  auto add = [&](const Key& k, const Stack& stack) {
    LeaseStackRecord r{stack.uuid, k.first, static_cast<SettingKind>(k.second), stack.baseline, {}};
    for (const Lease& l : stack.leases) {
      LeaseEntry e{l.holder, l.value, l.expires_wall_ns, l.duration_ns, {}, {}, l.kept};
      if (l.expires_ns && !persistence_.boot_id.empty()) {
        e.boot_id = persistence_.boot_id;
        e.expires_mono_ns = l.expires_ns;
      }
      r.leases.push_back(std::move(e));
    }
    records.push_back(std::move(r));
  };
  for (const auto& [k, stack] : stacks_) {
    if (k != key) add(k, stack);
  }
  if (key && after) add(*key, *after);
  return LeaseRecordsJson(records);
}

Status GpuManager::Commit(const Key& key, std::optional<Stack> after) {
  MutexLock persist(persist_mu_);
  if (persistence_.save) {
    nlohmann::json data;
    {
      MutexLock lock(mu_);
      data = RecordsWith(key, after);
    }
    if (Status s = persistence_.save(data); !s.ok()) {
      return Unavailable("the lease record could not be saved, so nothing was changed: " +
                         s.message());
    }
    record_stale_ = false;  // the whole record was written
  }
  MutexLock lock(mu_);
  if (after) {
    stacks_[key] = std::move(*after);
  } else {
    stacks_.erase(key);
  }
  return Status::Ok();
}

void GpuManager::CommitAnyway(const Key& key, std::optional<Stack> after, const char* why) {
  if (Status s = Commit(key, after); !s.ok()) {
    GS_LOG(kError, "gpusliced",
           "event=lease_record_stale gpu=%u setting=%s step=\"%s\" error=\"%s\"", key.first,
           SettingName(static_cast<SettingKind>(key.second)).data(), why, s.message().c_str());
    MutexLock persist(persist_mu_);
    record_stale_ = true;  // rule 11: ExpireDue saves it again
    MutexLock lock(mu_);
    if (after) {
      stacks_[key] = std::move(*after);
    } else {
      stacks_.erase(key);
    }
  }
}

RestoreReport GpuManager::Restore(const StatusOr<nlohmann::json>& loaded) {
  GS_ASSERT(persistence_.wall_clock != nullptr, "Restore before SetPersistence");
  RestoreReport report;
  if (!loaded.ok()) {
    if (loaded.status().code() == StatusCode::kNotFound) {
      GS_LOG(kInfo, "gpusliced", "event=lease_restore records=none");
      return report;
    }
    GS_LOG(kError, "gpusliced",
           "event=lease_restore_refused error=\"%s\" action=start_without_leases",
           loaded.status().message().c_str());
    report.refused = true;
    return report;
  }
  auto records = ParseLeaseRecords(*loaded);
  if (!records.ok()) {
    GS_LOG(kError, "gpusliced",
           "event=lease_restore_refused error=\"malformed lease record: %s\" "
           "action=start_without_leases",
           records.status().message().c_str());
    report.refused = true;
    return report;
  }
  std::map<std::string, uint32_t> by_uuid;
  for (uint32_t i = 0; i < DeviceCount(); ++i) {
    if (auto info = backend_.Read(i); info.ok()) {
      by_uuid[info->uuid] = i;
    } else {
      GS_LOG(kError, "gpusliced", "event=lease_restore gpu=%u error=\"%s\"", i,
             info.status().message().c_str());
    }
  }
  const int64_t wall_now = persistence_.wall_clock->NowNs();
  const int64_t now = clock_.NowNs();
  std::map<Key, Stack> restored;
  for (const LeaseStackRecord& r : *records) {
    const char* setting = SettingName(r.kind).data();
    auto gpu = by_uuid.find(r.gpu_uuid);
    if (gpu == by_uuid.end()) {
      for (const LeaseEntry& l : r.leases) {
        GS_LOG(kWarn, "gpusliced",
               "event=lease_restored action=dropped reason=gpu_missing uuid=%s setting=%s "
               "holder=%s value=%s",
               r.gpu_uuid.c_str(), setting, l.holder.c_str(), SettingValueText(l.value).c_str());
        ++report.dropped;
      }
      continue;
    }
    Stack stack{r.gpu_uuid, r.baseline, {}, {}};
    for (const LeaseEntry& l : r.leases) {
      // The time the lease has left (rule 8): on this boot's monotonic clock
      // when it was saved in this boot, else on the wall clock, capped by the
      // duration it was granted for.
      std::optional<int64_t> remaining;
      const char* basis = "none";
      if (l.expires_mono_ns && !persistence_.boot_id.empty() && l.boot_id == persistence_.boot_id) {
        remaining = *l.expires_mono_ns - now;
        basis = "monotonic";
      } else if (l.expires_at_ns) {
        remaining = *l.expires_at_ns - wall_now;
        basis = "wall";
        if (l.lease_ns && *remaining > *l.lease_ns) {
          remaining = *l.lease_ns;
          basis = "wall_capped_by_duration";
        }
      }
      if (remaining && *remaining <= 0) {
        GS_LOG(kInfo, "gpusliced",
               "event=lease_restored action=reverted reason=expired gpu=%u uuid=%s setting=%s "
               "holder=%s value=%s expired_s_ago=%lld basis=%s",
               gpu->second, r.gpu_uuid.c_str(), setting, l.holder.c_str(),
               SettingValueText(l.value).c_str(),
               static_cast<long long>(-*remaining / 1'000'000'000), basis);
        ++report.reverted;
        continue;
      }
      std::optional<int64_t> expires;
      std::optional<int64_t> expires_wall;
      if (remaining) {
        expires = now + *remaining;
        expires_wall = wall_now + *remaining;
      }
      GS_LOG(kInfo, "gpusliced",
             "event=lease_restored action=kept gpu=%u uuid=%s setting=%s holder=%s value=%s "
             "remaining_s=%lld basis=%s",
             gpu->second, r.gpu_uuid.c_str(), setting, l.holder.c_str(),
             SettingValueText(l.value).c_str(),
             static_cast<long long>(remaining ? *remaining / 1'000'000'000 : -1), basis);
      stack.leases.push_back(
          Lease{0, l.holder, l.value, expires, expires_wall, l.lease_ns, l.kept});
      ++report.kept;
    }
    restored[{gpu->second, static_cast<int>(r.kind)}] = std::move(stack);
  }
  // Saved before the devices change (rule 6): the reverts stay in the record
  // as emptied stacks until done (rule 7). A failed save is logged, not fatal:
  // the old record still asks for the same reconciliation.
  {
    MutexLock persist(persist_mu_);
    MutexLock lock(mu_);
    for (auto& [key, stack] : restored) {
      for (Lease& l : stack.leases) l.id = next_id_++;
    }
    stacks_ = restored;
    if (persistence_.save) {
      if (Status s = persistence_.save(RecordsWith(std::nullopt, std::nullopt)); !s.ok()) {
        GS_LOG(kError, "gpusliced", "event=lease_record_stale step=restore error=\"%s\"",
               s.message().c_str());
        record_stale_ = true;
      }
    }
  }
  std::vector<std::future<Status>> pending;
  for (const auto& [key, stack] : restored) {
    const uint32_t gpu = key.first;
    const SettingValue target = stack.leases.empty() ? stack.baseline : stack.leases.back().value;
    const Key k = key;
    const bool emptied = stack.leases.empty();
    pending.push_back(Run<Status>(gpu, [this, gpu, target, k, emptied] {
      Status s = backend_.Set(gpu, target);
      const char* setting = SettingName(static_cast<SettingKind>(k.second)).data();
      if (s.ok()) {
        GS_LOG(kInfo, "gpusliced", "event=lease_restored action=applied gpu=%u setting=%s value=%s",
               gpu, setting, SettingValueText(target).c_str());
      } else {
        GS_LOG(kError, "gpusliced",
               "event=lease_restored action=apply_failed gpu=%u setting=%s value=%s error=\"%s\"",
               gpu, setting, SettingValueText(target).c_str(), s.message().c_str());
      }
      NoteApplied(k, s, false);  // a refused one is retried (rule 9)
      if (emptied && s.ok()) CommitAnyway(k, std::nullopt, "restore reverted");
      Changed(gpu);
      return s;
    }));
  }
  for (auto& f : pending) f.wait();
  return report;
}

std::vector<LeaseInfo> GpuManager::Leases() const {
  MutexLock lock(mu_);
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
