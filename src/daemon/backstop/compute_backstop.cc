#include "daemon/backstop/compute_backstop.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/log.h"

namespace gpuslice::daemon {

uint32_t WindowAttributionWindows(const std::vector<ProcessUtilization>& samples) {
  std::vector<ProcessUtilization> sorted = samples;
  std::sort(sorted.begin(), sorted.end(),
            [](const ProcessUtilization& a, const ProcessUtilization& b) {
              return a.timestamp_us < b.timestamp_us;
            });
  uint32_t windows = 0;
  uint64_t first_us = 0;
  size_t in_window = 0;
  std::set<uint32_t> pids;
  for (const ProcessUtilization& s : sorted) {
    if (windows == 0 || s.timestamp_us - first_us > kSameWindowUs) {
      ++windows;
      first_us = s.timestamp_us;
      in_window = 0;
    }
    if (++in_window > 1) return 0;  // a window split between processes
    pids.insert(s.pid);
  }
  return windows >= 2 && pids.size() >= 2 ? windows : 0;
}

std::string_view ComputeFindingKindName(ComputeBackstop::FindingKind kind) {
  using Kind = ComputeBackstop::FindingKind;
  switch (kind) {
    case Kind::kUnregistered:
      return "compute_unregistered";
    case Kind::kUnregisteredGone:
      return "compute_unregistered_gone";
    case Kind::kOverLimit:
      return "over_compute_limit";
    case Kind::kBackUnder:
      return "back_under_compute_limit";
    case Kind::kThrottleStarted:
      return "throttle_started";
    case Kind::kThrottleStopped:
      return "throttle_stopped";
    case Kind::kMpsClientTerminated:
      return "mps_client_terminated";
    case Kind::kThrottleRecovered:
      return "throttle_recovered";
  }
  return "unknown";
}

ComputeBackstop::ComputeBackstop(Options options, Registry registry, DutyCycleThrottler* throttler,
                                 Terminator terminator)
    : options_(options),
      registry_(std::move(registry)),
      throttler_(throttler),
      terminator_(std::move(terminator)) {}

std::string ComputeBackstop::KeyOf(const std::string& uuid, const std::string& group,
                                   uint32_t pid) {
  return uuid + (group.empty() ? "/pid:" + std::to_string(pid) : "/group:" + group);
}

ComputeBackstop::Finding ComputeBackstop::Make(FindingKind kind, const Subject& s) const {
  Finding f{.kind = kind,
            .gpu = s.gpu,
            .uuid = s.uuid,
            .group = s.group,
            .pids = {},
            .share_percent = s.share,
            .limit_percent = s.limit,
            .run_percent = static_cast<uint32_t>(std::lround(s.run_fraction * 100)),
            .detail = {}};
  for (const ProcessRef& p : s.processes) f.pids.push_back(static_cast<uint32_t>(p.pid));
  return f;
}

std::vector<ComputeBackstop::Finding> ComputeBackstop::Check(
    int64_t now_ns, uint32_t gpu, const std::string& uuid, const std::vector<GpuProcess>& processes,
    const std::optional<std::vector<ProcessUtilization>>& samples) {
  // Each process's share: its samples averaged (NVML may give several), or,
  // under window attribution, summed over the windows read (see the header).
  struct Acc {
    uint64_t sum = 0;
    uint32_t n = 0;
  };
  std::map<uint32_t, Acc> present;
  for (const GpuProcess& p : processes) present[p.pid];
  uint32_t windows = 0;
  if (samples) {
    for (const ProcessUtilization& s : *samples) {
      Acc& a = present[s.pid];
      a.sum += s.sm_percent;
      ++a.n;
    }
    windows = WindowAttributionWindows(*samples);
  }
  // What each subject is made of now.
  struct Now {
    std::string group;
    uint32_t pid = 0;
    std::vector<ProcessRef> processes;
    uint32_t share = 0;
  };
  std::map<std::string, Now> current;
  for (const auto& [pid, a] : present) {
    if (pid == 0) continue;
    const std::optional<std::string> group = registry_.group_of(pid);
    const std::string key = KeyOf(uuid, group.value_or(""), pid);
    Now& n = current[key];
    n.group = group.value_or("");
    n.pid = pid;
    n.processes.push_back(
        {static_cast<pid_t>(pid), registry_.start_time_of ? registry_.start_time_of(pid) : 0});
    if (a.n > 0) n.share += static_cast<uint32_t>(a.sum / (windows > 0 ? windows : a.n));
  }

  std::vector<Finding> out;
  for (auto& [key, n] : current) {
    auto [it, created] = subjects_.try_emplace(key);
    Subject& s = it->second;
    s.processes = std::move(n.processes);
    s.share = std::min<uint32_t>(n.share, 100);  // a share of one GPU
    if (created) {
      s.gpu = gpu;
      s.uuid = uuid;
      s.group = n.group;
    }
    if (s.group.empty()) {
      s.limit = options_.unregistered_percent;
      if (created) out.push_back(Make(FindingKind::kUnregistered, s));
    } else {
      s.limit = registry_.limit_of(s.group, uuid).value_or(100);
    }
    if (s.throttled) throttler_->Set(key, s.processes, s.run_fraction, now_ns, s.period_ns);
    if (!s.group.empty() || options_.action == Action::kThrottle) {
      Evaluate(now_ns, key, s, samples.has_value(), out);
    }
  }
  // Subjects of this GPU with no process left on it.
  for (auto it = subjects_.begin(); it != subjects_.end();) {
    Subject& s = it->second;
    if (s.uuid != uuid || current.contains(it->first)) {
      ++it;
      continue;
    }
    s.share = 0;
    if (s.throttled) StopThrottle(it->first, s, "its processes left the GPU", out);
    if (s.group.empty()) {
      out.push_back(Make(FindingKind::kUnregisteredGone, s));
    } else if (s.over) {
      Finding f = Make(FindingKind::kBackUnder, s);
      f.detail = "its processes left the GPU";
      out.push_back(std::move(f));
    }
    it = subjects_.erase(it);
  }
  return out;
}

void ComputeBackstop::Evaluate(int64_t now_ns, const std::string& key, Subject& s, bool measured,
                               std::vector<Finding>& out) {
  if (!measured) return;
  const uint32_t threshold = s.limit + options_.tolerance_points;
  if (!s.over) {
    if (s.share <= threshold) {
      s.over_since = -1;
      return;
    }
    if (s.over_since < 0) s.over_since = now_ns;
    if (now_ns - s.over_since <= options_.over_for_ns) return;
    s.over = true;
    s.under_since = -1;
    if (!s.group.empty()) out.push_back(Make(FindingKind::kOverLimit, s));
    StartAction(now_ns, key, s, out);
    return;
  }
  // Over: what it would use unthrottled decides when it clears. While
  // throttled the share is averaged over about one period (a sample may fall
  // in a run or in a stop).
  if (s.throttled) {
    const int64_t period = throttler_->Period(key);
    const double alpha =
        s.last_ns < 0
            ? 1.0
            : std::clamp(static_cast<double>(now_ns - s.last_ns) / static_cast<double>(period),
                         0.05, 1.0);
    s.smoothed += alpha * (s.share - s.smoothed);
  }
  s.last_ns = now_ns;
  const double share = s.throttled ? s.smoothed : s.share;
  const double estimate = s.throttled ? share / s.run_fraction : share;
  if (estimate <= threshold) {
    if (s.under_since < 0) s.under_since = now_ns;
    if (now_ns - s.under_since > options_.over_for_ns) {
      s.over = false;
      s.over_since = -1;
      s.terminated = false;
      if (s.throttled) StopThrottle(key, s, "back within its limit", out);
      if (!s.group.empty()) out.push_back(Make(FindingKind::kBackUnder, s));
      return;
    }
  } else {
    s.under_since = -1;
  }
  // The effect of a change shows after a period (and the samples' lag): one
  // step per period at most.
  if (s.throttled && now_ns - s.adjusted_ns >= throttler_->Period(key)) {
    s.adjusted_ns = now_ns;
    // Towards the limit, at most 2x per step.
    const double ratio = s.limit / std::max(share, 0.5);
    const double min_fraction = throttler_->options().min_run_fraction;
    const bool at_min = s.run_fraction <= min_fraction * 1.0001;
    s.run_fraction = std::clamp(s.run_fraction * std::clamp(std::sqrt(ratio), 0.5, 2.0), 0.0, 1.0);
    const int64_t base = throttler_->options().period_ns;
    const int64_t period = s.period_ns > 0 ? s.period_ns : base;
    if (at_min && share > threshold) {
      s.period_ns = std::min(period * 2, std::max(options_.max_period_ns, base));
    } else if (s.run_fraction > 0.5 && period > base) {
      s.period_ns = std::max(period / 2, base);
    }
    throttler_->Set(key, s.processes, s.run_fraction, now_ns, s.period_ns);
    s.run_fraction = throttler_->RunFraction(key);  // as clamped there
    GS_LOG(kDebug, "gpusliced",
           "event=backstop_throttle_step gpu=%u group=%s share_percent=%u smoothed_percent=%.1f "
           "run_percent=%.1f period_ms=%lld",
           s.gpu, s.group.empty() ? "-" : s.group.c_str(), s.share, s.smoothed,
           s.run_fraction * 100, static_cast<long long>(throttler_->Period(key) / 1'000'000));
  }
}

void ComputeBackstop::StartAction(int64_t now_ns, const std::string& key, Subject& s,
                                  std::vector<Finding>& out) {
  if (options_.action != Action::kThrottle) return;
  if (!s.group.empty() && registry_.is_mps && registry_.is_mps(s.group, s.uuid)) {
    if (s.terminated) return;
    s.terminated = true;
    for (const ProcessRef& p : s.processes) {
      const Status status =
          terminator_ ? terminator_(s.uuid, p.pid) : Unavailable("no MPS manager");
      Finding f = Make(FindingKind::kMpsClientTerminated, s);
      f.pids = {static_cast<uint32_t>(p.pid)};
      f.detail = status.ok() ? "terminate_client" : "failed: " + status.message();
      out.push_back(std::move(f));
    }
    return;
  }
  if (throttler_ == nullptr) return;
  s.run_fraction = std::clamp(s.limit / std::max(static_cast<double>(s.share), 1.0), 0.0, 1.0);
  s.period_ns = 0;
  s.smoothed = s.share;
  s.adjusted_ns = now_ns;
  throttler_->Set(key, s.processes, s.run_fraction, now_ns);
  s.run_fraction = throttler_->RunFraction(key);
  s.throttled = true;
  out.push_back(Make(FindingKind::kThrottleStarted, s));
}

void ComputeBackstop::StopThrottle(const std::string& key, Subject& s, const std::string& reason,
                                   std::vector<Finding>& out) {
  throttler_->Release(key);
  s.throttled = false;
  s.run_fraction = 1;
  s.period_ns = 0;
  Finding f = Make(FindingKind::kThrottleStopped, s);
  f.detail = reason;
  out.push_back(std::move(f));
}

std::vector<ComputeBackstop::Finding> ComputeBackstop::Unreadable(const std::string& uuid) {
  const std::string reason = "its GPU could not be read";
  std::vector<Finding> out;
  for (auto& [key, s] : subjects_) {
    if (s.uuid != uuid || !s.over) continue;
    if (s.throttled) StopThrottle(key, s, reason, out);
    s.over = false;
    s.over_since = -1;
    s.terminated = false;
    if (!s.group.empty()) {
      Finding f = Make(FindingKind::kBackUnder, s);
      f.detail = reason;
      out.push_back(std::move(f));
    }
  }
  return out;
}

std::vector<ComputeBackstop::Finding> ComputeBackstop::ReleaseAll(const std::string& reason) {
  std::vector<Finding> out;
  for (auto& [key, s] : subjects_) {
    if (s.throttled) StopThrottle(key, s, reason, out);
  }
  if (throttler_ != nullptr) throttler_->ReleaseAll();  // anything left, whatever it was
  return out;
}

bool ComputeBackstop::Throttled(const std::string& uuid, const std::string& group,
                                uint32_t pid) const {
  auto it = subjects_.find(KeyOf(uuid, group, pid));
  return it != subjects_.end() && it->second.throttled;
}

}  // namespace gpuslice::daemon
