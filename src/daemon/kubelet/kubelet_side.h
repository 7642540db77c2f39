// KubeletSide: the kubelet-facing parts of gpusliced, as the daemon starts
// them (docs/kubelet.md; flags in docs/daemon.md). Nothing
// starts unless a flag asks: --dra serves the DRA kubelet plugin,
// --device-plugin the v1beta1 device plugins. Both share one AllocationStore
// (checkpointed in the daemon's state directory, restored here) whose groups'
// limits go to the TenantRegistry.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/config.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/kubelet/allocation_store.h"
#include "daemon/kubelet/claim_reader.h"
#include "daemon/kubelet/device_plugin.h"
#include "daemon/kubelet/dra_plugin.h"

namespace gpuslice::daemon::kubelet {

// What the kubelet's side takes of the daemon's configuration: the keys
// dra, device_plugin, kubelet_dir, cdi_dir, dra_claims_dir, limiter_library,
// ld_so_preload, vgpu_per_gpu and gpu_memory_unit_mib (daemon/config_keys.inc,
// which gives their defaults and checks). Built by KubeletConfigOf; a
// default-constructed one enables nothing.
struct KubeletConfig {
  std::string kubelet_dir;  // plugins/, plugins_registry/, device-plugins/
  bool dra = false;
  bool device_plugin = false;
  std::string cdi_dir;
  std::string claims_dir;  // ResourceClaims as files (FileClaimReader); "": the API server's
  std::string limiter_library;
  std::string ld_so_preload;          // host file mounted as /etc/ld.so.preload; "": LD_PRELOAD
  uint32_t device_plugin_slices = 0;  // gpuslice.io/vgpu devices per GPU
  uint32_t memory_unit_mib = 0;       // MiB per gpuslice.io/gpu-memory device

  bool enabled() const { return dra || device_plugin; }
};

// REQUIRES: ValidateConfig(config) is ok (the counts fit in 32 bits).
KubeletConfig KubeletConfigOf(const DaemonConfig& config);

// Each GPU of `snapshot` as the DRA health service reports it: Unknown
// before its first read, Unhealthy while its reads fail (NVML_ERROR_GPU_IS_LOST
// and the like), else Healthy; named as in the ResourceSlices ("gpu<index>"),
// stamped with `now_unix_s`.
std::vector<DeviceHealthReport> GpuHealth(const Snapshot& snapshot, int64_t now_unix_s);
// The kubelet's node name: `kube_node` when given, else the host's name.
std::string NodeName(const std::string& kube_node);

class DevicePlugins;

class KubeletSide {
 public:
  struct Context {
    TenantRegistry& registry;
    StateStore* state;                                   // may be null
    std::function<std::vector<NodeGpu>()> node_gpus;     // the node's GPUs now
    std::function<uint64_t(const std::string&)> memory;  // a GPU's memory bytes, by UUID
    std::string daemon_socket;                           // injected into containers
    std::string shm_dir;
    ClaimReader* claim_reader = nullptr;  // null: config.claims_dir's, else none (Unavailable)
    // The node's GPUs' health for the DRA health service (null: not served),
    // and the ResourceSlices' pool (the node's name) its reports name.
    std::function<std::vector<DeviceHealthReport>()> health;
    std::string pool;
    // MPS for device-plugin slices of pods asking for it
    // (DevicePluginOptions::mps_acquire/mps_release); unset where the node
    // runs no MPS.
    decltype(DevicePluginOptions::mps_acquire) mps_acquire;
    decltype(DevicePluginOptions::mps_release) mps_release;
  };

  // Restores the allocations and starts what `config` asks for.
  // REQUIRES: config.enabled(); what `context` refers to outlives the result.
  static StatusOr<std::unique_ptr<KubeletSide>> Start(const KubeletConfig& config, Context context);
  ~KubeletSide();
  // Stops serving (sockets removed). Allocations stay recorded. Idempotent.
  void Stop();
  // Saves each allocation record whose last save failed (AllocationStore
  // invariant 4); the daemon calls it after every GPU sample. Thread-safe.
  Status RetryCheckpoint();
  // Removes the segment directory (<shm-dir>/claims/<group>/) of every group
  // no allocation records any more, once the registry has forgotten the
  // group and no process holds its segments: an
  // unprepare or a slice's release while a tenant still held one leaves it
  // (event=slice_segments_kept), and so does a daemon stopped meanwhile.
  // The daemon calls it after every GPU sample. Thread-safe.
  void SweepClaimDirs();

  AllocationStore& store() { return *store_; }
  // The device plugins (null without config.device_plugin): where pods'
  // annotations go (DevicePlugins::SetPodSettings).
  DevicePlugins* device_plugins() { return device_plugins_.get(); }

 private:
  KubeletSide() = default;

  std::string shm_dir_;
  const TenantRegistry* registry_ = nullptr;
  std::unique_ptr<RegistryLimitSink> sink_;
  std::unique_ptr<AllocationStore> store_;
  std::unique_ptr<ClaimReader> owned_reader_;
  std::unique_ptr<DraPlugin> dra_;
  std::unique_ptr<NoLimitSink> no_sink_;
  std::unique_ptr<AllocationStore> dp_store_;
  std::unique_ptr<DevicePlugins> device_plugins_;
};

}  // namespace gpuslice::daemon::kubelet
