#include "daemon/mps/mps_manager.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/log.h"
#include "daemon/gpu/gpu_selector.h"

namespace gpuslice::daemon::mps {
namespace {

constexpr char kStateFile[] = "state.json";
constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

Status ValidateTenantName(std::string_view name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (name.empty() || name.size() > 100 || !chars_ok || name.front() == '.') {
    return InvalidArgument("'" + std::string(name) +
                           "' is not a tenant name (1-100 characters of A-Z a-z 0-9 . _ -, not "
                           "starting with '.')");
  }
  return Status::Ok();
}

Status ValidateSettings(const TenantSettings& s) {
  if (s.active_thread_percentage &&
      (*s.active_thread_percentage < 1 || *s.active_thread_percentage > 100)) {
    return InvalidArgument("active_thread_percentage must be 1-100, not " +
                           std::to_string(*s.active_thread_percentage));
  }
  if (s.pinned_memory_limit && (*s.pinned_memory_limit == 0 || *s.pinned_memory_limit % kMiB)) {
    return InvalidArgument("pinned_memory_limit must be a positive whole number of MiB, not " +
                           std::to_string(*s.pinned_memory_limit) + " bytes");
  }
  if (s.sm_partition_percent && (*s.sm_partition_percent < 1 || *s.sm_partition_percent > 100)) {
    return InvalidArgument("sm_partition_percent must be 1-100, not " +
                           std::to_string(*s.sm_partition_percent));
  }
  if (s.client_priority && *s.client_priority != 0 && *s.client_priority != 1) {
    return InvalidArgument("client_priority must be 0 (normal) or 1 (below normal), not " +
                           std::to_string(*s.client_priority));
  }
  return Status::Ok();
}

MpsManager::MpsManager(MpsOptions options, GpuModeControl& gpus, MpsHost& host, const Clock& clock)
    : options_(std::move(options)), gpus_(gpus), host_(host), clock_(clock) {
  config_.options = options_;
}

std::string MpsManager::StatePath() const { return options_.root + "/" + kStateFile; }

MpsManager::TenantTurn::TenantTurn(MpsManager& manager, std::string name)
    : manager_(manager), name_(std::move(name)) {
  MutexLock lock(manager_.mu_);
  manager_.turn_cv_.wait(
      lock, [this]() REQUIRES(manager_.mu_) { return !manager_.busy_.contains(name_); });
  manager_.busy_.insert(name_);
}

MpsManager::TenantTurn::~TenantTurn() {
  {
    MutexLock lock(manager_.mu_);
    manager_.busy_.erase(name_);
  }
  manager_.turn_cv_.notify_all();
}

Status MpsManager::Start() {
  Status probe = Probe();
  if (!probe.ok()) {
    available_ = false;
    unavailable_ = probe.message();
    GS_LOG(kWarn, "mps", "MPS unavailable, tenants get the shared tier: %s", unavailable_.c_str());
  }
  return Recover();
}

Status MpsManager::Probe() {
  if (!host_.IsLinux()) return Unavailable("MPS runs on Linux only");
  auto path = host_.FindExecutable(options_.control_binary);
  if (!path.ok()) return path.status().WithContext("MPS control binary");
  config_.binary_path = *path;
  auto count = gpus_.DeviceCount();
  if (!count.ok()) return count.status().WithContext("cannot count GPUs");
  if (*count == 0) return Unavailable("no GPUs");
  for (int i = 0; i < *count; ++i) {
    auto mode = gpus_.GetComputeMode(i);
    if (!mode.ok()) return mode.status().WithContext("GPU " + std::to_string(i) + " compute mode");
    Status set = gpus_.CheckComputeModeSettable(i);
    if (!set.ok()) {
      return set.WithContext("cannot set the compute mode of GPU " + std::to_string(i));
    }
  }
  for (int i = 0; i < *count; ++i) {
    GS_ASSIGN_OR_RETURN(std::string uuid, gpus_.Uuid(i));
    const std::string socket = MpsGpuDir(options_.root, uuid) + "/pipe/control";
    if (socket.size() > kMaxSocketPath) {
      return InvalidArgument("MPS root " + options_.root + " is too long: the control socket " +
                             socket + " would exceed " + std::to_string(kMaxSocketPath) + " bytes");
    }
  }
  Status dirs = host_.MakeDirs(options_.root);
  if (!dirs.ok()) return dirs.WithContext("MPS root " + options_.root);
  available_ = true;
  unavailable_.clear();
  config_.protocol = ProbeProtocol();
  GS_LOG(kInfo, "mps", "event=mps_protocol protocol=%d binary=%s", config_.protocol,
         config_.binary_path.c_str());
  return Status::Ok();
}

int MpsManager::ProbeProtocol() {
  CommandSpec spec;
  spec.argv = {config_.binary_path, "-p", "3", "-h"};
  // The variable wins over -p (MPS v3 Interface): one the daemon inherited
  // must not answer for the binary.
  spec.env = {{"CUDA_MPS_PROTOCOL_VERSION", "3"}, {"CUDA_MPS_PIPE_DIRECTORY", options_.root}};
  spec.timeout_ns = options_.command_timeout_ns;
  auto r = host_.Run(spec);
  if (!r.ok() || r->timed_out) return 2;
  return (r->out + r->err).find("namespace") != std::string::npos ? 3 : 2;
}

std::shared_ptr<MpsControlDaemon> MpsManager::DaemonOf(const GpuRef& gpu) {
  MutexLock lock(mu_);
  auto& daemon = daemons_[gpu.uuid];
  if (!daemon) {
    daemon = std::make_shared<MpsControlDaemon>(gpu, config_, gpus_, host_, clock_,
                                                [this] { SaveState(); });
  }
  return daemon;
}

std::vector<std::shared_ptr<MpsControlDaemon>> MpsManager::AllDaemons() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<MpsControlDaemon>> out;
  out.reserve(daemons_.size());
  for (const auto& [uuid, daemon] : daemons_) out.push_back(daemon);
  return out;
}

Status MpsManager::Recover() {
  auto text = host_.ReadFile(StatePath());
  if (!text.ok() && text.status().code() != StatusCode::kNotFound) {
    return text.status().WithContext("MPS state " + StatePath());
  }
  MpsState state;
  if (text.ok()) {
    auto parsed = MpsState::Parse(*text);
    if (!parsed.ok()) return parsed.status().WithContext("MPS state " + StatePath());
    state = std::move(*parsed);
  }
  std::map<std::string, TenantSettings> settings;
  {
    MutexLock lock(mu_);
    for (MpsState::TenantRecord& t : state.tenants) {
      settings[t.name] = t.settings;
      tenants_[t.name] = Tenant{t.tier, std::move(t.reason), std::move(t.gpus), t.settings};
    }
  }
  // Re-adopt what is alive, restart what died under tenants, stop the rest.
  std::set<std::string> known;  // their directories under the root
  for (const MpsState::GpuRecord& g : state.gpus) {
    known.insert(MpsGpuDir(options_.root, g.uuid));
    DaemonOf({g.index, g.uuid})->Recover(g, settings, available_, unavailable_);
  }
  // Daemons under the root that the state does not know (a crash between
  // starting one and saving): nobody uses them.
  auto entries = host_.ListDir(options_.root);
  if (entries.ok()) {
    for (const std::string& dir : *entries) {
      if (dir == kStateFile || dir.starts_with(".") ||
          known.contains(MpsGpuDir(options_.root, dir))) {
        continue;
      }
      // `dir` is the GPU's directory name (MpsGpuDir), all the daemon needs.
      MpsControlDaemon orphan({-1, dir}, config_, gpus_, host_, clock_, nullptr);
      orphan.StopOrphan();
    }
  }
  SaveState();  // counted; an unwritable root leaves MPS unavailable, not the daemon down
  return Status::Ok();
}

StatusOr<std::vector<GpuRef>> MpsManager::ResolveGpus(std::string_view list) const {
  GS_ASSIGN_OR_RETURN(const int count, gpus_.DeviceCount());
  std::vector<std::string> uuids;
  uuids.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    GS_ASSIGN_OR_RETURN(std::string uuid, gpus_.Uuid(i));
    uuids.push_back(std::move(uuid));
  }
  GS_ASSIGN_OR_RETURN(
      const std::vector<int> indexes,
      ParseGpuSelector(list, uuids, {.allow_all = false, .reject_duplicates = true}));
  std::vector<GpuRef> refs;
  refs.reserve(indexes.size());
  for (int index : indexes) refs.push_back({index, uuids[static_cast<size_t>(index)]});
  return refs;
}

