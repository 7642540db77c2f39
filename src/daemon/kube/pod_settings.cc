#include "daemon/kube/pod_settings.h"

#include <algorithm>
#include <cctype>

#include "common/quantity.h"

namespace gpuslice::daemon::kube {
namespace {

const nlohmann::json* Annotations(const nlohmann::json& pod) {
  auto m = pod.find("metadata");
  if (m == pod.end() || !m->is_object()) return nullptr;
  auto a = m->find("annotations");
  if (a == m->end() || !a->is_object()) return nullptr;
  return &*a;
}

Status Bad(const char* key, const std::string& value, const Status& why) {
  return InvalidArgument(std::string("annotation ") + key + "=\"" + value + "\": " + why.message());
}

}  // namespace

StatusOr<PodSettings> ParsePodSettings(const nlohmann::json& pod) {
  PodSettings s;
  const nlohmann::json* a = Annotations(pod);
  if (a == nullptr) return s;
  auto text = [a](const char* key) -> std::optional<std::string> {
    auto it = a->find(key);
    if (it == a->end()) return std::nullopt;
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  if (auto v = text(kAnnotationMemory)) {
    auto bytes = ParseBytes(*v);
    if (!bytes.ok()) return Bad(kAnnotationMemory, *v, bytes.status());
    if (*bytes == 0) return Bad(kAnnotationMemory, *v, InvalidArgument("must be above 0"));
    s.memory_bytes = *bytes;
  }
  if (auto v = text(kAnnotationCores)) {
    auto p = ParsePercent(*v);
    if (!p.ok()) return Bad(kAnnotationCores, *v, p.status());
    if (*p == 0) return Bad(kAnnotationCores, *v, InvalidArgument("must be 1..100"));
    s.cores_percent = *p;
  }
  if (auto v = text(kAnnotationRequest)) {
    auto p = ParsePercent(*v);
    if (!p.ok()) return Bad(kAnnotationRequest, *v, p.status());
    s.request_percent = *p;
  }
  if (auto v = text(kAnnotationPriority)) {
    auto p = ParsePriority(Trim(*v));
    if (!p.ok()) return Bad(kAnnotationPriority, *v, p.status());
    s.priority = *p;
  }
  if (auto v = text(kAnnotationTier)) {
    auto t = ParseTier(Trim(*v));
    if (!t.ok()) return Bad(kAnnotationTier, *v, t.status());
    // A pod's devices come from the device plugin or its claim, which name
    // no MIG instance yet (docs/mig.md "Not yet").
    if (*t == Tier::kMig) {
      return Bad(kAnnotationTier, *v, InvalidArgument(R"(tier "mig" is not offered to pods yet)"));
    }
    s.tier = *t;
  }
  if (s.request_percent && s.cores_percent && *s.request_percent > *s.cores_percent) {
    return InvalidArgument(std::string("annotation ") + kAnnotationRequest + "=" +
                           std::to_string(*s.request_percent) + " is above " + kAnnotationCores +
                           "=" + std::to_string(*s.cores_percent));
  }
  return s;
}

std::string PodGroup(const nlohmann::json& pod) {
  std::string uid;
  if (const nlohmann::json* a = Annotations(pod)) {
    auto mirror = a->find("kubernetes.io/config.mirror");
    if (mirror != a->end() && mirror->is_string()) uid = mirror->get<std::string>();
  }
  if (uid.empty()) {
    auto m = pod.find("metadata");
    if (m != pod.end() && m->is_object()) uid = m->value("uid", "");
  }
  std::transform(uid.begin(), uid.end(), uid.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (uid.empty() || !ValidateGroupId("pod-" + uid).ok()) return "";
  return "pod-" + uid;
}

bool AsksForDevicePlugins(const nlohmann::json& pod) {
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return false;
  for (const char* list : {"containers", "initContainers"}) {
    auto containers = spec->find(list);
    if (containers == spec->end() || !containers->is_array()) continue;
    for (const nlohmann::json& c : *containers) {
      if (!c.is_object()) continue;
      auto resources = c.find("resources");
      if (resources == c.end() || !resources->is_object()) continue;
      for (const char* kind : {"limits", "requests"}) {
        auto amounts = resources->find(kind);
        if (amounts == resources->end() || !amounts->is_object()) continue;
        for (const auto& [name, value] : amounts->items()) {
          if (name.starts_with("gpuslice.io/")) return true;
        }
      }
    }
  }
  return false;
}

std::string PodName(const nlohmann::json& pod) {
  auto m = pod.find("metadata");
  if (m == pod.end() || !m->is_object()) return "?";
  return m->value("namespace", "") + "/" + m->value("name", "");
}

TenantRegistry::GroupChange GroupChangeFor(const PodSettings& s) {
  TenantRegistry::GroupChange change;
  Limits limits;
  if (s.memory_bytes || s.cores_percent) {
    limits[kAllGpus] = GpuLimit{s.memory_bytes, s.cores_percent};
  }
  change.limits = std::move(limits);
  ScheduleSettings schedule;
  if (s.request_percent || s.priority) {
    schedule[kAllGpus] = ScheduleEntry{.request_percent = s.request_percent,
                                       .priority = s.priority,
                                       .weight = {},
                                       .memory_request_bytes = {}};
  }
  change.schedule = std::move(schedule);
  change.tier = s.tier;
  return change;
}

nlohmann::json PodSettingsJson(const PodSettings& s) {
  nlohmann::json j = nlohmann::json::object();
  if (s.memory_bytes) j["memory_bytes"] = *s.memory_bytes;
  if (s.cores_percent) j["cores"] = *s.cores_percent;
  if (s.request_percent) j["request"] = *s.request_percent;
  if (s.priority) j["priority"] = PriorityName(*s.priority);
  if (s.tier) j["tier"] = TierName(*s.tier);
  return j;
}

}  // namespace gpuslice::daemon::kube
