#include "daemon/backstop/compute_backstop_monitor.h"

#include <climits>

#include "common/log.h"
#include "common/str_cat.h"
#include "daemon/tenants/identity.h"

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;
using Kind = ComputeBackstop::FindingKind;
using Finding = ComputeBackstop::Finding;
constexpr std::array<Kind, ComputeBackstop::kKindCount> kKinds = {
    Kind::kUnregistered,        Kind::kUnregisteredGone, Kind::kOverLimit,
    Kind::kBackUnder,           Kind::kThrottleStarted,  Kind::kThrottleStopped,
    Kind::kMpsClientTerminated, Kind::kThrottleRecovered};

std::string Pids(const std::vector<uint32_t>& pids) {
  std::string out;
  for (uint32_t p : pids) {
    if (!out.empty()) out += ',';
    out += std::to_string(p);
  }
  return out.empty() ? "-" : out;
}

}  // namespace

json ComputeFindingJson(const Finding& f) {
  json j = {{"pids", f.pids}};
  if (!f.uuid.empty()) {
    j["gpu"] = f.gpu;
    j["uuid"] = f.uuid;
    j["share_percent"] = f.share_percent;
    j["limit_percent"] = f.limit_percent;
  }
  if (!f.group.empty()) j["group"] = f.group;
  if (f.kind == Kind::kThrottleStarted || f.kind == Kind::kThrottleStopped) {
    j["run_percent"] = f.run_percent;
  }
  if (!f.detail.empty()) j["detail"] = f.detail;
  return j;
}

ComputeBackstopMonitor::ComputeBackstopMonitor(Options options, GpuBackend& backend,
                                               const TenantRegistry& registry, Signaller& signaller,
                                               StateStore* store,
                                               ComputeBackstop::Terminator terminator,
                                               EventSink sink, Clocks clocks)
    : options_(std::move(options)),
      backend_(backend),
      registry_(registry),
      signaller_(signaller),
      store_(store),
      sink_(std::move(sink)),
      clocks_(clocks),
      throttler_(options_.duty, signaller,
                 [this](const std::vector<ProcessRef>& processes) { Persist(processes); }),
      backstop_(options_.backstop,
                {.group_of = [this](uint32_t pid) { return view_.GroupOf(pid); },
                 .limit_of = [this](const std::string& group,
                                    const std::string& uuid) -> std::optional<uint32_t> {
                   const std::optional<GpuLimit> limit = view_.LimitOf(group, uuid);
                   return limit ? limit->compute_percent : std::nullopt;
                 },
                 .is_mps = options_.is_mps,
                 .start_time_of = [this](uint32_t pid) -> uint64_t {
                   if (auto start = view_.StartTimeOf(pid)) return *start;
                   return ReadStartTime(options_.proc_root, static_cast<pid_t>(pid));
                 }},
                &throttler_, std::move(terminator)) {}

ComputeBackstopMonitor::~ComputeBackstopMonitor() { Stop(); }

void ComputeBackstopMonitor::Persist(const std::vector<ProcessRef>& processes) {
  if (store_ == nullptr) return;
  MutexLock lock(persist_mu_);
  PersistLocked(processes);
}

void ComputeBackstopMonitor::PersistLocked(const std::vector<ProcessRef>& processes) {
  const Status s = processes.empty()
                       ? store_->Remove(kComputeBackstopRecordName)
                       : store_->Save(kComputeBackstopRecordName, ProcessRefsJson(processes));
  if (s.ok()) {
    unsaved_.reset();
    return;
  }
  if (!unsaved_) {  // once per run of failures; Sample retries
    GS_LOG(kError, "gpusliced", "event=backstop_record_failed error=\"%s\" action=retry",
           s.message().c_str());
  }
  unsaved_ = processes;
}

void ComputeBackstopMonitor::RetryUnsaved() {
  if (store_ == nullptr) return;
  MutexLock lock(persist_mu_);  // so no newer list is saved in between
  if (!unsaved_) return;
  const std::vector<ProcessRef> unsaved = *unsaved_;
  PersistLocked(unsaved);
}

void ComputeBackstopMonitor::Report(std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    counts_[static_cast<size_t>(f.kind)].fetch_add(1, std::memory_order_relaxed);
    const std::string name = StrCat({"backstop_", ComputeFindingKindName(f.kind)});
    GS_LOG(kWarn, "gpusliced",
           "event=%s gpu=%s group=%s pids=%s share_percent=%u limit_percent=%u run_percent=%u "
           "detail=\"%s\"",
           name.c_str(), f.uuid.empty() ? "-" : std::to_string(f.gpu).c_str(),
           f.group.empty() ? "-" : f.group.c_str(), Pids(f.pids).c_str(), f.share_percent,
           f.limit_percent, f.run_percent, f.detail.c_str());
    if (sink_) sink_(name, ComputeFindingJson(f));
  }
}