AcquireResult MpsManager::SharedEnv(const Tenant& tenant) {
  AcquireResult result;
  result.tier = tenant.tier;
  result.reason = tenant.reason;
  std::string all_uuids;
  for (const GpuRef& ref : tenant.gpus) {
    all_uuids += (all_uuids.empty() ? "" : ",") + ref.uuid;
    result.per_gpu.push_back({ref.index, ref.uuid, {{"CUDA_VISIBLE_DEVICES", ref.uuid}}});
  }
  result.env["CUDA_VISIBLE_DEVICES"] = all_uuids;
  return result;
}

StatusOr<AcquireResult> MpsManager::Acquire(const AcquireRequest& request) {
  GS_RETURN_IF_ERROR(ValidateTenantName(request.tenant));
  GS_RETURN_IF_ERROR(ValidateSettings(request.settings));
  GS_ASSIGN_OR_RETURN(std::vector<GpuRef> refs, ResolveGpus(request.gpus));
  TenantTurn turn(*this, request.tenant);

  std::optional<Tenant> existing;
  {
    MutexLock lock(mu_);
    if (auto it = tenants_.find(request.tenant); it != tenants_.end()) existing = it->second;
  }
  if (existing) {
    auto same = [](const GpuRef& a, const GpuRef& b) { return a.uuid == b.uuid; };
    if (!std::is_permutation(refs.begin(), refs.end(), existing->gpus.begin(), existing->gpus.end(),
                             same)) {
      return Status(StatusCode::kAlreadyExists,
                    "tenant '" + request.tenant + "' already holds other GPUs; release it first");
    }
    existing->settings = request.settings;
    AcquireResult result = SharedEnv(*existing);
    if (existing->tier == Tier::kMps) {
      result.per_gpu.clear();
      for (const GpuRef& ref : existing->gpus) {
        auto env = DaemonOf(ref)->AddTenant(request.tenant, request.settings);
        // A GPU whose daemon could not be brought up again keeps the tenant's
        // grant; the health check restarts it.
        result.per_gpu.push_back(env.ok() ? std::move(*env) : GpuEnv{ref.index, ref.uuid, {}});
      }
      result.env = result.per_gpu.empty() ? std::map<std::string, std::string>{}
                                          : result.per_gpu.front().env;
    }
    {
      MutexLock lock(mu_);
      tenants_[request.tenant] = *existing;
    }
    SaveState();
    return result;
  }

  Tenant tenant;
  tenant.gpus = refs;
  tenant.settings = request.settings;
  std::vector<GpuEnv> envs;
  if (!available_) {
    tenant.reason = "MPS unavailable: " + unavailable_;
  } else {
    Status failed;
    std::vector<std::shared_ptr<MpsControlDaemon>> joined;
    for (const GpuRef& ref : refs) {
      std::shared_ptr<MpsControlDaemon> daemon = DaemonOf(ref);
      auto env = daemon->AddTenant(request.tenant, request.settings);
      if (!env.ok()) {
        failed = env.status();
        break;
      }
      joined.push_back(std::move(daemon));
      envs.push_back(std::move(*env));
    }
    if (failed.ok()) {
      tenant.tier = Tier::kMps;
    } else {
      for (const auto& daemon : joined) daemon->RemoveTenant(request.tenant);
      envs.clear();
      tenant.reason = "MPS could not start: " + failed.message();
      GS_LOG(kWarn, "mps", "tenant %s gets the shared tier: %s", request.tenant.c_str(),
             tenant.reason.c_str());
    }
  }
  AcquireResult result = SharedEnv(tenant);
  if (tenant.tier == Tier::kMps) {
    result.per_gpu = std::move(envs);
    result.env = result.per_gpu.front().env;
  }
  {
    MutexLock lock(mu_);
    tenants_[request.tenant] = std::move(tenant);
  }
  SaveState();
  return result;
}

