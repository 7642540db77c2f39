#include "daemon/mps/mps_control_daemon.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <sstream>
#include <utility>

#include "common/log.h"
#include "common/quantity.h"
#include "daemon/mps/mps_v3.h"

namespace gpuslice::daemon::mps {
namespace {

constexpr char kPidFile[] = "nvidia-cuda-mps-control.pid";
constexpr char kStartLog[] = "gpuslice-start.log";  // in the log directory
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

MpsControlDaemon::MpsControlDaemon(GpuRef gpu, const MpsDaemonConfig& config, GpuModeControl& gpus,
                                   MpsHost& host, const Clock& clock, std::function<void()> save)
    : gpu_(std::move(gpu)),
      config_(config),
      gpus_(gpus),
      host_(host),
      clock_(clock),
      save_(std::move(save)) {}

std::string MpsGpuDir(const std::string& root, const std::string& uuid) {
  return root + "/" + uuid.substr(0, 12);
}

std::string MpsControlDaemon::PipeDir() const {
  return MpsGpuDir(config_.options.root, gpu_.uuid) + "/pipe";
}
std::string MpsControlDaemon::LogDir() const {
  return MpsGpuDir(config_.options.root, gpu_.uuid) + "/log";
}

std::map<std::string, std::string> MpsControlDaemon::ControlEnv() const {
  return {{"CUDA_VISIBLE_DEVICES", gpu_.uuid},
          {"CUDA_MPS_PIPE_DIRECTORY", PipeDir()},
          {"CUDA_MPS_LOG_DIRECTORY", LogDir()}};
}

StatusOr<std::string> MpsControlDaemon::Control(const std::string& command) {
  const MpsOptions& o = config_.options;
  CommandSpec spec;
  spec.argv = {config_.binary_path.empty() ? o.control_binary : config_.binary_path};
  spec.env = ControlEnv();
  spec.stdin_text = command + "\n";
  spec.timeout_ns = o.command_timeout_ns;
  auto result = host_.Run(spec);
  if (!result.ok()) return result.status().WithContext("MPS control '" + command + "'");
  if (result->timed_out) {
    return Unavailable("MPS control '" + command + "' on " + gpu_.uuid + " timed out after " +
                       std::to_string(o.command_timeout_ns / 1'000'000) + " ms");
  }
  if (result->exit_code != 0) {
    return Unavailable("MPS control '" + command + "' on " + gpu_.uuid + " exited with " +
                       std::to_string(result->exit_code) + ": " +
                       std::string(Trim(result->err.empty() ? result->out : result->err)));
  }
  return std::move(result->out);
}

StatusOr<pid_t> MpsControlDaemon::ReadPidFile() const {
  GS_ASSIGN_OR_RETURN(std::string text, host_.ReadFile(PipeDir() + "/" + kPidFile));
  const std::vector<pid_t> pids = ParsePids(text);
  if (pids.size() != 1)
    return InvalidArgument("pid file of " + gpu_.uuid + " holds '" + text + "'");
  return pids.front();
}

bool MpsControlDaemon::WaitUntil(int64_t timeout_ns, const std::function<bool()>& condition) {
  const int64_t poll = std::max<int64_t>(config_.options.poll_interval_ns, 1);
  const int64_t deadline = clock_.NowNs() + timeout_ns;
  // The attempt bound keeps a clock that does not move (a fake) from spinning.
  const int64_t attempts = timeout_ns / poll + 1;
  for (int64_t i = 0; i < attempts; ++i) {
    if (condition()) return true;
    if (clock_.NowNs() >= deadline) break;
    host_.SleepNs(poll);
  }
  return condition();
}

Status MpsControlDaemon::StartDaemon() {
  control_pid_ = 0;
  GS_RETURN_IF_ERROR(host_.MakeDirs(PipeDir()));
  GS_RETURN_IF_ERROR(host_.MakeDirs(LogDir()));
  GS_RETURN_IF_ERROR(host_.RemoveFile(PipeDir() + "/" + kPidFile));  // stale
  CommandSpec spec;
  spec.argv = {config_.binary_path, "-d"};
  spec.env = ControlEnv();
  spec.timeout_ns = config_.options.start_timeout_ns;
  // MPS v3 where the binary speaks it: one server and a namespace per tenant
  // of the GPU, from a configuration file (docs/mps.md "MPS v3").
  protocol_ = config_.protocol == 3 ? 3 : 2;
  spec.env["CUDA_MPS_PROTOCOL_VERSION"] = std::to_string(protocol_);
  if (protocol_ == 3) {
    std::vector<std::pair<std::string, TenantSettings>> namespaces;
    for (const auto& [name, tenant] : tenants_) {
      if (UsesNamespace(name)) namespaces.emplace_back(name, tenant.settings);
    }
    const std::string config = MpsGpuDir(config_.options.root, gpu_.uuid) + "/mps.toml";
    GS_RETURN_IF_ERROR(host_.WriteFileAtomic(config, V3Config(gpu_.uuid, namespaces)));
    spec.argv.insert(spec.argv.end(), {"-p", "3", "-a", config});
  }
  // What the foreground invocation says (its verdict on failure) goes to a
  // file: the daemonised child inherits the descriptors.
  const std::string start_log = LogDir() + "/" + kStartLog;
  (void)host_.RemoveFile(start_log);  // a stale log only misleads; best effort
  spec.output_file = start_log;
  GS_ASSIGN_OR_RETURN(CommandResult result, host_.Run(spec));
  const std::string what = "'" + config_.binary_path + " -d' for GPU " + std::to_string(gpu_.index);
  if (result.timed_out) return Unavailable(what + " did not return in time");
  if (result.exit_code != 0) {
    auto said = host_.ReadFile(start_log);
    const std::string_view message = said.ok() ? Trim(*said) : "";
    return Unavailable(
        what + " exited with " + std::to_string(result.exit_code) + ": " +
        (message.empty() ? "see " + LogDir() + "/control.log" : std::string(message)));
  }
  pid_t pid = 0;
  const bool up = WaitUntil(config_.options.start_timeout_ns, [&] {
    auto read = ReadPidFile();
    if (!read.ok() || !host_.ProcessAlive(*read)) return false;
    pid = *read;
    return true;
  });
  if (!up) return Unavailable(what + ": no live pid in " + PipeDir() + "/" + kPidFile);
  control_pid_ = pid;
  health_ = Health::kHealthy;
  last_error_.clear();
  last_check_ns_ = clock_.NowNs();
  // Partitions made at run time die with a daemon: make them again.
  for (auto& [name, t] : tenants_) {
    t.partition_chunks = 0;
    t.partition_sms = 0;
    EnsurePartition(name);
  }
  GS_LOG(kInfo, "mps", "GPU %d (%s): MPS control daemon pid %d", gpu_.index, gpu_.uuid.c_str(),
         static_cast<int>(pid));
  return Status::Ok();
}

void MpsControlDaemon::StopDaemon() {
  pid_t pid = control_pid_;
  if (pid == 0) {
    auto read = ReadPidFile();
    if (read.ok()) pid = *read;
  }
  const int64_t stop_ns = config_.options.stop_timeout_ns;
  if (pid > 0 && host_.ProcessAlive(pid)) {
    auto quit = Control("quit");
    if (!quit.ok()) GS_LOG(kWarn, "mps", "%s", quit.status().message().c_str());
    if (!WaitUntil(stop_ns, [&] { return !host_.ProcessAlive(pid); })) {
      GS_LOG(kWarn, "mps", "MPS control daemon pid %d ignored quit; killing it",
             static_cast<int>(pid));
      (void)host_.Kill(pid, SIGKILL);  // the wait below tells whether it went
      WaitUntil(stop_ns, [&] { return !host_.ProcessAlive(pid); });
    }
  }
  (void)host_.RemoveFile(PipeDir() + "/" + kPidFile);  // a stale file is replaced at start
  control_pid_ = 0;
}

Status MpsControlDaemon::BringUp() {
  GS_ASSIGN_OR_RETURN(previous_mode_, gpus_.GetComputeMode(gpu_.index));
  GS_RETURN_IF_ERROR(
      gpus_.HoldComputeMode(gpu_.index, ComputeMode::kExclusiveProcess, previous_mode_));
  // Saved before the daemon starts, so a crash in between leaves enough to
  // restore the compute mode.
  mode_saved_ = true;
  restarts_ = 0;
  PublishAndSave();
  Status started = StartDaemon();
  if (!started.ok()) TearDown();
  return started;
}

void MpsControlDaemon::TearDown() {
  StopDaemon();
  if (mode_saved_) {
    Status restored = gpus_.ReleaseComputeMode(gpu_.index);
    if (!restored.ok()) {
      GS_LOG(kWarn, "mps", "GPU %d: cannot restore compute mode %s: %s", gpu_.index,
             std::string(ComputeModeName(previous_mode_)).c_str(), restored.message().c_str());
    }
  }
  mode_saved_ = false;
  health_ = Health::kUnknown;
  last_error_.clear();
}

bool MpsControlDaemon::UsesNamespace(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return protocol_ == 3 && it != tenants_.end() && !it->second.v2 &&
         V3TenantPipeDir(PipeDir(), tenant).size() + 8 <= kMaxSocketPath;  // "/control"
}

void MpsControlDaemon::EnsureNamespace(const std::string& tenant) {
  if (!UsesNamespace(tenant) || control_pid_ == 0) return;
  TenantState& t = tenants_.at(tenant);
  auto created = Control(V3NamespaceCommand("create", tenant, &t.settings));
  if (created.ok() && created->starts_with("Error") &&
      created->find("exists") != std::string::npos) {
    created = Control(V3NamespaceCommand("set", tenant, &t.settings));
  }
  if (created.ok() && !created->starts_with("Error")) return;
  const std::string why = created.ok() ? std::string(Trim(*created)) : created.status().message();
  GS_LOG(kWarn, "mps", "GPU %s: no MPS v3 namespace for tenant %s (%s); it uses v2 limits there",
         gpu_.uuid.c_str(), tenant.c_str(), why.c_str());
  t.v2 = true;
}

void MpsControlDaemon::DeletePartition(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || it->second.partition_chunks == 0) return;
  it->second.partition_chunks = 0;
  it->second.partition_sms = 0;
  if (control_pid_ == 0) return;
  auto deleted = Control(V3SmPartitionCommand("delete", gpu_.uuid, tenant, 0));
  if (!deleted.ok() || deleted->starts_with("Error")) {
    GS_LOG(kWarn, "mps", "GPU %s: cannot delete the SM partition of %s: %s", gpu_.uuid.c_str(),
           tenant.c_str(), deleted.ok() ? deleted->c_str() : deleted.status().message().c_str());
  }
}

void MpsControlDaemon::EnsurePartition(const std::string& tenant) {
  if (!UsesNamespace(tenant) || control_pid_ == 0) return;
  TenantState& t = tenants_.at(tenant);
  const std::optional<uint32_t> percent = t.settings.sm_partition_percent;
  if (!percent) {
    DeletePartition(tenant);
    return;
  }
  auto fail = [&](const std::string& why) {
    GS_LOG(kWarn, "mps",
           "event=mps_sm_partition_failed gpu=%s tenant=%s reason=\"%s\"; its clients run "
           "without one",
           gpu_.uuid.c_str(), tenant.c_str(), why.c_str());
  };
  auto info = Control(V3SmPartitionInfoCommand());
  if (!info.ok()) return fail(info.status().message());
  const std::optional<V3DeviceSms> sms = ParseV3SmPartitionInfo(*info, gpu_.uuid);
  if (!sms) return fail("no SM partition facts for this GPU in '" + std::string(Trim(*info)) + "'");
  const uint32_t chunks = V3PartitionChunks(*sms, *percent);
  if (chunks == t.partition_chunks) return;
  const uint32_t free = sms->free_chunks + t.partition_chunks;
  DeletePartition(tenant);
  if (chunks > free) {
    return fail(std::to_string(chunks) + " chunks wanted, " + std::to_string(free) + " free");
  }
  auto created = Control(V3SmPartitionCommand("create", gpu_.uuid, tenant, chunks));
  if (!created.ok() || created->starts_with("Error")) {
    return fail(created.ok() ? std::string(Trim(*created)) : created.status().message());
  }
  t.partition_chunks = chunks;
  t.partition_sms = chunks * sms->sms_per_chunk;
  // What the daemon says the partition holds, where it says it.
  auto list = Control(V3SmPartitionListCommand());
  if (list.ok()) {
    if (auto listed = ParseV3SmPartitionSms(*list, gpu_.uuid, tenant)) t.partition_sms = *listed;
  }
  GS_LOG(kInfo, "mps", "event=mps_sm_partition gpu=%s tenant=%s percent=%u chunks=%u sms=%u",
         gpu_.uuid.c_str(), tenant.c_str(), *percent, chunks, t.partition_sms);
}

GpuEnv MpsControlDaemon::EnvFor(const std::string& tenant) const {
  GpuEnv out{gpu_.index, gpu_.uuid, {{"CUDA_VISIBLE_DEVICES", gpu_.uuid}}};
  auto& env = out.env;
  if (UsesNamespace(tenant)) {
    // Its namespace holds its limits; the socket chooses the namespace.
    env["CUDA_MPS_PIPE_DIRECTORY"] = V3TenantPipeDir(PipeDir(), tenant);
    // Its static SM partition, by name (how a v3 client picks one is not
    // documented; the variable of legacy static partitioning).
    if (tenants_.at(tenant).partition_sms > 0) env["CUDA_MPS_SM_PARTITION"] = tenant;
    return out;
  }
  env["CUDA_MPS_PIPE_DIRECTORY"] = PipeDir();
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return out;
  const TenantSettings& s = it->second.settings;
  if (s.active_thread_percentage) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(*s.active_thread_percentage);
  }
  // The daemon sees one GPU, so to its clients it is device 0.
  if (s.pinned_memory_limit) {
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + MpsQuantity(*s.pinned_memory_limit);
  }
  if (s.client_priority) env["CUDA_MPS_CLIENT_PRIORITY"] = std::to_string(*s.client_priority);
  return out;
}

