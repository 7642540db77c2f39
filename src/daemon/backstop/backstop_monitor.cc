#include "daemon/backstop/backstop_monitor.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include "common/log.h"
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
using Kind = MemoryBackstop::FindingKind;
constexpr std::array<Kind, 4> kKinds = {Kind::kOverLimit, Kind::kBackUnder, Kind::kUnregistered,
                                        Kind::kKilled};

std::string Pids(const std::vector<uint32_t>& pids) {
  std::string out;
  for (uint32_t p : pids) {
    if (!out.empty()) out += ',';
    out += std::to_string(p);
  }
  return out;
}

}  // namespace

std::string_view BackstopEventName(Kind kind) {
  switch (kind) {
    case Kind::kOverLimit:
      return "backstop_over_limit";
    case Kind::kBackUnder:
      return "backstop_back_under";
    case Kind::kUnregistered:
      return "backstop_unregistered_process";
    case Kind::kKilled:
      return "backstop_killed";
  }
  return "backstop_unknown";
}

json FindingJson(const MemoryBackstop::Finding& f) {
  json j = {{"gpu", f.gpu}, {"uuid", f.uuid}, {"pids", f.pids}, {"used_bytes", f.used_bytes}};
  if (f.kind != Kind::kUnregistered) {
    j["group"] = f.group;
    j["limit_bytes"] = f.limit_bytes;
  }
  return j;
}

BackstopMonitor::BackstopMonitor(Options options, GpuBackend& backend,
                                 const TenantRegistry& registry, MemoryBackstop::Killer killer,
                                 EventSink sink)
    : backend_(backend),
      registry_(registry),
      sink_(std::move(sink)),
      is_ignored_(std::move(options.is_ignored)),
      backstop_({.action = options.action,
                 .allowance_per_process_bytes = options.allowance_per_process_bytes},
                {.group_of = [this](uint32_t pid) { return view_.GroupOf(pid); },
                 .limit_of = [this](const std::string& group,
                                    const std::string& uuid) -> std::optional<uint64_t> {
                   const std::optional<GpuLimit> limit = view_.LimitOf(group, uuid);
                   return limit ? limit->memory_bytes : std::nullopt;
                 }},
                std::move(killer)) {}

std::vector<MemoryBackstop::Finding> BackstopMonitor::Tick(const Snapshot& snapshot) {
  view_ = registry_.TakeView();
  std::vector<MemoryBackstop::Finding> all;
  for (const GpuInfo& gpu : snapshot.gpus) {
    auto processes = backend_.Processes(gpu.index);
    if (!processes.ok()) continue;  // skipped this tick
    if (is_ignored_) {
      std::erase_if(*processes, [this](const GpuProcess& p) { return is_ignored_(p.pid); });
    }
    for (MemoryBackstop::Finding& f : backstop_.Check(gpu.index, gpu.uuid, *processes)) {
      counts_[static_cast<size_t>(f.kind)].fetch_add(1, std::memory_order_relaxed);
      const std::string_view name = BackstopEventName(f.kind);
      GS_LOG(kWarn, "gpusliced",
             "event=%.*s gpu=%u group=%s pids=%s used_bytes=%llu limit_bytes=%llu",
             static_cast<int>(name.size()), name.data(), f.gpu,
             f.group.empty() ? "-" : f.group.c_str(), Pids(f.pids).c_str(),
             static_cast<unsigned long long>(f.used_bytes),
             static_cast<unsigned long long>(f.limit_bytes));
      if (sink_) sink_(name, FindingJson(f));
      all.push_back(std::move(f));
    }
  }
  return all;
}

uint64_t BackstopMonitor::Count(Kind kind) const {
  return counts_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
}

std::string BackstopMonitor::FormatMetrics() const {
  std::string out =
      "# HELP gpuslice_backstop_findings_total Findings of the NVML backstop (memory and compute), "
      "by kind.\n"
      "# TYPE gpuslice_backstop_findings_total counter\n";
  for (Kind kind : kKinds) {
    out += "gpuslice_backstop_findings_total{kind=\"";
    out += FindingKindName(kind);
    out += "\"} " + std::to_string(Count(kind)) + "\n";
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
