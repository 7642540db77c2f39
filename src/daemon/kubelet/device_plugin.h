// DevicePlugins: gpuslice's v1beta1 device plugins, for clusters without DRA
// (docs/kubelet.md "Device plugins"). Three resources, each a plugin on its
// own socket in the kubelet's device-plugins directory, registered with the
// kubelet's Registration service on kubelet.sock:
//   gpuslice.io/vgpu        `vgpu_per_gpu` devices per GPU   "<uuid>-v<n>"
//   gpuslice.io/gpu-memory  one device per `memory_unit_mib` "<uuid>-m<n>"
//   gpuslice.io/gpu-cores   100 devices per GPU (percent)    "<uuid>-c<n>"
//
// Invariants:
//  1. Device ids are deterministic: the same id means the same GPU and
//     amount across daemon and kubelet restarts, and Allocate reads both from
//     the ids it is given (never a guess about which pod is pending).
//  2. Only gpuslice.io/vgpu mounts and names things. The kubelet calls each
//     resource's plugin separately and merges their answers (keeping the
//     first answer's value of an environment variable, in no fixed order), so
//     a vgpu device is the container's slice and its group: the limiter is
//     injected (library mount, LD_PRELOAD or /etc/ld.so.preload, the daemon
//     socket's directory, NVIDIA_VISIBLE_DEVICES, device nodes),
//     GPUSLICE_GROUP is the slice's allocation id, and only the group's own
//     segment directory (shm/segment_dirs.h) is mounted. gpu-memory and
//     gpu-cores are amounts of that slice and return only their limit, as the
//     environment's bootstrap fallback (GPUSLICE_MEMORY_LIMIT or
//     GPUSLICE_COMPUTE_LIMIT keyed by GPU UUID).
//  3. Each allocation is recorded in the AllocationStore under
//     "dp-<resource>-<hash of the ids>" before Allocate answers.
//  4. A slice's group holds its container's settings in the registry before
//     any process of the container runs: every plugin registers with
//     PreStartRequired, and PreStartContainer (PrepareContainer; after all
//     Allocates, before the container starts; its failure fails the start
//     with our message) checks PodResources and applies them. An amount in a
//     container without a gpuslice.io/vgpu is refused there
//     (kFailedPrecondition "... needs gpuslice.io/vgpu ..."): it has no group
//     to go to, and a container with amounts but no limiter would run
//     unlimited.
//  5. An allocation whose ids no pod holds on two consecutive regular
//     PodResources checks (every `reconcile_every` polls, and Reconcile()) is
//     released, its slice's settings and directory with it. The checks at
//     PreStartContainer, and those made at every poll while a slice's
//     settings are not applied yet, release nothing.
//
// A container's settings (ContainerSettings): the slice group gets
//   limits   = the container's amounts per GPU, each lowered by the pod's
//              gpuslice.io/memory and gpuslice.io/cores annotations where
//              they say less (an annotation sets a limit the container has
//              no amount for; it never raises one: the amounts are what the
//              scheduler counted against the node);
//   schedule = the pod's gpuslice.io/request and gpuslice.io/priority, on
//              each of the container's GPUs;
//   tier     = the pod's gpuslice.io/tier, else shared.
// Annotations arrive through SetPodSettings (the pod watch, kube/pod_watch.h)
// and apply at once to the containers the last check saw.
//
// MPS (docs/kubelet.md "MPS"): with `mps_acquire` set, each slice's Allocate
// answer also names a CDI device, kCdiMpsKind=<group> (cdi_spec.h), whose
// spec the runtime reads when it creates the container, after
// PreStartContainer. Allocate cannot know the pod (the kubelet gives only
// device ids, and PodResources shows a container only once its Allocate has
// succeeded), so Allocate writes the spec empty (GPUSLICE_MPS=off), and
// PrepareContainer, once the pod's settings are the group's, acquires the
// group's MPS tenant when its tier is `mps` (`mps_acquire`: the grant a
// registration of the group gets, through GroupTiers) and rewrites the spec
// with the tenant's client environment (CUDA_MPS_PIPE_DIRECTORY, thread
// percentage, pinned memory limit, SM partition on v3) and a mount of its
// pipe directory. Where MPS cannot be had the spec stays empty
// (the group runs shared; GroupTiers logs why, event=tier_fallback). A
// release removes the spec and lets the tenant go (`mps_release`).
//
// Kubelet restarts: a watcher polls kubelet.sock and the plugin sockets
// every `poll_interval`; when kubelet.sock is recreated (a new inode) or a
// plugin socket vanished (the kubelet removes them when it starts), the
// plugins serve and register again.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/kubelet/allocation_store.h"
#include "daemon/kubelet/cdi_spec.h"
#include "daemon/kubelet/kubelet_paths.h"
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
  // False: its devices are listed "Unhealthy" (a lost GPU, a critical XID:
  // kubelet_side.h GpuHealth), so the kubelet places no new pod on them.
  bool healthy = true;
};

