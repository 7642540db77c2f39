#include "daemon/backstop/backstop_monitor.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <fstream>
#include <iterator>
#include <optional>

#include "common/log.h"
#include "common/str_cat.h"
#include "daemon/tenants/identity.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;
using MemoryKind = MemoryBackstop::FindingKind;
using ComputeKind = ComputeBackstop::FindingKind;
constexpr std::array<MemoryKind, 4> kMemoryKinds = {MemoryKind::kOverLimit, MemoryKind::kBackUnder,
                                                    MemoryKind::kUnregistered, MemoryKind::kKilled};
constexpr std::array<ComputeKind, ComputeBackstop::kKindCount> kComputeKinds = {
    ComputeKind::kUnregistered,        ComputeKind::kUnregisteredGone,
    ComputeKind::kOverLimit,           ComputeKind::kBackUnder,
    ComputeKind::kThrottleStarted,     ComputeKind::kThrottleStopped,
    ComputeKind::kMpsClientTerminated, ComputeKind::kThrottleRecovered};

std::string JoinPids(const std::vector<uint32_t>& pids) {
  std::string out;
  for (uint32_t p : pids) {
    if (!out.empty()) out += ',';
    out += std::to_string(p);
  }
  return out.empty() ? "-" : out;
}

void AppendCount(std::string& out, std::string_view kind, uint64_t count) {
  out += "gpuslice_backstop_findings_total{kind=\"";
  out += kind;
  out += "\"} " + std::to_string(count) + "\n";
}

}  // namespace

std::string_view BackstopEventName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kOverLimit:
      return "backstop_over_limit";
    case MemoryKind::kBackUnder:
      return "backstop_back_under";
    case MemoryKind::kUnregistered:
      return "backstop_unregistered_process";
    case MemoryKind::kKilled:
      return "backstop_killed";
  }
  return "backstop_unknown";
}

json FindingJson(const MemoryBackstop::Finding& f) {
  json j = {{"gpu", f.gpu}, {"uuid", f.uuid}, {"pids", f.pids}, {"used_bytes", f.used_bytes}};
  if (f.kind != MemoryKind::kUnregistered) {
    j["group"] = f.group;
    j["limit_bytes"] = f.limit_bytes;
  }
  return j;
}

json ComputeFindingJson(const ComputeBackstop::Finding& f) {
  json j = {{"pids", f.pids}};
  if (!f.uuid.empty()) {
    j["gpu"] = f.gpu;
    j["uuid"] = f.uuid;
    j["share_percent"] = f.share_percent;
    j["limit_percent"] = f.limit_percent;
  }
  if (!f.group.empty()) j["group"] = f.group;
  if (f.kind == ComputeKind::kThrottleStarted || f.kind == ComputeKind::kThrottleStopped) {
    j["run_percent"] = f.run_percent;
  }
  if (!f.detail.empty()) j["detail"] = f.detail;
  return j;
}

BackstopMonitor::BackstopMonitor(Options options, GpuBackend& backend, Actions actions,
                                 StateStore* store, EventSink sink, Clocks clocks)
    : options_(std::move(options)),
      backend_(backend),
      signaller_(actions.signaller),
      store_(store),
      sink_(std::move(sink)),
      clocks_(clocks),
      throttler_(options_.duty, signaller_,
                 [this](const std::vector<ProcessRef>& processes) { Persist(processes); }),
      memory_(options_.memory.value_or(MemoryBackstop::Options{}),
              {.group_of = [this](uint32_t pid) { return Registry().GroupOf(pid); },
               .limit_of = [this](const std::string& group,
                                  const std::string& uuid) -> std::optional<uint64_t> {
                 const std::optional<GpuLimit> limit = Registry().LimitOf(group, uuid);
                 return limit ? limit->memory_bytes : std::nullopt;
               }},
              std::move(actions.killer)),
      compute_(options_.compute.value_or(ComputeBackstop::Options{}),
               {.group_of = [this](uint32_t pid) { return Registry().GroupOf(pid); },
                .limit_of = [this](const std::string& group,
                                   const std::string& uuid) -> std::optional<uint32_t> {
                  const std::optional<GpuLimit> limit = Registry().LimitOf(group, uuid);
                  return limit ? limit->compute_percent : std::nullopt;
                },
                .is_mps = options_.is_mps,
                .start_time_of = [this](uint32_t pid) -> uint64_t {
                  if (auto start = Registry().StartTimeOf(pid)) return *start;
                  return ReadStartTime(options_.proc_root, static_cast<pid_t>(pid));
                }},
               &throttler_, std::move(actions.terminator)) {}

BackstopMonitor::~BackstopMonitor() { Stop(); }

