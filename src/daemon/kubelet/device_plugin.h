// DevicePlugins: gpuslice's v1beta1 device plugins, for clusters without DRA
// (DESIGN.md section 5b; docs/kubernetes.md "Kubelet side"). Three
// resources, each a plugin on its own socket in the kubelet's device-plugins
// directory, registered with the kubelet's Registration service on
// kubelet.sock:
//   gpuslice.io/vgpu        `vgpu_per_gpu` devices per GPU   "<uuid>-v<n>"
//   gpuslice.io/gpu-memory  one device per `memory_unit_mib` "<uuid>-m<n>"
//   gpuslice.io/gpu-cores   100 devices per GPU (percent)    "<uuid>-c<n>"
// Device ids are deterministic: Allocate reads the GPU and the amount from
// the ids it is given (never a guess about which pod is pending), and the
// same ids always mean the same thing, across daemon and kubelet restarts.
//
// Allocate, per container: the limiter is injected (library mount,
// LD_PRELOAD or /etc/ld.so.preload, daemon socket and segment directories,
// NVIDIA_VISIBLE_DEVICES, device nodes) and the container's share as the
// environment limits of its dimension (GPUSLICE_MEMORY_LIMIT or
// GPUSLICE_COMPUTE_LIMIT keyed by GPU UUID). The kubelet calls each
// resource's plugin separately and merges what they return; GPUSLICE_GROUP is
// not set, so the limiter's group is the pod (its UID). Each allocation is
// recorded in the AllocationStore under "dp-<resource>-<hash of the ids>".
//
// PodResources cross-check (Reconcile): the kubelet's List names the pod
// (namespace/name) holding each recorded allocation's ids; an allocation
// whose ids no pod holds on two consecutive checks is released.
//
// Kubelet restarts: a watcher polls (every `poll_interval`) kubelet.sock and
// the plugin sockets; when kubelet.sock is recreated (a new inode) or a
// plugin socket vanished (the kubelet removes them when it starts), the
// plugins serve again and register again.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "daemon/kubelet/allocation_store.h"
#include "daemon/kubelet/cdi_spec.h"
#include "kubelet_proto/deviceplugin_v1beta1.grpc.pb.h"

namespace gpuslice::daemon::kubelet {

enum class DpResource { kVgpu, kMemory, kCores };
// "gpuslice.io/vgpu", "gpuslice.io/gpu-memory", "gpuslice.io/gpu-cores".
std::string ResourceName(DpResource r);

// The device id of unit `n` of resource `r` on GPU `uuid`.
std::string DpDeviceId(DpResource r, const std::string& uuid, uint64_t n);
struct ParsedDeviceId {
  DpResource resource;
  std::string uuid;
  uint64_t n;
};
// kInvalidArgument when `id` is not one of ours.
StatusOr<ParsedDeviceId> ParseDpDeviceId(const std::string& id);

struct GpuOffer {
  uint32_t index = 0;
  std::string uuid;
  uint64_t memory_bytes = 0;
};

struct DevicePluginOptions {
  std::string dir = "/var/lib/kubelet/device-plugins";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  uint32_t vgpu_per_gpu = 10;
  uint32_t memory_unit_mib = 1;
  std::chrono::milliseconds poll_interval{1000};
  int reconcile_every = 10;  // polls between PodResources checks; 0: only Reconcile() calls
  CdiOptions inject;  // library, ld_so_preload, daemon_socket, shm_dir, dev_root (dir unused)
};

class DevicePlugins {
 public:
  using Gpus = std::function<std::vector<GpuOffer>()>;

  // REQUIRES: `store` outlives the plugins.
  DevicePlugins(DevicePluginOptions options, AllocationStore& store, Gpus gpus);
  ~DevicePlugins();
  DevicePlugins(const DevicePlugins&) = delete;
  DevicePlugins& operator=(const DevicePlugins&) = delete;

  // Serves the three plugins, registers them if kubelet.sock exists, and
  // starts the watcher (which registers them once it appears).
  Status Start();
  void Stop();

  // The devices advertised for `r` now.
  std::vector<std::string> Devices(DpResource r) const;
  // The core of Allocate for one container.
  StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(
      DpResource r, const std::vector<std::string>& ids);
  // The PodResources cross-check (see above).
  Status Reconcile();

  // How many times the three plugins were registered (3 per round).
  int registrations() const;

 private:
  class Service;
  Status Serve();
  void StopServing();
  Status RegisterAll();
  void Watch();
  uint64_t KubeletSocketInode() const;
  bool OurSocketsPresent() const;
  std::string SocketOf(DpResource r) const;

  DevicePluginOptions options_;
  AllocationStore& store_;
  Gpus gpus_;
  std::vector<std::unique_ptr<Service>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int registrations_ = 0;
  uint64_t registered_inode_ = 0;
  std::vector<std::string> missing_once_;  // allocations no pod held at the last check
  std::thread watcher_;
};

}  // namespace gpuslice::daemon::kubelet
