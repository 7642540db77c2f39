// PodWatch: the node's pods' annotations as their groups' settings
// (DESIGN.md section 5b, "node-scoped pod watch"; docs/kubernetes.md).
//
// Fed by a Reflector on /api/v1/pods with spec.nodeName=<node>:
//  1. A pod with gpuslice.io/* annotations (pod_settings.h) gives its group
//     ("pod-<uid>") exactly those settings, on every GPU; a change of the
//     annotations applies at once (the tenants' next look at their limits
//     sees it); an unchanged pod is not applied again.
//  2. A bad value is reported (a log line, an event on the daemon's stream,
//     and a Kubernetes Event on the pod through the recorder, once per bad
//     value) and the group keeps what it had; nothing throws.
//  3. A pod deleted, gone from a relist, or whose annotations are removed:
//     its group's settings are dropped (limits and schedule cleared; the
//     group forgotten when it has no member).
//  4. A setting the registry refuses (requests above 100 on a GPU, a tier
//     change while the group has members) is reported as in 2.
//  6. A pod that asks for gpuslice.io device-plugin resources
//     (AsksForDevicePlugins) runs in its containers' slice groups, not in
//     "pod-<uid>": its settings go to the DevicePluginPods callback instead
//     (kubelet/device_plugin.h merges them with the containers' amounts),
//     by "namespace/name", when they change, and as nullopt when they are
//     removed or the pod is deleted or gone from a relist.
//  5. The first LIST reconciles what the daemon restored: a pod group with
//     settings (target.PodGroups()) whose pod is not on the node any more
//     (deleted while the daemon was down) loses them as in 3.
//
// Threads: the handler calls come from the reflector's one thread; applied()
// may be read from any.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/kube/pod_settings.h"
#include "daemon/kube/reflector.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon::kube {

class KubeClient;

// Where settings go: the registry in the daemon, a recorder in tests.
class GroupSettingsTarget {
 public:
  virtual ~GroupSettingsTarget() = default;
  virtual Status Apply(const std::string& group, const PodSettings& settings) = 0;
  virtual Status Drop(const std::string& group) = 0;
  // The pod groups ("pod-...") that hold settings now, whoever set them (a
  // checkpoint restored at start among them).
  virtual std::vector<std::string> PodGroups() const = 0;
};

// Over TenantRegistry::UpdateGroup / ForgetWhenEmpty.
class RegistrySettingsTarget final : public GroupSettingsTarget {
 public:
  explicit RegistrySettingsTarget(TenantRegistry& registry) : registry_(registry) {}
  Status Apply(const std::string& group, const PodSettings& settings) override;
  // Clears limits and schedule; forgets the group, at once when it has no
  // member, else when its last member goes.
  Status Drop(const std::string& group) override;
  std::vector<std::string> PodGroups() const override;

 private:
  TenantRegistry& registry_;
};

class PodWatch final : public ReflectorHandler {
 public:
  using EventSink = std::function<void(std::string_view type, const nlohmann::json& data)>;
  // Records a Kubernetes Event (type Warning) on the pod.
  using Recorder = std::function<void(const nlohmann::json& pod, const std::string& reason,
                                      const std::string& message)>;

  // REQUIRES: `target` outlives the watch. `recorder` may be empty.
  PodWatch(GroupSettingsTarget& target, EventSink sink, Recorder recorder = {});

  // Rule 6's receiver. REQUIRES: called before the reflector starts.
  using DevicePluginPods =
      std::function<void(const std::string& pod, const std::optional<PodSettings>& settings)>;
  void SetDevicePluginPods(DevicePluginPods pods) { device_plugin_pods_ = std::move(pods); }

  void OnList(const std::vector<nlohmann::json>& pods) override;
  void OnEvent(std::string_view type, const nlohmann::json& pod) override;

  // What is applied now, by group.
  std::map<std::string, PodSettings> applied() const;

 private:
  void Update(const nlohmann::json& pod);
  void Forget(const std::string& group, const std::string& why);
  void Report(const nlohmann::json& pod, const std::string& group, const std::string& reason,
              const Status& error);

  GroupSettingsTarget& target_;
  const EventSink sink_;
  const Recorder recorder_;
  mutable Mutex mu_;
  std::map<std::string, PodSettings> applied_ GUARDED_BY(mu_);
  std::map<std::string, std::string> reported_;  // the reflector thread's: last error by group
  bool listed_ = false;                          // the reflector thread's: a LIST was seen
  DevicePluginPods device_plugin_pods_;
  // The reflector thread's: what device_plugin_pods_ was told, by pod name.
  std::map<std::string, std::optional<PodSettings>> told_;
};

// A Recorder that POSTs a core/v1 Event to the pod's namespace, as
// `component` on `node`; failures are logged, never retried.
PodWatch::Recorder KubeEventRecorder(KubeClient& client, std::string component, std::string node);

}  // namespace gpuslice::daemon::kube