Status MpsManager::Release(std::string_view name) {
  TenantTurn turn(*this, std::string(name));
  std::vector<GpuRef> gpus;
  Tier tier = Tier::kShared;
  {
    MutexLock lock(mu_);
    auto it = tenants_.find(std::string(name));
    if (it == tenants_.end()) return NotFound("no MPS tenant '" + std::string(name) + "'");
    gpus = it->second.gpus;
    tier = it->second.tier;
  }
  if (tier == Tier::kMps) {
    for (const GpuRef& ref : gpus) DaemonOf(ref)->RemoveTenant(std::string(name));
  }
  {
    MutexLock lock(mu_);
    tenants_.erase(std::string(name));
  }
  SaveState();
  return Status::Ok();
}

StatusOr<AcquireResult> MpsManager::UpdateSettings(std::string_view name,
                                                   const TenantSettings& settings) {
  TenantTurn turn(*this, std::string(name));
  Tenant tenant;
  {
    MutexLock lock(mu_);
    auto it = tenants_.find(std::string(name));
    if (it == tenants_.end()) return NotFound("no MPS tenant '" + std::string(name) + "'");
    tenant = it->second;
  }
  TenantSettings merged = tenant.settings;
  if (settings.active_thread_percentage) {
    merged.active_thread_percentage = settings.active_thread_percentage;
  }
  if (settings.pinned_memory_limit) merged.pinned_memory_limit = settings.pinned_memory_limit;
  if (settings.client_priority) merged.client_priority = settings.client_priority;
  if (settings.sm_partition_percent) merged.sm_partition_percent = settings.sm_partition_percent;
  GS_RETURN_IF_ERROR(ValidateSettings(merged));
  tenant.settings = merged;
  {
    MutexLock lock(mu_);
    tenants_[std::string(name)].settings = merged;
  }
  AcquireResult result = SharedEnv(tenant);
  if (tenant.tier == Tier::kMps) {
    result.per_gpu.clear();
    for (const GpuRef& ref : tenant.gpus) {
      auto env = DaemonOf(ref)->UpdateTenant(std::string(name), merged, settings);
      result.per_gpu.push_back(env.ok() ? std::move(*env) : GpuEnv{ref.index, ref.uuid, {}});
    }
    result.env =
        result.per_gpu.empty() ? std::map<std::string, std::string>{} : result.per_gpu.front().env;
  }
  SaveState();
  return result;
}

