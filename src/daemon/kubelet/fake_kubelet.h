// FakeKubelet: the kubelet's side of its plugin APIs, for tests (no
// Kubernetes exists on our machines; DESIGN.md section 5b). Everything runs
// on unix sockets under a directory the test owns.
//  - Plugin watcher: finds registration sockets in a plugins_registry
//    directory and registers each as the kubelet does (GetInfo, then
//    NotifyRegistrationStatus).
//  - DRA client: NodePrepareResources / NodeUnprepareResources, v1 or v1beta1.
//  - Device plugin manager: serves v1beta1.Registration on
//    <device-plugins>/kubelet.sock, remembers each RegisterRequest; and a
//    client of the plugin's DevicePlugin service (ListAndWatch, Allocate).
//    Restart() removes and recreates kubelet.sock, as a kubelet restart does.
//  - PodResources: serves v1.PodResourcesLister (List, Get) from a table the
//    test sets.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kubelet_proto/deviceplugin_v1beta1.grpc.pb.h"
#include "kubelet_proto/dra_health_v1alpha1.grpc.pb.h"
#include "kubelet_proto/dra_v1.grpc.pb.h"
#include "kubelet_proto/pluginregistration_v1.grpc.pb.h"
#include "kubelet_proto/podresources_v1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace gpuslice::daemon::kubelet {

namespace dra_api = k8s::io::kubelet::pkg::apis::dra::v1;

class FakeKubelet {
 public:
  FakeKubelet();
  ~FakeKubelet();

  // --- plugin registration (DRA) ---
  // Registers the plugin whose registration socket is `socket`: GetInfo,
  // then NotifyRegistrationStatus(registered = accept). Returns its info.
  StatusOr<pluginregistration::PluginInfo> RegisterPlugin(const std::string& socket,
                                                          bool accept = true);
  // The registration sockets (*.sock) in `registry_dir`, sorted.
  static std::vector<std::string> FindPluginSockets(const std::string& registry_dir);

  // --- DRA ---
  // "v1" or "v1beta1".
  StatusOr<dra_api::NodePrepareResourcesResponse> Prepare(const std::string& endpoint,
                                                          const std::vector<dra_api::Claim>& claims,
                                                          const std::string& version = "v1");
  StatusOr<dra_api::NodeUnprepareResourcesResponse> Unprepare(
      const std::string& endpoint, const std::vector<dra_api::Claim>& claims,
      const std::string& version = "v1");

  // Watches the DRA plugin's health (v1alpha1 NodeWatchResources on
  // `endpoint`) until `done` holds for an update or `timeout` passes; the
  // updates read.
  StatusOr<std::vector<v1alpha1::NodeWatchResourcesResponse>> WatchHealth(
      const std::string& endpoint,
      const std::function<bool(const v1alpha1::NodeWatchResourcesResponse&)>& done,
      std::chrono::milliseconds timeout);

  // --- device plugins ---
  // Serves v1beta1.Registration on `dir`/kubelet.sock.
  Status StartDevicePluginManager(const std::string& dir);
  // A kubelet restart: the server stops, kubelet.sock and the plugins'
  // sockets are removed, and kubelet.sock is recreated by a new server. Registrations seen so far
  // are kept.
  Status RestartDevicePluginManager();
  void StopDevicePluginManager();
  std::vector<v1beta1::RegisterRequest> Registrations() const;
  // Waits until at least `n` registrations were seen.
  bool WaitForRegistrations(size_t n, std::chrono::milliseconds timeout) const;
  // The first ListAndWatch answer of the plugin on `dir`/`endpoint`.
  StatusOr<v1beta1::ListAndWatchResponse> ListDevices(const std::string& socket);
  // The ListAndWatch answers of the plugin on `socket` until `done` holds
  // for one or `timeout` passes.
  StatusOr<std::vector<v1beta1::ListAndWatchResponse>> WatchDevices(
      const std::string& socket,
      const std::function<bool(const v1beta1::ListAndWatchResponse&)>& done,
      std::chrono::milliseconds timeout);
  StatusOr<v1beta1::AllocateResponse> Allocate(const std::string& socket,
                                               const std::vector<std::vector<std::string>>& ids);
  // PreStartContainer with one container's `ids`, as the kubelet calls it
  // before starting the container when the plugin asked for it; the plugin's
  // error is the container's start failing.
  Status PreStart(const std::string& socket, const std::vector<std::string>& ids);
  StatusOr<v1beta1::DevicePluginOptions> Options(const std::string& socket);

  // --- PodResources ---
  Status StartPodResources(const std::string& socket);
  void SetPods(std::vector<v1::PodResources> pods);

 private:
  class RegistrationService;
  class PodResourcesService;

  std::string dp_dir_;
  std::unique_ptr<RegistrationService> registration_;
  std::unique_ptr<grpc::Server> dp_server_;
  std::unique_ptr<PodResourcesService> pod_resources_;
  std::unique_ptr<grpc::Server> pr_server_;
};

// What PodResources reports for pod `ns`/`name` with one container, "main",
// holding `devices` (resource name, device ids), in that order.
v1::PodResources PodWithDevices(
    const std::string& name, const std::string& ns,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& devices);

}  // namespace gpuslice::daemon::kubelet
