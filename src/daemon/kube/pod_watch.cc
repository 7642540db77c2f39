#include "daemon/kube/pod_watch.h"

#include <set>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/kube/kube_client.h"

namespace gpuslice::daemon::kube {

Status RegistrySettingsTarget::Apply(const std::string& group, const PodSettings& settings) {
  auto g = registry_.UpdateGroup(group, GroupChangeFor(settings));
  return g.ok() ? Status::Ok() : g.status();
}

Status RegistrySettingsTarget::Drop(const std::string& group) {
  if (!registry_.GroupOf(group)) return Status::Ok();
  auto g = registry_.UpdateGroup(
      group, {.limits = Limits{}, .tier = std::nullopt, .schedule = ScheduleSettings{}});
  if (!g.ok()) return g.status();
  // Members still run (or their exit is not seen yet): the group stays,
  // without settings, until the last of them goes.
  return registry_.ForgetWhenEmpty(group);
}

std::vector<std::string> RegistrySettingsTarget::PodGroups() const {
  std::vector<std::string> out;
  for (const Group& g : registry_.Groups()) {
    if (!g.id.starts_with("pod-")) continue;
    const bool has_settings = !g.limits.empty() || g.tier != Tier::kShared || !g.schedule.empty();
    if (has_settings) out.push_back(g.id);
  }
  return out;
}

PodWatch::PodWatch(GroupSettingsTarget& target, EventSink sink, Recorder recorder)
    : target_(target), sink_(std::move(sink)), recorder_(std::move(recorder)) {}

void PodWatch::OnList(const std::vector<nlohmann::json>& pods) {
  std::set<std::string> present;
  std::set<std::string> names;
  for (const nlohmann::json& pod : pods) {
    present.insert(PodGroup(pod));
    names.insert(PodName(pod));
    Update(pod);
  }
  for (auto it = told_.begin(); it != told_.end();) {
    if (names.contains(it->first)) {
      ++it;
      continue;
    }
    if (it->second) device_plugin_pods_(it->first, std::nullopt);
    it = told_.erase(it);
  }
  for (const auto& [group, settings] : applied()) {
    if (!present.contains(group)) Forget(group, "gone");
  }
  if (!listed_) {
    // What the daemon restored for pods deleted while it was down.
    listed_ = true;
    for (const std::string& group : target_.PodGroups()) {
      if (present.contains(group)) continue;
      {
        MutexLock lock(mu_);
        applied_.emplace(group, PodSettings{});  // so that Forget drops it
      }
      Forget(group, "pod gone while the daemon was down");
    }
  }
}

void PodWatch::OnEvent(std::string_view type, const nlohmann::json& pod) {
  if (type == "DELETED") {
    if (auto it = told_.find(PodName(pod)); it != told_.end()) {
      if (it->second) device_plugin_pods_(it->first, std::nullopt);
      told_.erase(it);
    }
    const std::string group = PodGroup(pod);
    if (!group.empty()) Forget(group, "deleted");
    return;
  }
  Update(pod);
}

std::map<std::string, PodSettings> PodWatch::applied() const {
  MutexLock lock(mu_);
  return applied_;
}

void PodWatch::Report(const nlohmann::json& pod, const std::string& group,
                      const std::string& reason, const Status& error) {
  if (reported_[group] == error.message()) return;  // once per distinct error
  reported_[group] = error.message();
  const std::string name = PodName(pod);
  GS_LOG(kWarn, "kube", "event=%s pod=%s group=%s error=\"%s\"", reason.c_str(), name.c_str(),
         group.c_str(), error.message().c_str());
  if (sink_) {
    sink_("kube_pod_settings_refused",
          {{"pod", name}, {"group", group}, {"reason", reason}, {"error", error.message()}});
  }
  if (recorder_) recorder_(pod, reason, error.message());
}

void PodWatch::Update(const nlohmann::json& pod) {
  const std::string group = PodGroup(pod);
  if (group.empty()) return;
  auto settings = ParsePodSettings(pod);
  if (!settings.ok()) {
    Report(pod, group, "InvalidGpusliceAnnotation", settings.status());
    return;
  }
  if (device_plugin_pods_ && AsksForDevicePlugins(pod)) {
    const std::string name = PodName(pod);
    std::optional<PodSettings> wanted;
    if (!settings->empty()) wanted = *settings;
    auto told = told_.find(name);
    if (told != told_.end() && told->second == wanted) return;
    if (told == told_.end() && !wanted) {
      told_[name] = std::nullopt;
      return;
    }
    told_[name] = wanted;
    reported_.erase(group);
    device_plugin_pods_(name, wanted);
    GS_LOG(kInfo, "kube", "event=pod_settings_applied pod=%s to=device_plugin_slices settings=%s",
           name.c_str(), wanted ? PodSettingsJson(*wanted).dump().c_str() : "{}");
    if (sink_) {
      sink_("kube_pod_settings_applied",
            {{"pod", name},
             {"group", ""},
             {"device_plugin", true},
             {"settings", wanted ? PodSettingsJson(*wanted) : nlohmann::json::object()}});
    }
    return;
  }
  std::optional<PodSettings> before;
  {
    MutexLock lock(mu_);
    if (auto it = applied_.find(group); it != applied_.end()) before = it->second;
  }
  if (settings->empty()) {
    if (before) Forget(group, "annotations removed");
    return;
  }
  if (before && *before == *settings) return;
  if (Status s = target_.Apply(group, *settings); !s.ok()) {
    Report(pod, group, "GpusliceSettingsRefused", s);
    return;
  }
  reported_.erase(group);
  {
    MutexLock lock(mu_);
    applied_[group] = *settings;
  }
  GS_LOG(kInfo, "kube", "event=pod_settings_applied pod=%s group=%s settings=%s",
         PodName(pod).c_str(), group.c_str(), PodSettingsJson(*settings).dump().c_str());
  if (sink_) {
    sink_("kube_pod_settings_applied",
          {{"pod", PodName(pod)}, {"group", group}, {"settings", PodSettingsJson(*settings)}});
  }
}

void PodWatch::Forget(const std::string& group, const std::string& why) {
  reported_.erase(group);
  {
    MutexLock lock(mu_);
    if (applied_.erase(group) == 0) return;
  }
  if (Status s = target_.Drop(group); !s.ok()) {
    GS_LOG(kWarn, "kube", "event=pod_settings_drop_failed group=%s error=\"%s\"", group.c_str(),
           s.message().c_str());
  }
  GS_LOG(kInfo, "kube", "event=pod_settings_dropped group=%s why=\"%s\"", group.c_str(),
         why.c_str());
  if (sink_) sink_("kube_pod_settings_dropped", {{"group", group}, {"why", why}});
}

PodWatch::Recorder KubeEventRecorder(KubeClient& client, std::string component, std::string node) {
  return [&client, component = std::move(component), node = std::move(node)](
             const nlohmann::json& pod, const std::string& reason, const std::string& message) {
    const nlohmann::json& m = pod["metadata"];
    const std::string ns = m.value("namespace", "default");
    const int64_t now_s = RealtimeNs() / 1'000'000'000;
    char stamp[32];
    time_t t = now_s;
    tm utc{};
    gmtime_r(&t, &utc);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
    nlohmann::json event = {
        {"apiVersion", "v1"},
        {"kind", "Event"},
        {"metadata", {{"generateName", m.value("name", "pod") + "."}, {"namespace", ns}}},
        {"involvedObject",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"name", m.value("name", "")},
          {"namespace", ns},
          {"uid", m.value("uid", "")}}},
        {"reason", reason},
        {"message", message},
        {"type", "Warning"},
        {"source", {{"component", component}, {"host", node}}},
        {"firstTimestamp", stamp},
        {"lastTimestamp", stamp},
        {"count", 1}};
    auto r = client.Post("/api/v1/namespaces/" + ns + "/events", event);
    if (!r.ok()) {
      GS_LOG(kWarn, "kube", "event=k8s_event_failed error=\"%s\"", r.status().message().c_str());
    }
  };
}

}  // namespace gpuslice::daemon::kube
