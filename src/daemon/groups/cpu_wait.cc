#include "daemon/groups/cpu_wait.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

namespace gpuslice::daemon {
namespace {

// The second field of a schedstat file; nullopt if unreadable.
std::optional<int64_t> RunDelayOf(const std::filesystem::path& schedstat) {
  std::ifstream in(schedstat);
  int64_t on_cpu = 0;
  int64_t waiting = 0;
  if (!(in >> on_cpu >> waiting) || waiting < 0) return std::nullopt;
  return waiting;
}

}  // namespace

std::optional<int64_t> CpuWait::RunDelayNs(const std::vector<int32_t>& pids) const {
  int64_t total = 0;
  bool any = false;
  for (int32_t pid : pids) {
    if (pid <= 0) continue;
    std::error_code ec;
    std::filesystem::directory_iterator tasks(proc_root_ + "/" + std::to_string(pid) + "/task", ec);
    if (ec) continue;
    for (const auto& task : tasks) {
      if (std::optional<int64_t> d = RunDelayOf(task.path() / "schedstat")) {
        total += *d;
        any = true;
      }
    }
  }
  if (!any) return std::nullopt;
  return total;
}

int32_t CpuWait::Sample(const std::string& group, const std::vector<int32_t>& pids,
                        int64_t now_ns) {
  History& h = groups_[group];
  std::vector<int32_t> sorted = pids;
  std::sort(sorted.begin(), sorted.end());
  if (sorted == h.pids && !h.points.empty() && now_ns - h.points.back().t_ns < kReadEveryNs) {
    return h.last_bp;
  }
  const std::optional<int64_t> delay = RunDelayNs(sorted);
  // Another set of processes (or a thread gone: the sum fell) starts over.
  if (!delay || sorted != h.pids || (!h.points.empty() && *delay < h.points.back().delay_ns)) {
    h.pids = std::move(sorted);
    h.points.clear();
    h.last_bp = -1;
    if (!delay) return -1;
  }
  h.points.push_back({now_ns, *delay});
  while (h.points.size() > 1 && now_ns - h.points[1].t_ns >= kWindowNs) h.points.pop_front();
  const Point& first = h.points.front();
  if (now_ns - first.t_ns < kWindowNs / 2) return -1;  // too short a span to tell
  const double bp = static_cast<double>(*delay - first.delay_ns) * 10000.0 /
                    static_cast<double>(now_ns - first.t_ns);
  h.last_bp = static_cast<int32_t>(std::min(bp, 1e6));
  return h.last_bp;
}

void CpuWait::Retain(const std::vector<std::string>& live) {
  const std::set<std::string> keep(live.begin(), live.end());
  std::erase_if(groups_, [&](const auto& entry) { return !keep.contains(entry.first); });
}

}  // namespace gpuslice::daemon
