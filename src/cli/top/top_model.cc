#include "cli/top/top_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <tuple>

namespace gpuslice::cli::top {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Higher sorts first for the numeric columns; absent values last.
double Num(const std::optional<double>& v) { return v ? *v : -1; }

int StateRank(GroupState s) {
  switch (s) {
    case GroupState::kThrottled:
      return 0;
    case GroupState::kRunning:
      return 1;
    case GroupState::kPaused:
      return 2;
    case GroupState::kIdle:
      return 3;
  }
  return 4;
}

std::string ClockText(int64_t realtime_ns) {
  const auto t = static_cast<time_t>(realtime_ns / 1'000'000'000);
  tm local{};
  localtime_r(&t, &local);
  char text[16];
  strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

}  // namespace

const char* StateName(GroupState s) {
  switch (s) {
    case GroupState::kRunning:
      return "running";
    case GroupState::kThrottled:
      return "throttled";
    case GroupState::kPaused:
      return "paused";
    case GroupState::kIdle:
      return "idle";
  }
  return "?";
}

const char* SortKeyName(SortKey k) {
  switch (k) {
    case SortKey::kGroup:
      return "group";
    case SortKey::kGpu:
      return "gpu";
    case SortKey::kShare:
      return "share";
    case SortKey::kMemory:
      return "memory";
    case SortKey::kLimit:
      return "limit";
    case SortKey::kState:
      return "state";
  }
  return "?";
}

SortKey NextSortKey(SortKey k) {
  return static_cast<SortKey>((static_cast<int>(k) + 1) % kSortKeyCount);
}

GroupState DeriveState(const GroupOnGpu& g, std::optional<uint64_t> previous_throttled) {
  if (g.paused) return GroupState::kPaused;
  if (g.throttled && previous_throttled && *g.throttled > *previous_throttled) {
    return GroupState::kThrottled;
  }
  return g.members > 0 ? GroupState::kRunning : GroupState::kIdle;
}

std::vector<std::pair<std::string, int>> ShareBar(const std::vector<GroupRow>& rows, int width) {
  double total = 0;
  for (const GroupRow& r : rows) total += std::max(0.0, Num(r.group.share_percent));
  const double scale = total > 100 ? 100 / total : 1;
  std::vector<std::pair<std::string, int>> out;
  int used = 0;
  double sum = 0;
  for (const GroupRow& r : rows) {
    // Cells from the running sum so that rounding never loses or adds a cell.
    sum += std::max(0.0, Num(r.group.share_percent)) * scale;
    const int end = std::min(width, static_cast<int>(std::lround(sum * width / 100)));
    out.emplace_back(r.group.group, std::max(0, end - used));
    used = std::max(used, end);
  }
  return out;
}

std::vector<std::pair<std::string, int>> RequestMarkers(const std::vector<GroupRow>& rows,
                                                        int width) {
  std::vector<std::pair<std::string, int>> out;
  if (width <= 0) return out;
  int start = 0;
  const auto blocks = ShareBar(rows, width);
  for (size_t i = 0; i < rows.size() && i < blocks.size(); ++i) {
    const std::optional<double>& request = rows[i].group.request_percent;
    if (request && *request > 0) {
      const int cells = std::max(1, static_cast<int>(std::lround(*request * width / 100)));
      out.emplace_back(rows[i].group.group, std::clamp(start + cells - 1, 0, width - 1));
    }
    start += blocks[i].second;
  }
  return out;
}

std::string Sparkline(const std::vector<double>& values, size_t width, bool ascii) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  static const char kAscii[] = "_.:-=+*#";
  std::string out;
  const size_t first = values.size() > width ? values.size() - width : 0;
  for (size_t i = first; i < values.size(); ++i) {
    const double v = values[i];
    if (v < 0 || std::isnan(v)) {
      out += ' ';
      continue;
    }
    const int level = std::clamp(static_cast<int>(std::lround(std::min(v, 100.0) / 100 * 7)), 0, 7);
    if (ascii) {
      out += kAscii[level];
    } else {
      out += kBlocks[level];
    }
  }
  return out;
}

void TopModel::Update(Sample sample) {
  if (sample.daemon_answered) {
    daemon_seen_ = true;
    daemon_lost_at_ns_ = 0;
  } else if (daemon_seen_ && daemon_lost_at_ns_ == 0) {
    daemon_lost_at_ns_ = sample.at_ns;
  }
  for (GpuInfo& gpu : sample.gpus) {
    if (gpu.index >= 0) {
      GpuInfo& known = known_gpus_[gpu.uuid];
      known.index = gpu.index;
      known.uuid = gpu.uuid;
      known.name = gpu.name;
    } else if (auto it = known_gpus_.find(gpu.uuid); it != known_gpus_.end()) {
      gpu.index = it->second.index;
      gpu.name = it->second.name;
    }
  }
  for (GroupOnGpu& g : sample.groups) {
    if (auto it = known_gpus_.find(g.uuid); g.gpu_index < 0 && it != known_gpus_.end()) {
      g.gpu_index = it->second.index;
    }
  }
  std::map<Key, std::deque<double>> shares;
  std::map<Key, GroupState> states;
  std::map<Key, uint64_t> throttled;
  for (const GroupOnGpu& g : sample.groups) {
    const Key key{g.group, g.uuid};
    std::deque<double>& h = shares[key];
    if (auto it = shares_.find(key); it != shares_.end()) h = std::move(it->second);
    h.push_back(g.share_percent ? *g.share_percent : -1);
    while (h.size() > history_) h.pop_front();
    std::optional<uint64_t> previous;
    if (auto it = throttled_.find(key); it != throttled_.end()) previous = it->second;
    states[key] = DeriveState(g, previous);
    if (g.throttled) throttled[key] = *g.throttled;
  }
  shares_ = std::move(shares);
  states_ = std::move(states);
  throttled_ = std::move(throttled);
  sample_ = std::move(sample);
  ++updates_;
}

std::vector<GroupRow> TopModel::Rows(SortKey key, const std::string& filter) const {
  const std::string needle = Lower(filter);
  std::vector<GroupRow> rows;
  for (const GroupOnGpu& g : sample_.groups) {
    if (!needle.empty() && Lower(g.group).find(needle) == std::string::npos) continue;
    const Key k{g.group, g.uuid};
    GroupRow row{g, GroupState::kIdle, {}};
    if (auto it = states_.find(k); it != states_.end()) row.state = it->second;
    if (auto it = shares_.find(k); it != shares_.end()) {
      row.history.assign(it->second.begin(), it->second.end());
    }
    rows.push_back(std::move(row));
  }
  const auto tie = [](const GroupRow& r) {
    return std::tie(r.group.group, r.group.gpu_index, r.group.uuid);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const GroupRow& a, const GroupRow& b) {
    switch (key) {
      case SortKey::kGroup:
        break;
      case SortKey::kGpu:
        if (a.group.gpu_index != b.group.gpu_index) return a.group.gpu_index < b.group.gpu_index;
        if (a.group.uuid != b.group.uuid) return a.group.uuid < b.group.uuid;
        break;
      case SortKey::kShare:
        if (Num(a.group.share_percent) != Num(b.group.share_percent)) {
          return Num(a.group.share_percent) > Num(b.group.share_percent);
        }
        break;
      case SortKey::kMemory:
        if (a.group.memory_used != b.group.memory_used) {
          return a.group.memory_used > b.group.memory_used;
        }
        break;
      case SortKey::kLimit: {
        // No limit is the whole GPU.
        const uint32_t la = a.group.compute_limit.value_or(100);
        const uint32_t lb = b.group.compute_limit.value_or(100);
        if (la != lb) return la > lb;
        break;
      }
      case SortKey::kState:
        if (a.state != b.state) return StateRank(a.state) < StateRank(b.state);
        break;
    }
    return tie(a) < tie(b);
  });
  return rows;
}