void ComputeBackstopMonitor::Recover() {
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
  std::vector<Finding> findings;
  for (const ProcessRef& p : DutyCycleThrottler::Recover(*recorded, signaller_)) {
    findings.push_back({.kind = Kind::kThrottleRecovered,
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

std::vector<Finding> ComputeBackstopMonitor::Sample() {
  MutexLock sample_lock(sample_mu_);
  RetryUnsaved();
  {
    MutexLock lock(mu_);
    if (stopped_) return {};
  }
  // NVML is read without mu_: a process the duty cycle holds stopped may hold
  // a lock NVML needs (the simulator's state mutex; a slow driver call), and
  // the duty cycle must still continue it on time.
  struct GpuRead {
    uint32_t index = 0;
    std::string uuid;
    bool readable = false;
    std::vector<GpuProcess> processes;
    std::optional<std::vector<ProcessUtilization>> samples;
  };
  std::vector<GpuRead> reads;
  const int64_t since_ns = clocks_.realtime.NowNs() - options_.lookback_ns;
  const uint64_t since_us = since_ns > 0 ? static_cast<uint64_t>(since_ns) / 1000 : 0;
  for (uint32_t i = 0; i < backend_.DeviceCount(); ++i) {
    auto uuid = uuids_.find(i);
    if (uuid == uuids_.end()) {
      auto info = backend_.Read(i);
      if (!info.ok()) continue;  // skipped this sample
      uuid = uuids_.emplace(i, info->uuid).first;
    }
    auto processes = backend_.Processes(i);
    GpuRead& r = reads.emplace_back();
    r.index = i;
    r.uuid = uuid->second;
    if (!processes.ok()) continue;  // unreadable: r.readable stays false
    r.readable = true;
    r.processes = std::move(*processes);
    if (auto s = backend_.ProcessUtilizationSince(i, since_us); s.ok()) r.samples = std::move(*s);
    if (options_.is_ignored) {
      std::erase_if(r.processes,
                    [this](const GpuProcess& p) { return options_.is_ignored(p.pid); });
      if (r.samples) {
        std::erase_if(*r.samples,
                      [this](const ProcessUtilization& p) { return options_.is_ignored(p.pid); });
      }
    }
  }
  std::vector<Finding> all;
  {
    MutexLock lock(mu_);
    if (stopped_) return {};
    view_ = registry_.TakeView();  // once per sample
    const int64_t now = clocks_.monotonic.NowNs();
    for (const GpuRead& r : reads) {
      for (Finding& f : r.readable ? backstop_.Check(now, r.index, r.uuid, r.processes, r.samples)
                                   : backstop_.Unreadable(r.uuid)) {
        all.push_back(std::move(f));
      }
    }
    Report(all);
  }
  wake_.notify_all();  // a throttle may have started: the duty cycle's thread looks again
  return all;
}

int64_t ComputeBackstopMonitor::Advance() {
  MutexLock lock(mu_);
  if (stopped_) return INT64_MAX;
  return throttler_.Advance(clocks_.monotonic.NowNs());
}

void ComputeBackstopMonitor::Start() {
  MutexLock lock(thread_mu_);
  if (sampler_.joinable()) return;
  stop_thread_ = false;
  sampler_ = std::thread([this] { RunSampler(); });
  duty_ = std::thread([this] { RunDutyCycle(); });
}

void ComputeBackstopMonitor::RunSampler() {
  MutexLock lock(thread_mu_);
  while (!stop_thread_) {
    lock.Unlock();
    Sample();
    lock.Lock();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.sample_interval_ns);
    wake_.wait_until(lock, deadline,
                     [&] { return stop_thread_ || std::chrono::steady_clock::now() >= deadline; });
  }
}

void ComputeBackstopMonitor::RunDutyCycle() {
  MutexLock lock(thread_mu_);
  while (!stop_thread_) {
    lock.Unlock();
    const int64_t next = Advance();
    const int64_t now = clocks_.monotonic.NowNs();
    lock.Lock();
    // Until the next switch; a sample that starts a throttle wakes it sooner.
    const int64_t wait_ns = std::min(next - now, options_.sample_interval_ns);
    if (!stop_thread_ && wait_ns > 0) wake_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
  }
}

void ComputeBackstopMonitor::Stop() {
  {
    MutexLock lock(thread_mu_);
    stop_thread_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  if (duty_.joinable()) duty_.join();
  MutexLock lock(mu_);
  if (stopped_) return;
  stopped_ = true;
  std::vector<Finding> findings = backstop_.ReleaseAll("the daemon stops");
  Report(findings);
}

uint64_t ComputeBackstopMonitor::Count(Kind kind) const {
  return counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
}

std::string ComputeBackstopMonitor::FormatMetrics(bool header) const {
  std::string out;
  if (header) {
    out =
        "# HELP gpuslice_backstop_findings_total Findings of the NVML backstop (memory and "
        "compute), by kind.\n"
        "# TYPE gpuslice_backstop_findings_total counter\n";
  }
  for (Kind kind : kKinds) {
    out += "gpuslice_backstop_findings_total{kind=\"";
    out += ComputeFindingKindName(kind);
    out += "\"} " + std::to_string(Count(kind)) + "\n";
  }
  return out;
}

}  // namespace gpuslice::daemon
