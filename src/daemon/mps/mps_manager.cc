#include "daemon/mps/mps_manager.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <sstream>
#include <utility>

#include "common/log.h"
#include "common/quantity.h"
#include "daemon/gpu/gpu_selector.h"
#include "daemon/mps/mps_v3.h"

namespace gpuslice::daemon::mps {
namespace {

constexpr char kPidFile[] = "nvidia-cuda-mps-control.pid";
constexpr char kStateFile[] = "state.json";
constexpr char kStartLog[] = "gpuslice-start.log";  // in the log directory
// sun_path holds 108 bytes; the control socket is <pipe dir>/control.
constexpr size_t kMaxSocketPath = 107;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// isdigit takes an unsigned char's value: a plain char above 0x7f is negative.
bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// Whitespace-separated integers of a control reply ("1234\n5678\n"); words
// that are not numbers are skipped.
std::vector<pid_t> ParsePids(std::string_view text) {
  std::vector<pid_t> pids;
  std::istringstream in{std::string(text)};
  std::string word;
  while (in >> word) {
    if (word.size() > 9 || !AllDigits(word)) continue;
    const int pid = std::stoi(word);
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

// "4G", "512M": how MPS takes a pinned memory limit. REQUIRES: whole MiB.
std::string MpsQuantity(uint64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "G";
  return std::to_string(bytes / kMiB) + "M";
}

}  // namespace

std::string_view HealthName(Health health) {
  switch (health) {
    case Health::kHealthy:
      return "healthy";
    case Health::kUnhealthy:
      return "unhealthy";
    case Health::kUnknown:
      break;
  }
  return "unknown";
}

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
  if (s.client_priority && *s.client_priority != 0 && *s.client_priority != 1) {
    return InvalidArgument("client_priority must be 0 (normal) or 1 (below normal), not " +
                           std::to_string(*s.client_priority));
  }
  return Status::Ok();
}

MpsManager::MpsManager(MpsOptions options, GpuModeControl& gpus, MpsHost& host, const Clock& clock)
    : options_(std::move(options)), gpus_(gpus), host_(host), clock_(clock) {}

std::string MpsManager::StatePath() const { return options_.root + "/" + kStateFile; }
std::string MpsManager::PipeDir(const std::string& uuid) const {
  return options_.root + "/" + uuid + "/pipe";
}
std::string MpsManager::LogDir(const std::string& uuid) const {
  return options_.root + "/" + uuid + "/log";
}

Status MpsManager::Start() {
  std::lock_guard lock(mu_);
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
  binary_path_ = *path;
  auto count = gpus_.DeviceCount();
  if (!count.ok()) return count.status().WithContext("cannot count GPUs");
  if (*count == 0) return Unavailable("no GPUs");
  for (int i = 0; i < *count; ++i) {
    // Setting the mode a GPU already has tests the permission without a change.
    auto mode = gpus_.GetComputeMode(i);
    if (!mode.ok()) return mode.status().WithContext("GPU " + std::to_string(i) + " compute mode");
    Status set = gpus_.SetComputeMode(i, *mode);
    if (!set.ok()) {
      return set.WithContext("cannot set the compute mode of GPU " + std::to_string(i));
    }
  }
  for (int i = 0; i < *count; ++i) {
    GS_ASSIGN_OR_RETURN(std::string uuid, gpus_.Uuid(i));
    const std::string socket = PipeDir(uuid) + "/control";
    if (socket.size() > kMaxSocketPath) {
      return InvalidArgument("MPS root " + options_.root + " is too long: the control socket " +
                             socket + " would exceed " + std::to_string(kMaxSocketPath) + " bytes");
    }
  }
  Status dirs = host_.MakeDirs(options_.root);
  if (!dirs.ok()) return dirs.WithContext("MPS root " + options_.root);
  available_ = true;
  unavailable_.clear();
  protocol_ = ProbeProtocol();
  GS_LOG(kInfo, "mps", "event=mps_protocol protocol=%d binary=%s", protocol_, binary_path_.c_str());
  return Status::Ok();
}

int MpsManager::ProbeProtocol() {
  CommandSpec spec;
  spec.argv = {binary_path_, "-p", "3", "-h"};
  // The variable wins over -p (MPS v3 Interface): one the daemon inherited
  // must not answer for the binary.
  spec.env = {{"CUDA_MPS_PROTOCOL_VERSION", "3"}, {"CUDA_MPS_PIPE_DIRECTORY", options_.root}};
  spec.timeout_ns = options_.command_timeout_ns;
  auto r = host_.Run(spec);
  if (!r.ok() || r->timed_out) return 2;
  return (r->out + r->err).find("namespace") != std::string::npos ? 3 : 2;
}

Status MpsManager::Recover() {
  auto text = host_.ReadFile(StatePath());
  if (!text.ok() && text.status().code() != StatusCode::kNotFound) {
    return text.status().WithContext("MPS state " + StatePath());
  }
  if (text.ok()) {
    auto state = MpsState::Parse(*text);
    if (!state.ok()) return state.status().WithContext("MPS state " + StatePath());
    for (MpsState::TenantRecord& t : state->tenants) {
      Tenant tenant;
      tenant.tier = t.tier;
      tenant.reason = std::move(t.reason);
      tenant.gpus = std::move(t.gpus);
      tenant.settings = t.settings;
      tenants_[t.name] = std::move(tenant);
    }
    for (MpsState::GpuRecord& g : state->gpus) {
      GpuState gpu;
      gpu.index = g.index;
      gpu.uuid = g.uuid;
      gpu.control_pid = g.control_pid;
      gpu.previous_mode = g.previous_mode;
      gpu.restarts = g.restarts;
      gpu.protocol = g.protocol;
      gpu.tenants.insert(g.tenants.begin(), g.tenants.end());
      gpu_state_[gpu.uuid] = std::move(gpu);
    }
  }

  // Re-adopt what is alive, restart what died under tenants, stop the rest.
  for (auto it = gpu_state_.begin(); it != gpu_state_.end();) {
    GpuState& gpu = it->second;
    auto pid = ReadPidFile(gpu.uuid);
    gpu.control_pid = pid.ok() && host_.ProcessAlive(*pid) ? *pid : 0;
    if (gpu.tenants.empty()) {
      GS_LOG(kInfo, "mps", "GPU %s: no tenants after restart, stopping its MPS daemon",
             gpu.uuid.c_str());
      TearDown(gpu);
      it = gpu_state_.erase(it);
      continue;
    }
    if (gpu.control_pid != 0) {
      GS_LOG(kInfo, "mps", "GPU %s: re-adopted MPS control daemon pid %d", gpu.uuid.c_str(),
             static_cast<int>(gpu.control_pid));
    } else if (available_) {
      Status started = StartDaemon(gpu);
      if (started.ok()) {
        ++gpu.restarts;
      } else {
        gpu.health = Health::kUnhealthy;
        gpu.last_error = started.message();
      }
    } else {
      gpu.health = Health::kUnhealthy;
      gpu.last_error = "MPS daemon gone and MPS is unavailable: " + unavailable_;
    }
    ++it;
  }

  // Daemons under the root that the state does not know (a crash between
  // starting one and saving): nobody uses them.
  auto entries = host_.ListDir(options_.root);
  if (entries.ok()) {
    for (const std::string& uuid : *entries) {
      if (uuid == kStateFile || uuid.starts_with(".") || gpu_state_.contains(uuid)) continue;
      auto pid = ReadPidFile(uuid);
      if (!pid.ok() || !host_.ProcessAlive(*pid)) continue;
      GS_LOG(kWarn, "mps", "stopping orphan MPS control daemon pid %d of %s",
             static_cast<int>(*pid), uuid.c_str());
      GpuState orphan;
      orphan.uuid = uuid;
      orphan.control_pid = *pid;
      StopDaemon(orphan);
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

std::map<std::string, std::string> MpsManager::ControlEnv(const GpuState& gpu) const {
  return {{"CUDA_VISIBLE_DEVICES", gpu.uuid},
          {"CUDA_MPS_PIPE_DIRECTORY", PipeDir(gpu.uuid)},
          {"CUDA_MPS_LOG_DIRECTORY", LogDir(gpu.uuid)}};
}

StatusOr<std::string> MpsManager::Control(const GpuState& gpu, const std::string& command) {
  CommandSpec spec;
  spec.argv = {binary_path_.empty() ? options_.control_binary : binary_path_};
  spec.env = ControlEnv(gpu);
  spec.stdin_text = command + "\n";
  spec.timeout_ns = options_.command_timeout_ns;
  auto result = host_.Run(spec);
  if (!result.ok()) return result.status().WithContext("MPS control '" + command + "'");
  if (result->timed_out) {
    return Unavailable("MPS control '" + command + "' on " + gpu.uuid + " timed out after " +
                       std::to_string(options_.command_timeout_ns / 1'000'000) + " ms");
  }
  if (result->exit_code != 0) {
    return Unavailable("MPS control '" + command + "' on " + gpu.uuid + " exited with " +
                       std::to_string(result->exit_code) + ": " +
                       std::string(Trim(result->err.empty() ? result->out : result->err)));
  }
  return std::move(result->out);
}

StatusOr<pid_t> MpsManager::ReadPidFile(const std::string& uuid) {
  GS_ASSIGN_OR_RETURN(std::string text, host_.ReadFile(PipeDir(uuid) + "/" + kPidFile));
  const std::vector<pid_t> pids = ParsePids(text);
  if (pids.size() != 1) return InvalidArgument("pid file of " + uuid + " holds '" + text + "'");
  return pids.front();
}

bool MpsManager::WaitUntil(int64_t timeout_ns, const std::function<bool()>& condition) {
  const int64_t deadline = clock_.NowNs() + timeout_ns;
  // The attempt bound keeps a clock that does not move (a fake) from spinning.
  const int64_t attempts = timeout_ns / std::max<int64_t>(options_.poll_interval_ns, 1) + 1;
  for (int64_t i = 0; i < attempts; ++i) {
    if (condition()) return true;
    if (clock_.NowNs() >= deadline) break;
    host_.SleepNs(options_.poll_interval_ns);
  }
  return condition();
}

Status MpsManager::StartDaemon(GpuState& gpu) {
  gpu.control_pid = 0;
  GS_RETURN_IF_ERROR(host_.MakeDirs(PipeDir(gpu.uuid)));
  GS_RETURN_IF_ERROR(host_.MakeDirs(LogDir(gpu.uuid)));
  GS_RETURN_IF_ERROR(host_.RemoveFile(PipeDir(gpu.uuid) + "/" + kPidFile));  // stale
  CommandSpec spec;
  spec.argv = {binary_path_, "-d"};
  spec.env = ControlEnv(gpu);
  spec.timeout_ns = options_.start_timeout_ns;
  // MPS v3 where the binary speaks it: one server and a namespace per tenant
  // of the GPU, from a configuration file (docs/daemon.md "MPS v3").
  gpu.protocol = protocol_ == 3 ? 3 : 2;
  spec.env["CUDA_MPS_PROTOCOL_VERSION"] = std::to_string(gpu.protocol);
  if (gpu.protocol == 3) {
    std::vector<std::pair<std::string, TenantSettings>> namespaces;
    for (const std::string& name : gpu.tenants) {
      auto t = tenants_.find(name);
      if (t != tenants_.end() && UsesNamespace(gpu, name, t->second)) {
        namespaces.emplace_back(name, t->second.settings);
      }
    }
    const std::string config = options_.root + "/" + gpu.uuid + "/mps.toml";
    GS_RETURN_IF_ERROR(host_.WriteFileAtomic(config, V3Config(gpu.uuid, namespaces)));
    spec.argv.insert(spec.argv.end(), {"-p", "3", "-a", config});
  }
  // What the foreground invocation says (its verdict on failure) goes to a
  // file: the daemonised child inherits the descriptors.
  const std::string start_log = LogDir(gpu.uuid) + "/" + kStartLog;
  (void)host_.RemoveFile(start_log);
  spec.output_file = start_log;
  GS_ASSIGN_OR_RETURN(CommandResult result, host_.Run(spec));
  const std::string what = "'" + binary_path_ + " -d' for GPU " + std::to_string(gpu.index);
  if (result.timed_out) return Unavailable(what + " did not return in time");
  if (result.exit_code != 0) {
    auto said = host_.ReadFile(start_log);
    const std::string_view message = said.ok() ? Trim(*said) : "";
    return Unavailable(
        what + " exited with " + std::to_string(result.exit_code) + ": " +
        (message.empty() ? "see " + LogDir(gpu.uuid) + "/control.log" : std::string(message)));
  }
  pid_t pid = 0;
  const bool up = WaitUntil(options_.start_timeout_ns, [&] {
    auto read = ReadPidFile(gpu.uuid);
    if (!read.ok() || !host_.ProcessAlive(*read)) return false;
    pid = *read;
    return true;
  });
  if (!up) return Unavailable(what + ": no live pid in " + PipeDir(gpu.uuid) + "/" + kPidFile);
  gpu.control_pid = pid;
  gpu.health = Health::kHealthy;
  gpu.last_error.clear();
  gpu.last_check_ns = clock_.NowNs();
  GS_LOG(kInfo, "mps", "GPU %d (%s): MPS control daemon pid %d", gpu.index, gpu.uuid.c_str(),
         static_cast<int>(pid));
  return Status::Ok();
}

void MpsManager::StopDaemon(GpuState& gpu) {
  pid_t pid = gpu.control_pid;
  if (pid == 0) {
    auto read = ReadPidFile(gpu.uuid);
    if (read.ok()) pid = *read;
  }
  if (pid != 0 && host_.ProcessAlive(pid)) {
    auto quit = Control(gpu, "quit");
    if (!quit.ok()) GS_LOG(kWarn, "mps", "%s", quit.status().message().c_str());
    if (!WaitUntil(options_.stop_timeout_ns, [&] { return !host_.ProcessAlive(pid); })) {
      GS_LOG(kWarn, "mps", "MPS control daemon pid %d ignored quit; killing it",
             static_cast<int>(pid));
      (void)host_.Kill(pid, SIGKILL);
      WaitUntil(options_.stop_timeout_ns, [&] { return !host_.ProcessAlive(pid); });
    }
  }
  (void)host_.RemoveFile(PipeDir(gpu.uuid) + "/" + kPidFile);
  gpu.control_pid = 0;
}

Status MpsManager::BringUp(GpuState& gpu) {
  GS_ASSIGN_OR_RETURN(gpu.previous_mode, gpus_.GetComputeMode(gpu.index));
  GS_RETURN_IF_ERROR(gpus_.SetComputeMode(gpu.index, ComputeMode::kExclusiveProcess));
  // Saved before the daemon starts, so a crash in between leaves enough to
  // restore the compute mode.
  gpu_state_[gpu.uuid] = gpu;
  SaveState();
  Status started = StartDaemon(gpu);
  gpu_state_.erase(gpu.uuid);
  if (!started.ok()) {
    TearDown(gpu);
    SaveState();
  }
  return started;
}

void MpsManager::TearDown(GpuState& gpu) {
  StopDaemon(gpu);
  Status restored = gpus_.SetComputeMode(gpu.index, gpu.previous_mode);
  if (!restored.ok()) {
    GS_LOG(kWarn, "mps", "GPU %d: cannot restore compute mode %s: %s", gpu.index,
           std::string(ComputeModeName(gpu.previous_mode)).c_str(), restored.message().c_str());
  }
}

bool MpsManager::UsesNamespace(const GpuState& gpu, const std::string& name,
                               const Tenant& tenant) const {
  return gpu.protocol == 3 && !tenant.v2_gpus.contains(gpu.uuid) &&
         V3TenantPipeDir(PipeDir(gpu.uuid), name).size() + 8 <= kMaxSocketPath;  // "/control"
}

void MpsManager::EnsureNamespace(GpuState& gpu, const std::string& name, Tenant& tenant) {
  if (!UsesNamespace(gpu, name, tenant) || gpu.control_pid == 0) return;
  auto created = Control(gpu, V3NamespaceCommand("create", name, &tenant.settings));
  if (created.ok() && created->starts_with("Error") &&
      created->find("exists") != std::string::npos) {
    created = Control(gpu, V3NamespaceCommand("set", name, &tenant.settings));
  }
  if (created.ok() && !created->starts_with("Error")) return;
  const std::string why = created.ok() ? std::string(Trim(*created)) : created.status().message();
  GS_LOG(kWarn, "mps", "GPU %s: no MPS v3 namespace for tenant %s (%s); it uses v2 limits there",
         gpu.uuid.c_str(), name.c_str(), why.c_str());
  tenant.v2_gpus.insert(gpu.uuid);
}

AcquireResult MpsManager::EnvFor(const std::string& name, const Tenant& tenant) const {
  AcquireResult result;
  result.tier = tenant.tier;
  result.reason = tenant.reason;
  std::string all_uuids;
  for (const GpuRef& ref : tenant.gpus) {
    all_uuids += (all_uuids.empty() ? "" : ",") + ref.uuid;
    GpuEnv gpu_env{ref.index, ref.uuid, {{"CUDA_VISIBLE_DEVICES", ref.uuid}}};
    auto state = gpu_state_.find(ref.uuid);
    if (tenant.tier == Tier::kMps && state != gpu_state_.end() &&
        UsesNamespace(state->second, name, tenant)) {
      // Its namespace holds its limits; the socket chooses the namespace.
      gpu_env.env["CUDA_MPS_PIPE_DIRECTORY"] = V3TenantPipeDir(PipeDir(ref.uuid), name);
      gpu_env.env["CUDA_MPS_LOG_DIRECTORY"] = LogDir(ref.uuid);
    } else if (tenant.tier == Tier::kMps) {
      auto& env = gpu_env.env;
      env["CUDA_MPS_PIPE_DIRECTORY"] = PipeDir(ref.uuid);
      env["CUDA_MPS_LOG_DIRECTORY"] = LogDir(ref.uuid);
      const TenantSettings& s = tenant.settings;
      if (s.active_thread_percentage) {
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(*s.active_thread_percentage);
      }
      // The daemon sees one GPU, so to its clients it is device 0.
      if (s.pinned_memory_limit) {
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + MpsQuantity(*s.pinned_memory_limit);
      }
      if (s.client_priority) env["CUDA_MPS_CLIENT_PRIORITY"] = std::to_string(*s.client_priority);
    }
    result.per_gpu.push_back(std::move(gpu_env));
  }
  if (tenant.tier == Tier::kMps) {
    if (!result.per_gpu.empty()) result.env = result.per_gpu.front().env;
  } else {
    result.env["CUDA_VISIBLE_DEVICES"] = all_uuids;
  }
  return result;
}

StatusOr<AcquireResult> MpsManager::Acquire(const AcquireRequest& request) {
  GS_RETURN_IF_ERROR(ValidateTenantName(request.tenant));
  GS_RETURN_IF_ERROR(ValidateSettings(request.settings));
  std::lock_guard lock(mu_);
  GS_ASSIGN_OR_RETURN(std::vector<GpuRef> refs, ResolveGpus(request.gpus));

  if (auto it = tenants_.find(request.tenant); it != tenants_.end()) {
    Tenant& existing = it->second;
    auto same = [](const GpuRef& a, const GpuRef& b) { return a.uuid == b.uuid; };
    if (!std::is_permutation(refs.begin(), refs.end(), existing.gpus.begin(), existing.gpus.end(),
                             same)) {
      return Status(StatusCode::kAlreadyExists,
                    "tenant '" + request.tenant + "' already holds other GPUs; release it first");
    }
    existing.settings = request.settings;
    for (const GpuRef& ref : existing.gpus) {
      if (auto g = gpu_state_.find(ref.uuid); g != gpu_state_.end()) {
        EnsureNamespace(g->second, request.tenant, existing);
      }
    }
    SaveState();
    return EnvFor(request.tenant, existing);
  }

  Tenant tenant;
  tenant.gpus = refs;
  tenant.settings = request.settings;
  if (!available_) {
    tenant.reason = "MPS unavailable: " + unavailable_;
  } else {
    std::vector<std::string> brought_up;
    Status failed;
    for (const GpuRef& ref : refs) {
      if (gpu_state_.contains(ref.uuid)) continue;  // shared; the health check heals it
      GpuState gpu;
      gpu.index = ref.index;
      gpu.uuid = ref.uuid;
      failed = BringUp(gpu);
      if (!failed.ok()) break;
      gpu_state_[gpu.uuid] = std::move(gpu);
      brought_up.push_back(ref.uuid);
    }
    if (failed.ok()) {
      tenant.tier = Tier::kMps;
      for (const GpuRef& ref : refs) {
        GpuState& gpu = gpu_state_[ref.uuid];
        gpu.tenants.insert(request.tenant);
        EnsureNamespace(gpu, request.tenant, tenant);
      }
    } else {
      for (const std::string& uuid : brought_up) {
        TearDown(gpu_state_[uuid]);
        gpu_state_.erase(uuid);
      }
      tenant.reason = "MPS could not start: " + failed.message();
      GS_LOG(kWarn, "mps", "tenant %s gets the shared tier: %s", request.tenant.c_str(),
             tenant.reason.c_str());
    }
  }
  Tenant& stored = tenants_[request.tenant] = std::move(tenant);
  SaveState();
  return EnvFor(request.tenant, stored);
}

Status MpsManager::Release(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = tenants_.find(std::string(name));
  if (it == tenants_.end()) return NotFound("no MPS tenant '" + std::string(name) + "'");
  for (const GpuRef& ref : it->second.gpus) {
    auto gpu = gpu_state_.find(ref.uuid);
    if (gpu == gpu_state_.end()) continue;
    gpu->second.tenants.erase(it->first);
    if (gpu->second.tenants.empty()) {
      TearDown(gpu->second);
      gpu_state_.erase(gpu);
    } else if (UsesNamespace(gpu->second, it->first, it->second) && gpu->second.control_pid != 0) {
      // Its clients keep their limits; no new one joins the namespace.
      auto deleted = Control(gpu->second, V3NamespaceCommand("delete", it->first, nullptr));
      if (!deleted.ok() || deleted->starts_with("Error")) {
        GS_LOG(kWarn, "mps", "GPU %s: cannot delete the namespace of %s: %s",
               gpu->second.uuid.c_str(), it->first.c_str(),
               deleted.ok() ? deleted->c_str() : deleted.status().message().c_str());
      }
    }
  }
  tenants_.erase(it);
  SaveState();
  return Status::Ok();
}

StatusOr<AcquireResult> MpsManager::UpdateSettings(std::string_view name,
                                                   const TenantSettings& settings) {
  std::lock_guard lock(mu_);
  auto it = tenants_.find(std::string(name));
  if (it == tenants_.end()) return NotFound("no MPS tenant '" + std::string(name) + "'");
  TenantSettings merged = it->second.settings;
  if (settings.active_thread_percentage) {
    merged.active_thread_percentage = settings.active_thread_percentage;
  }
  if (settings.pinned_memory_limit) merged.pinned_memory_limit = settings.pinned_memory_limit;
  if (settings.client_priority) merged.client_priority = settings.client_priority;
  GS_RETURN_IF_ERROR(ValidateSettings(merged));
  Tenant& tenant = it->second;
  tenant.settings = merged;

  if (tenant.tier == Tier::kMps) {
    for (const GpuRef& ref : tenant.gpus) {
      auto gpu = gpu_state_.find(ref.uuid);
      if (gpu != gpu_state_.end() && UsesNamespace(gpu->second, std::string(name), tenant)) {
        EnsureNamespace(gpu->second, std::string(name), tenant);  // for its new clients
        continue;
      }
      if (gpu == gpu_state_.end() || gpu->second.tenants.size() != 1 ||
          gpu->second.control_pid == 0) {
        continue;  // other tenants share its servers: their limits must not change
      }
      auto servers = Control(gpu->second, "get_server_list");
      if (!servers.ok()) {
        GS_LOG(kWarn, "mps", "%s", servers.status().message().c_str());
        continue;
      }
      for (pid_t server : ParsePids(*servers)) {
        std::vector<std::string> commands;
        if (settings.active_thread_percentage) {
          commands.push_back("set_active_thread_percentage " + std::to_string(server) + " " +
                             std::to_string(*merged.active_thread_percentage));
        }
        if (settings.pinned_memory_limit) {
          commands.push_back("set_device_pinned_mem_limit " + std::to_string(server) + " 0 " +
                             MpsQuantity(*merged.pinned_memory_limit));
        }
        for (const std::string& command : commands) {
          auto done = Control(gpu->second, command);
          if (!done.ok()) GS_LOG(kWarn, "mps", "%s", done.status().message().c_str());
        }
      }
    }
  }
  SaveState();
  return EnvFor(std::string(name), tenant);
}

Status MpsManager::TerminateClient(std::string_view gpu_text, pid_t client_pid) {
  if (client_pid <= 0) {
    return InvalidArgument("client_pid must be a positive pid, not " + std::to_string(client_pid));
  }
  std::lock_guard lock(mu_);
  GS_ASSIGN_OR_RETURN(std::vector<GpuRef> refs, ResolveGpus(gpu_text));
  if (refs.size() != 1) return InvalidArgument("terminate takes one GPU");
  auto gpu = gpu_state_.find(refs.front().uuid);
  if (gpu == gpu_state_.end() || gpu->second.control_pid == 0) {
    return NotFound("no MPS daemon runs on GPU " + std::to_string(refs.front().index));
  }
  GS_ASSIGN_OR_RETURN(std::string servers, Control(gpu->second, "get_server_list"));
  for (pid_t server : ParsePids(servers)) {
    GS_ASSIGN_OR_RETURN(std::string clients,
                        Control(gpu->second, "get_client_list " + std::to_string(server)));
    const std::vector<pid_t> pids = ParsePids(clients);
    if (std::find(pids.begin(), pids.end(), client_pid) == pids.end()) continue;
    GS_ASSIGN_OR_RETURN(std::string reply,
                        Control(gpu->second, "terminate_client " + std::to_string(server) + " " +
                                                 std::to_string(client_pid)));
    (void)reply;
    return Status::Ok();
  }
  return NotFound("no MPS client " + std::to_string(client_pid) + " on GPU " +
                  std::to_string(refs.front().index));
}

void MpsManager::CheckHealth() {
  std::lock_guard lock(mu_);
  bool changed = false;
  for (auto& [uuid, gpu] : gpu_state_) {
    gpu.last_check_ns = clock_.NowNs();
    if (gpu.control_pid != 0 && host_.ProcessAlive(gpu.control_pid)) {
      auto reply = Control(gpu, "get_server_list");
      if (reply.ok()) {
        gpu.health = Health::kHealthy;
        gpu.last_error.clear();
        continue;
      }
      gpu.last_error = reply.status().message();
      GS_LOG(kWarn, "mps", "GPU %d: MPS control unresponsive, restarting it: %s", gpu.index,
             gpu.last_error.c_str());
      const pid_t pid = gpu.control_pid;
      (void)host_.Kill(pid, SIGKILL);
      WaitUntil(options_.stop_timeout_ns, [&] { return !host_.ProcessAlive(pid); });
    } else {
      gpu.last_error = gpu.control_pid != 0 ? "MPS control daemon pid " +
                                                  std::to_string(gpu.control_pid) + " is gone"
                                            : "MPS control daemon not running";
      GS_LOG(kWarn, "mps", "GPU %d: %s, restarting it", gpu.index, gpu.last_error.c_str());
    }
    gpu.health = Health::kUnhealthy;
    changed = true;
    if (!available_) continue;  // nothing to start it with
    const std::string why = gpu.last_error;
    Status started = StartDaemon(gpu);
    if (started.ok()) {
      ++gpu.restarts;
      gpu.last_error = "restarted: " + why;
    } else {
      gpu.health = Health::kUnhealthy;
      gpu.last_error = started.message();
    }
  }
  if (changed) SaveState();
}

MpsStatus MpsManager::GetStatus() const {
  std::lock_guard lock(mu_);
  MpsStatus status;
  status.available = available_;
  status.reason = unavailable_;
  status.protocol = available_ ? protocol_ : 0;
  status.control_binary = binary_path_.empty() ? options_.control_binary : binary_path_;
  status.root = options_.root;
  status.save_failures = save_failures_;
  status.last_save_error = last_save_error_;
  for (const auto& [uuid, gpu] : gpu_state_) {
    GpuMpsStatus g;
    g.index = gpu.index;
    g.uuid = uuid;
    g.running = gpu.control_pid != 0;
    g.control_pid = gpu.control_pid;
    g.pipe_dir = PipeDir(uuid);
    g.log_dir = LogDir(uuid);
    g.previous_compute_mode = gpu.previous_mode;
    g.tenants.assign(gpu.tenants.begin(), gpu.tenants.end());
    g.health = gpu.health;
    g.last_error = gpu.last_error;
    g.restarts = gpu.restarts;
    g.last_check_ns = gpu.last_check_ns;
    status.gpus.push_back(std::move(g));
  }
  std::sort(status.gpus.begin(), status.gpus.end(),
            [](const GpuMpsStatus& a, const GpuMpsStatus& b) { return a.index < b.index; });
  return status;
}

std::vector<TenantInfo> MpsManager::Tenants() const {
  std::lock_guard lock(mu_);
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
  if (Status s = Save(); !s.ok()) {
    ++save_failures_;
    last_save_error_ = s.message();
  }
}

Status MpsManager::Save() {
  MpsState state;
  for (const auto& [name, tenant] : tenants_) {
    state.tenants.push_back({name, tenant.tier, tenant.reason, tenant.gpus, tenant.settings});
  }
  for (const auto& [uuid, gpu] : gpu_state_) {
    state.gpus.push_back({gpu.index,
                          uuid,
                          gpu.control_pid,
                          gpu.previous_mode,
                          gpu.restarts,
                          gpu.protocol,
                          {gpu.tenants.begin(), gpu.tenants.end()}});
  }
  Status written = host_.WriteFileAtomic(StatePath(), state.Serialise());
  if (!written.ok()) {
    GS_LOG(kError, "mps", "cannot save MPS state (a daemon restart will lose it): %s",
           written.message().c_str());
  }
  return written;
}

}  // namespace gpuslice::daemon::mps