Status MpsManager::TerminateClient(std::string_view gpu_text, pid_t client_pid) {
  if (client_pid <= 0) {
    return InvalidArgument("client_pid must be a positive pid, not " + std::to_string(client_pid));
  }
  GS_ASSIGN_OR_RETURN(std::vector<GpuRef> refs, ResolveGpus(gpu_text));
  if (refs.size() != 1) return InvalidArgument("terminate takes one GPU");
  return DaemonOf(refs.front())->TerminateClient(client_pid);
}

void MpsManager::CheckHealth() {
  for (const auto& daemon : AllDaemons()) daemon->CheckHealth(available_);
}

MpsStatus MpsManager::GetStatus() const {
  MpsStatus status;
  status.available = available_;
  status.reason = unavailable_;
  status.protocol = available_ ? config_.protocol : 0;
  status.control_binary =
      config_.binary_path.empty() ? options_.control_binary : config_.binary_path;
  status.root = options_.root;
  {
    MutexLock lock(save_mu_);
    status.save_failures = save_failures_;
    status.last_save_error = last_save_error_;
  }
  for (const auto& daemon : AllDaemons()) {
    const std::optional<MpsControlDaemon::Snapshot> s = daemon->Published();
    if (!s) continue;
    GpuMpsStatus g;
    g.index = s->record.index;
    g.uuid = s->record.uuid;
    g.running = s->running;
    g.control_pid = s->record.control_pid;
    g.pipe_dir = daemon->PipeDir();
    g.log_dir = daemon->LogDir();
    g.previous_compute_mode = s->record.previous_mode;
    g.tenants = s->record.tenants;
    g.health = s->health;
    g.last_error = s->last_error;
    g.restarts = s->record.restarts;
    g.last_check_ns = s->last_check_ns;
    g.sm_partitions = s->sm_partitions;
    status.gpus.push_back(std::move(g));
  }
  std::sort(status.gpus.begin(), status.gpus.end(),
            [](const GpuMpsStatus& a, const GpuMpsStatus& b) { return a.index < b.index; });
  return status;
}

std::vector<TenantInfo> MpsManager::Tenants() const {
  MutexLock lock(mu_);
  std::vector<TenantInfo> out;
  for (const auto& [name, tenant] : tenants_) {
    TenantInfo info{name, tenant.tier, tenant.reason, {}, {}, tenant.settings};
    for (const GpuRef& ref : tenant.gpus) {
      info.gpus.push_back(ref.index);
      info.uuids.push_back(ref.uuid);
    }
    out.push_back(std::move(info));
  }
  return out;
}

void MpsManager::SaveState() {
  MutexLock save(save_mu_);
  MpsState state;
  std::vector<std::shared_ptr<MpsControlDaemon>> daemons;
  {
    MutexLock lock(mu_);
    for (const auto& [name, tenant] : tenants_) {
      state.tenants.push_back({name, tenant.tier, tenant.reason, tenant.gpus, tenant.settings});
    }
    for (const auto& [uuid, daemon] : daemons_) daemons.push_back(daemon);
  }
  for (const auto& daemon : daemons) {
    if (auto s = daemon->Published()) state.gpus.push_back(std::move(s->record));
  }
  Status written = host_.WriteFileAtomic(StatePath(), state.Serialise());
  if (!written.ok()) {
    GS_LOG(kError, "mps", "cannot save MPS state (a daemon restart will lose it): %s",
           written.message().c_str());
    ++save_failures_;
    last_save_error_ = written.message();
  }
}

}  // namespace gpuslice::daemon::mps