const RegistryView& BackstopMonitor::Registry() const {
  static const RegistryView kNone;
  return view_ != nullptr ? *view_ : kNone;
}

void BackstopMonitor::Persist(const std::vector<ProcessRef>& processes) {
  if (store_ == nullptr) return;
  MutexLock lock(persist_mu_);
  PersistLocked(processes);
}

void BackstopMonitor::PersistLocked(const std::vector<ProcessRef>& processes) {
  const Status s = processes.empty()
                       ? store_->Remove(kComputeBackstopRecordName)
                       : store_->Save(kComputeBackstopRecordName, ProcessRefsJson(processes));
  if (s.ok()) {
    unsaved_.reset();
    return;
  }
  if (!unsaved_) {  // once per run of failures; Tick retries
    GS_LOG(kError, "gpusliced", "event=backstop_record_failed error=\"%s\" action=retry",
           s.message().c_str());
  }
  unsaved_ = processes;
}

void BackstopMonitor::RetryUnsaved() {
  if (store_ == nullptr) return;
  MutexLock lock(persist_mu_);  // so no newer list is saved in between
  if (!unsaved_) return;
  const std::vector<ProcessRef> unsaved = *unsaved_;
  PersistLocked(unsaved);
}

void BackstopMonitor::Report(const std::vector<MemoryBackstop::Finding>& findings) {
  for (const MemoryBackstop::Finding& f : findings) {
    memory_counts_[static_cast<size_t>(f.kind)].fetch_add(1, std::memory_order_relaxed);
    const std::string_view name = BackstopEventName(f.kind);
    GS_LOG(
        kWarn, "gpusliced", "event=%.*s gpu=%u group=%s pids=%s used_bytes=%llu limit_bytes=%llu",
        static_cast<int>(name.size()), name.data(), f.gpu, f.group.empty() ? "-" : f.group.c_str(),
        JoinPids(f.pids).c_str(), static_cast<unsigned long long>(f.used_bytes),
        static_cast<unsigned long long>(f.limit_bytes));
    if (sink_) sink_(name, FindingJson(f));
  }
}

void BackstopMonitor::Report(const std::vector<ComputeBackstop::Finding>& findings) {
  for (const ComputeBackstop::Finding& f : findings) {
    compute_counts_[static_cast<size_t>(f.kind)].fetch_add(1, std::memory_order_relaxed);
    const std::string name = StrCat({"backstop_", ComputeFindingKindName(f.kind)});
    GS_LOG(kWarn, "gpusliced",
           "event=%s gpu=%s group=%s pids=%s share_percent=%u limit_percent=%u run_percent=%u "
           "detail=\"%s\"",
           name.c_str(), f.uuid.empty() ? "-" : std::to_string(f.gpu).c_str(),
           f.group.empty() ? "-" : f.group.c_str(), JoinPids(f.pids).c_str(), f.share_percent,
           f.limit_percent, f.run_percent, f.detail.c_str());
    if (sink_) sink_(name, ComputeFindingJson(f));
  }
}

void BackstopMonitor::Recover() {
  MutexLock lock(mu_);
  if (store_ == nullptr) return;
  auto record = store_->Load(kComputeBackstopRecordName);
  if (!record.ok()) {
    if (record.status().code() != StatusCode::kNotFound) {
      GS_LOG(kError, "gpusliced", "event=backstop_record_failed error=\"%s\"",
             record.status().message().c_str());
    }
    return;
  }
  auto recorded = ProcessRefsFromJson(*record);
  if (!recorded.ok()) {
    GS_LOG(kError, "gpusliced", "event=backstop_record_failed error=\"%s\"",
           recorded.status().message().c_str());
    return;
  }
  std::vector<ComputeBackstop::Finding> findings;
  for (const ProcessRef& p : DutyCycleThrottler::Recover(*recorded, signaller_)) {
    findings.push_back({.kind = ComputeKind::kThrottleRecovered,
                        .gpu = 0,
                        .uuid = {},
                        .group = {},
                        .pids = {static_cast<uint32_t>(p.pid)},
                        .share_percent = 0,
                        .limit_percent = 0,
                        .run_percent = 100,
                        .detail = "continued: a previous run may have left it stopped"});
  }
  Persist({});
  Report(findings);
}