struct DevicePluginOptions {
  std::string dir = DevicePluginDir();
  std::string pod_resources_socket = PodResourcesSocket();
  uint32_t vgpu_per_gpu = 10;
  uint32_t memory_unit_mib = 1;
  std::chrono::milliseconds poll_interval{1000};
  // PreStartContainer's bound on its PodResources check (the kubelet waits
  // 30 s for the answer).
  std::chrono::milliseconds pre_start_timeout{10'000};
  int reconcile_every = 10;  // polls between PodResources checks; 0: only Reconcile() calls
  CdiOptions inject;  // library, ld_so_preload, daemon_socket, shm_dir, dev_root (dir unused)
  // Where each slice's limits go once its container's amounts are known
  // (the TenantRegistry in the daemon); null: the environment only.
  GroupLimitSink* limits = nullptr;
  // MPS for slices whose pod asks for it (see above); unset: no CDI device.
  using MpsGrant = kubelet::MpsGrant;
  MpsAcquire mps_acquire;
  MpsRelease mps_release;
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
  // ListAndWatch's list for `r` now: the devices with their health. The
  // stream sends it again whenever it changes (looked at every 200 ms).
  v1beta1::ListAndWatchResponse DeviceList(DpResource r) const;
  // The core of Allocate for one container.
  StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(
      DpResource r, const std::vector<std::string>& ids);
  // The core of PreStartContainer for one container's ids of `r` (see
  // above): OK once the container's slice group holds its settings.
  // Errors: kFailedPrecondition (not ours, not in PodResources, an amount
  // without a slice), kUnavailable (PodResources unreachable within
  // `pre_start_timeout`), the registry's refusal.
  Status PrepareContainer(DpResource r, const std::vector<std::string>& ids);
  // The PodResources cross-check (see above).
  Status Reconcile();
  // The settings pod `pod` ("namespace/name")'s gpuslice.io/* annotations
  // ask for, as the registry change kube/pod_settings.h GroupChangeFor makes
  // of them (limits and schedule under kAllGpus, the tier); nullopt: none (or
  // the pod is gone). Applied to the pod's containers' slices at once.
  void SetPodSettings(const std::string& pod, std::optional<TenantRegistry::GroupChange> change);

  // What a container's slice group gets (see above): `amounts` per GPU, on
  // `gpus`, with `pod`'s annotation settings.
  static TenantRegistry::GroupChange ContainerSettings(
      const Limits& amounts, const std::set<std::string>& gpus,
      const std::optional<TenantRegistry::GroupChange>& pod);

  // How many times the three plugins were registered (3 per round).
  int registrations() const;

 private:
  class Service;
  std::vector<std::string> Devices(DpResource r, const GpuOffer& g) const;
  // One container's view from the last PodResources check.
  struct Container {
    std::string pod;  // namespace/name
    Limits amounts;   // by GPU UUID
    std::set<std::string> gpus;
    std::vector<std::string> amount_ids;
  };
  Status Check(bool release) EXCLUDES(mu_, check_mu_);
  Status CheckLocked(bool release, std::chrono::milliseconds timeout) REQUIRES(check_mu_)
      EXCLUDES(mu_);
  Status ApplyLocked() REQUIRES(check_mu_) EXCLUDES(mu_);
  Status Release(const std::string& id) EXCLUDES(mu_);
  // PrepareContainer's checks: `slice` is the slice group of allocation `id`
  // (of `r`) once the last check (`checked`) saw its container and its
  // settings are set.
  Status PreparedSliceLocked(DpResource r, const std::string& id, const Status& checked,
                             std::string& slice) REQUIRES(mu_);
  // Writes slice `group`'s MPS spec for `tier` on `gpus` (see above).
  Status WriteMpsSpec(const std::string& group, Tier tier, const std::set<std::string>& gpus)
      EXCLUDES(mu_);
  // True while a recorded slice's settings are not applied yet (its
  // container not yet seen in PodResources).
  bool HasUnjoinedSlice() const EXCLUDES(mu_);
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
  // Serialises checks and the settings they apply (taken before mu_).
  Mutex check_mu_ ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  int registrations_ GUARDED_BY(mu_) = 0;
  uint64_t registered_inode_ GUARDED_BY(mu_) = 0;
  // Allocations no pod held at the last check.
  std::vector<std::string> missing_once_ GUARDED_BY(mu_);
  // Slice group -> the settings set in `limits`.
  std::map<std::string, TenantRegistry::GroupChange> applied_ GUARDED_BY(mu_);
  std::map<std::string, Container> containers_ GUARDED_BY(mu_);   // by slice group
  std::map<std::string, std::string> sliceless_ GUARDED_BY(mu_);  // amount id -> its pod
  std::map<std::string, TenantRegistry::GroupChange> pod_settings_ GUARDED_BY(mu_);
  std::thread watcher_;
};

}  // namespace gpuslice::daemon::kubelet