StatusOr<GpuEnv> MpsControlDaemon::AddTenant(const std::string& tenant,
                                             const TenantSettings& settings) {
  MutexLock lock(mu_);
  if (tenants_.empty()) {
    // A first tenant: its namespace goes into the configuration at start.
    tenants_[tenant] = TenantState{settings, false};
    Status up = BringUp();
    if (!up.ok()) {
      tenants_.clear();
      PublishAndSave();
      return up;
    }
  } else {
    auto [it, added] = tenants_.try_emplace(tenant, TenantState{settings, false});
    if (!added) it->second.settings = settings;
  }
  // Also after a bring-up: the configured namespace then exists, and `set`
  // makes sure it holds these limits.
  EnsureNamespace(tenant);
  EnsurePartition(tenant);
  PublishAndSave();
  return EnvFor(tenant);
}

void MpsControlDaemon::RemoveTenant(const std::string& tenant) {
  MutexLock lock(mu_);
  if (tenants_.find(tenant) == tenants_.end()) return;
  const bool had_namespace = UsesNamespace(tenant);
  if (tenants_.size() > 1) DeletePartition(tenant);  // the last one's goes with the daemon
  tenants_.erase(tenant);
  if (tenants_.empty()) {
    TearDown();
  } else if (had_namespace && control_pid_ != 0) {
    // Its clients keep their limits; no new one joins the namespace.
    auto deleted = Control(V3NamespaceCommand("delete", tenant, nullptr));
    if (!deleted.ok() || deleted->starts_with("Error")) {
      GS_LOG(kWarn, "mps", "GPU %s: cannot delete the namespace of %s: %s", gpu_.uuid.c_str(),
             tenant.c_str(), deleted.ok() ? deleted->c_str() : deleted.status().message().c_str());
    }
  }
  PublishAndSave();
}