std::vector<GroupRow> TopModel::RowsOnGpu(const std::string& uuid) const {
  std::vector<GroupRow> rows = Rows(SortKey::kGroup, "");
  std::erase_if(rows, [&](const GroupRow& r) { return r.group.uuid != uuid; });
  return rows;
}

std::vector<TenantInfo> TopModel::TenantsOf(const std::string& group) const {
  std::vector<TenantInfo> out;
  for (const TenantInfo& t : sample_.tenants) {
    if (t.group == group) out.push_back(t);
  }
  std::sort(out.begin(), out.end(),
            [](const TenantInfo& a, const TenantInfo& b) { return a.pid < b.pid; });
  return out;
}

std::string TopModel::SourceLine() const {
  const std::string local = sample_.nvml ? "group segments + NVML" : "group segments";
  if (!sample_.daemon_used) return "source: " + local + " (--no-daemon)";
  if (sample_.daemon_answered) return "source: gpusliced at " + sample_.socket;
  std::string why = sample_.daemon_error.empty() ? "" : " (" + sample_.daemon_error + ")";
  // The reason last: it names the socket and may be cut at the screen's edge.
  if (daemon_seen_) {
    return "gpusliced stopped answering at " + ClockText(daemon_lost_at_ns_) + "; showing " +
           local + ", reconnecting" + why;
  }
  return "no daemon; showing " + local + why;
}

}  // namespace gpuslice::cli::top
