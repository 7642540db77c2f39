#include "daemon/tenants/registry_types.h"

#include <algorithm>
#include <cctype>

namespace gpuslice::daemon {

GpuLimit Lower(const GpuLimit& a, const GpuLimit& b) {
  auto min = [](const auto& x, const auto& y) {
    if (!x) return y;
    if (!y) return x;
    return std::min(x, y);
  };
  return GpuLimit{min(a.memory_bytes, b.memory_bytes), min(a.compute_percent, b.compute_percent)};
}

GpuLimit LimitOn(const Limits& limits, const std::string& uuid) {
  GpuLimit out;
  if (auto all = limits.find(kAllGpus); all != limits.end()) out = all->second;
  if (auto own = limits.find(uuid); own != limits.end()) {
    if (own->second.memory_bytes) out.memory_bytes = own->second.memory_bytes;
    if (own->second.compute_percent) out.compute_percent = own->second.compute_percent;
  }
  return out;
}

Limits LowerLimits(const Limits& a, const Limits& b) {
  Limits out;
  for (const Limits* side : {&a, &b}) {
    for (const auto& [key, limit] : *side) {
      if (out.contains(key)) continue;
      out[key] = key == kAllGpus ? Lower(LimitOn(a, kAllGpus), LimitOn(b, kAllGpus))
                                 : Lower(LimitOn(a, key), LimitOn(b, key));
    }
  }
  return out;
}

std::string_view PriorityName(Priority priority) {
  return priority == Priority::kLatency ? "latency" : "batch";
}

StatusOr<Priority> ParsePriority(std::string_view name) {
  if (name == "batch") return Priority::kBatch;
  if (name == "latency") return Priority::kLatency;
  return InvalidArgument(R"(priority must be "latency" or "batch", not ")" + std::string(name) +
                         "\"");
}

ScheduleEntry ScheduleEntryOn(const ScheduleSettings& schedule, const std::string& uuid) {
  ScheduleEntry out;
  if (auto all = schedule.find(kAllGpus); all != schedule.end()) out = all->second;
  if (auto own = schedule.find(uuid); own != schedule.end()) {
    if (own->second.request_percent) out.request_percent = own->second.request_percent;
    if (own->second.priority) out.priority = own->second.priority;
    if (own->second.weight) out.weight = own->second.weight;
    if (own->second.memory_request_bytes) {
      out.memory_request_bytes = own->second.memory_request_bytes;
    }
  }
  return out;
}

Status ValidateScheduleEntry(const ScheduleEntry& entry, const std::string& where) {
  if (entry.request_percent && *entry.request_percent > 100) {
    return InvalidArgument("\"" + where + ".request\" must be a percentage from 0 to 100");
  }
  if (entry.weight && (*entry.weight < 1 || *entry.weight > 1000)) {
    return InvalidArgument("\"" + where + ".weight\" must be from 1 to 1000");
  }
  return Status::Ok();
}

Status ValidateGroupId(std::string_view id) {
  const bool ok =
      !id.empty() && id.size() <= 64 && id.front() != '.' &&
      std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
      });
  if (ok) return Status::Ok();
  return InvalidArgument("group \"" + std::string(id) +
                         "\" must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'");
}

}  // namespace gpuslice::daemon