BackstopMonitor::TickResult BackstopMonitor::Tick(const Snapshot& snapshot,
                                                  const RegistryView& registry) {
  RetryUnsaved();
  TickResult result;
  // NVML is read without mu_: a process the duty cycle holds stopped may hold
  // a lock NVML needs (the simulator's state mutex; a slow driver call), and
  // the duty cycle must still continue it on time.
  std::optional<uint64_t> since_us;
  if (options_.compute) {
    const int64_t since_ns = clocks_.realtime.NowNs() - options_.lookback_ns;
    since_us = since_ns > 0 ? static_cast<uint64_t>(since_ns) / 1000 : 0;
  }
  result.readings = ReadProcesses(backend_, snapshot, since_us);
  if (!options_.memory && !options_.compute) return result;
  {
    MutexLock lock(mu_);
    if (stopped_) return result;
    view_ = &registry;  // for both checks, until the tick ends
    const int64_t now = clocks_.monotonic.NowNs();
    for (const GpuProcessReading& r : result.readings) {
      if (!r.processes) {
        if (options_.compute) {
          std::ranges::move(compute_.Unreadable(r.uuid), std::back_inserter(result.compute));
        }
        continue;
      }
      std::vector<GpuProcess> processes = *r.processes;
      std::optional<std::vector<ProcessUtilization>> samples = r.samples;
      if (options_.is_ignored) {
        std::erase_if(processes,
                      [this](const GpuProcess& p) { return options_.is_ignored(p.pid); });
        if (samples) {
          std::erase_if(*samples,
                        [this](const ProcessUtilization& p) { return options_.is_ignored(p.pid); });
        }
      }
      if (options_.memory) {
        std::ranges::move(memory_.Check(r.index, r.uuid, processes),
                          std::back_inserter(result.memory));
      }
      if (options_.compute) {
        std::ranges::move(compute_.Check(now, r.index, r.uuid, processes, samples),
                          std::back_inserter(result.compute));
      }
    }
    view_ = nullptr;
    Report(result.memory);
    Report(result.compute);
  }
  wake_.notify_all();  // a throttle may have started: the duty cycle's thread looks again
  return result;
}

int64_t BackstopMonitor::Advance() {
  MutexLock lock(mu_);
  if (stopped_) return INT64_MAX;
  return throttler_.Advance(clocks_.monotonic.NowNs());
}

void BackstopMonitor::Start() {
  MutexLock lock(thread_mu_);
  if (duty_.joinable()) return;
  stop_thread_ = false;
  duty_ = std::thread([this] { RunDutyCycle(); });
}

void BackstopMonitor::RunDutyCycle() {
  // Looks at least this often, whatever Advance says (a Tick may start a throttle).
  constexpr int64_t kMaxWaitNs = 500'000'000;
  MutexLock lock(thread_mu_);
  while (!stop_thread_) {
    lock.Unlock();
    const int64_t next = Advance();
    const int64_t now = clocks_.monotonic.NowNs();
    lock.Lock();
    const int64_t wait_ns = std::min(next - now, kMaxWaitNs);
    if (!stop_thread_ && wait_ns > 0) wake_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
  }
}

void BackstopMonitor::Stop() {
  {
    MutexLock lock(thread_mu_);
    stop_thread_ = true;
  }
  wake_.notify_all();
  if (duty_.joinable()) duty_.join();
  MutexLock lock(mu_);
  if (stopped_) return;
  stopped_ = true;
  Report(compute_.ReleaseAll("the daemon stops"));
}

uint64_t BackstopMonitor::Count(MemoryKind kind) const {
  return memory_counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
}

uint64_t BackstopMonitor::Count(ComputeKind kind) const {
  return compute_counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
}

std::string BackstopMonitor::FormatMetrics() const {
  if (!options_.memory && !options_.compute) return "";
  std::string out =
      "# HELP gpuslice_backstop_findings_total Findings of the NVML backstop (memory and compute), "
      "by kind.\n"
      "# TYPE gpuslice_backstop_findings_total counter\n";
  if (options_.memory) {
    for (MemoryKind kind : kMemoryKinds) AppendCount(out, FindingKindName(kind), Count(kind));
  }
  if (options_.compute) {
    for (ComputeKind kind : kComputeKinds) {
      AppendCount(out, ComputeFindingKindName(kind), Count(kind));
    }
  }
  return out;
}

MemoryBackstop::Killer TenantKiller(const TenantRegistry& registry, std::string proc_root) {
  return [&registry, proc_root = std::move(proc_root)](pid_t pid) {
    if (pid <= 0) return false;  // never kill(-1) or a process group
    auto tenant = registry.TenantOf(pid);
    if (!tenant) return false;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return false;
    // The pidfd pins one process: signal it only if it is the tenant.
    bool killed = false;
    if (ReadStartTime(proc_root, pid) == tenant->start_time) {
      killed = syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) == 0;
    }
    close(fd);
    return killed;
  };
}

bool IsMpsServer(const std::string& proc_root, uint32_t pid) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  // comm is cut to 15 characters: "nvidia-cuda-mps" (the control daemon, the
  // other name it could be, never uses a GPU).
  return comm == std::string_view("nvidia-cuda-mps-server").substr(0, 15);
}

}  // namespace gpuslice::daemon