StatusOr<GpuEnv> MpsControlDaemon::UpdateTenant(const std::string& tenant,
                                                const TenantSettings& settings,
                                                const TenantSettings& changed) {
  MutexLock lock(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return NotFound("GPU " + gpu_.uuid + " holds no tenant " + tenant);
  it->second.settings = settings;
  if (UsesNamespace(tenant)) {
    EnsureNamespace(tenant);  // for its new clients
    EnsurePartition(tenant);
  } else if (tenants_.size() == 1 && control_pid_ != 0) {
    // Alone on the GPU: its servers' limits may change (others' must not).
    auto servers = Control("get_server_list");
    if (!servers.ok()) GS_LOG(kWarn, "mps", "%s", servers.status().message().c_str());
    for (pid_t server : servers.ok() ? ParsePids(*servers) : std::vector<pid_t>{}) {
      std::vector<std::string> commands;
      if (changed.active_thread_percentage && settings.active_thread_percentage) {
        commands.push_back("set_active_thread_percentage " + std::to_string(server) + " " +
                           std::to_string(*settings.active_thread_percentage));
      }
      if (changed.pinned_memory_limit && settings.pinned_memory_limit) {
        commands.push_back("set_device_pinned_mem_limit " + std::to_string(server) + " 0 " +
                           MpsQuantity(*settings.pinned_memory_limit));
      }
      for (const std::string& command : commands) {
        auto done = Control(command);
        if (!done.ok()) GS_LOG(kWarn, "mps", "%s", done.status().message().c_str());
      }
    }
  }
  PublishAndSave();
  return EnvFor(tenant);
}

Status MpsControlDaemon::TerminateClient(pid_t client_pid) {
  MutexLock lock(mu_);
  if (control_pid_ == 0) return NotFound("no MPS daemon runs on GPU " + std::to_string(gpu_.index));
  GS_ASSIGN_OR_RETURN(std::string servers, Control("get_server_list"));
  for (pid_t server : ParsePids(servers)) {
    GS_ASSIGN_OR_RETURN(std::string clients, Control("get_client_list " + std::to_string(server)));
    const std::vector<pid_t> pids = ParsePids(clients);
    if (std::find(pids.begin(), pids.end(), client_pid) == pids.end()) continue;
    GS_ASSIGN_OR_RETURN(std::string reply, Control("terminate_client " + std::to_string(server) +
                                                   " " + std::to_string(client_pid)));
    (void)reply;  // it prints nothing on success
    return Status::Ok();
  }
  return NotFound("no MPS client " + std::to_string(client_pid) + " on GPU " +
                  std::to_string(gpu_.index));
}

void MpsControlDaemon::CheckHealth(bool can_start) {
  MutexLock lock(mu_);
  if (tenants_.empty()) return;
  last_check_ns_ = clock_.NowNs();
  if (control_pid_ != 0 && host_.ProcessAlive(control_pid_)) {
    auto reply = Control("get_server_list");
    if (reply.ok()) {
      const bool changed = health_ != Health::kHealthy;
      health_ = Health::kHealthy;
      last_error_.clear();
      if (changed) {
        PublishAndSave();
      } else {
        Publish();
      }
      return;
    }
    last_error_ = reply.status().message();
    GS_LOG(kWarn, "mps", "GPU %d: MPS control unresponsive, restarting it: %s", gpu_.index,
           last_error_.c_str());
    const pid_t pid = control_pid_;
    (void)host_.Kill(pid, SIGKILL);  // the wait below tells whether it went
    WaitUntil(config_.options.stop_timeout_ns, [&] { return !host_.ProcessAlive(pid); });
  } else {
    last_error_ = control_pid_ != 0
                      ? "MPS control daemon pid " + std::to_string(control_pid_) + " is gone"
                      : "MPS control daemon not running";
    GS_LOG(kWarn, "mps", "GPU %d: %s, restarting it", gpu_.index, last_error_.c_str());
  }
  health_ = Health::kUnhealthy;
  if (can_start) {
    const std::string why = last_error_;
    Status started = StartDaemon();
    if (started.ok()) {
      ++restarts_;
      last_error_ = "restarted: " + why;
    } else {
      health_ = Health::kUnhealthy;
      last_error_ = started.message();
    }
  }
  PublishAndSave();
}

bool MpsControlDaemon::Recover(const MpsState::GpuRecord& record,
                               const std::map<std::string, TenantSettings>& tenants, bool can_start,
                               const std::string& unavailable) {
  MutexLock lock(mu_);
  previous_mode_ = record.previous_mode;
  mode_saved_ = true;
  restarts_ = record.restarts;
  protocol_ = record.protocol;
  for (const std::string& name : record.tenants) {
    // A tenant the state file does not hold was never acquired (a crash
    // between the bring-up's save and the tenant's).
    if (auto it = tenants.find(name); it != tenants.end()) {
      tenants_[name] = TenantState{it->second, false};
    }
  }
  auto pid = ReadPidFile();
  control_pid_ = pid.ok() && host_.ProcessAlive(*pid) ? *pid : 0;
  if (tenants_.empty()) {
    GS_LOG(kInfo, "mps", "GPU %s: no tenants after restart, stopping its MPS daemon",
           gpu_.uuid.c_str());
    TearDown();
    Publish();
    return false;
  }
  // The hold goes on (a daemon from before holds were leases had none).
  if (Status held =
          gpus_.HoldComputeMode(gpu_.index, ComputeMode::kExclusiveProcess, previous_mode_);
      !held.ok()) {
    GS_LOG(kWarn, "mps", "GPU %s: cannot hold the exclusive compute mode: %s", gpu_.uuid.c_str(),
           held.message().c_str());
  }
  if (control_pid_ != 0) {
    GS_LOG(kInfo, "mps", "GPU %s: re-adopted MPS control daemon pid %d", gpu_.uuid.c_str(),
           static_cast<int>(control_pid_));
  } else if (can_start) {
    Status started = StartDaemon();
    if (started.ok()) {
      ++restarts_;
    } else {
      health_ = Health::kUnhealthy;
      last_error_ = started.message();
    }
  } else {
    health_ = Health::kUnhealthy;
    last_error_ = "MPS daemon gone and MPS is unavailable: " + unavailable;
  }
  Publish();
  return true;
}

void MpsControlDaemon::StopOrphan() {
  MutexLock lock(mu_);
  auto pid = ReadPidFile();
  if (!pid.ok() || !host_.ProcessAlive(*pid)) return;
  GS_LOG(kWarn, "mps", "stopping orphan MPS control daemon pid %d of %s", static_cast<int>(*pid),
         gpu_.uuid.c_str());
  control_pid_ = *pid;
  StopDaemon();
}

void MpsControlDaemon::Publish() {
  std::optional<Snapshot> snapshot;
  if (mode_saved_ || control_pid_ != 0 || !tenants_.empty()) {
    Snapshot s;
    s.record.index = gpu_.index;
    s.record.uuid = gpu_.uuid;
    s.record.control_pid = control_pid_;
    s.record.previous_mode = previous_mode_;
    s.record.restarts = restarts_;
    s.record.protocol = protocol_;
    for (const auto& [name, tenant] : tenants_) {
      s.record.tenants.push_back(name);
      if (tenant.partition_sms > 0) s.sm_partitions[name] = tenant.partition_sms;
    }
    s.running = control_pid_ != 0;
    s.health = health_;
    s.last_error = last_error_;
    s.last_check_ns = last_check_ns_;
    snapshot = std::move(s);
  }
  MutexLock lock(published_mu_);
  published_ = std::move(snapshot);
}

void MpsControlDaemon::PublishAndSave() {
  Publish();
  if (save_) save_();
}

std::optional<MpsControlDaemon::Snapshot> MpsControlDaemon::Published() const {
  MutexLock lock(published_mu_);
  return published_;
}

}  // namespace gpuslice::daemon::mps
