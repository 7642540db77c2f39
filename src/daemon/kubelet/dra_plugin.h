// DraPlugin: gpuslice's DRA kubelet plugin (DESIGN.md section 5b;
// docs/kubelet.md).
//
// Serves, on unix sockets:
//  - the DRA service, k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and the same
//    under v1beta1, on `plugin_socket` (default
//    /var/lib/kubelet/plugins/gpuslice.io/dra.sock);
//  - the DRA resource health service v1alpha1.DRAResourceHealth, on the
//    same socket, when options.health is set: each GPU Healthy while NVML
//    reads it, Unhealthy when a read fails (a lost GPU), Unknown before the
//    first read;
//  - the plugin-registration service on `registration_socket` in the
//    kubelet's plugins_registry directory, where the kubelet's plugin watcher
//    finds it: GetInfo answers type "DRAPlugin", the driver name, the plugin
//    socket and the supported services "v1.DRAPlugin", "v1beta1.DRAPlugin".
//
// NodePrepareResources, per claim: an allocation already recorded is
// answered from the record (kubelet retries and restarts, a daemon restart:
// nothing is prepared twice); otherwise the claim's allocation is read
// (ClaimReader), each device resolved to a GPU of this node, the allocation
// recorded (AllocationStore: the group = claim UID gets the limits) and its
// CDI spec written (cdi_spec.h); the answer names the CDI device. A failure
// leaves nothing behind and is reported in that claim's error (the kubelet
// retries). NodeUnprepareResources removes the record, the limits and the
// spec; unknown claims are fine.
//
// Thread-safe; prepares and unprepares are serialised.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/kubelet/allocation_store.h"
#include "daemon/kubelet/cdi_spec.h"
#include "daemon/kubelet/claim_reader.h"
#include "daemon/kubelet/kubelet_paths.h"

namespace grpc {
class Server;
}

namespace gpuslice::daemon::kubelet {

// One device's health for the kubelet's DRA resource health API.
struct DeviceHealthReport {
  enum class State { kUnknown, kHealthy, kUnhealthy };
  std::string device;  // the ResourceSlice's device name: "gpu<index>"
  State state = State::kUnknown;
  int64_t updated_unix_s = 0;  // when it was last determined
  std::string why;             // for the log: what made it unhealthy

  bool operator==(const DeviceHealthReport&) const = default;
};

struct DraPluginOptions {
  std::string driver_name = kDriverName;
  std::string plugin_socket = DraPluginSocket();
  std::string registration_socket = DraRegistrationSocket();
  CdiOptions cdi;
  // The health service (v1alpha1.DRAResourceHealth, on plugin_socket): the
  // node's devices now, looked at every `health_poll`; the complete list is
  // sent when the kubelet connects and again whenever it changes. Null:
  // not served. `pool` names the ResourceSlices' pool (the node).
  std::function<std::vector<DeviceHealthReport>()> health;
  std::chrono::milliseconds health_poll{1000};
  std::string pool;
  // A claim asking for the MPS tier (ClaimInfo::tier): at prepare its group's
  // MPS tenant is acquired and the claim's CDI spec carries its client
  // environment and a mount of its pipe directory; where MPS
  // cannot be had the spec has neither (the group runs shared, the reason
  // logged). Unprepare lets the tenant go. Unset: no MPS client injected.
  MpsAcquire mps_acquire;
  MpsRelease mps_release;
};

// What the plugin answers for one device of a prepared claim.
struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
};

class DraPlugin {
 public:
  using NodeGpus = std::function<std::vector<NodeGpu>()>;

  // REQUIRES: `reader` and `store` outlive the plugin.
  DraPlugin(DraPluginOptions options, ClaimReader& reader, AllocationStore& store,
            NodeGpus node_gpus);
  ~DraPlugin();
  DraPlugin(const DraPlugin&) = delete;
  DraPlugin& operator=(const DraPlugin&) = delete;

  // Writes the CDI specs of the recorded DRA allocations again, then serves
  // both sockets (stale socket files are replaced; directories are made).
  // kUnavailable when a socket cannot be served.
  Status Start();
  // Stops serving and removes the socket files. Idempotent.
  void Stop();

  // The core of NodePrepareResources / NodeUnprepareResources for one claim.
  StatusOr<std::vector<PreparedDevice>> Prepare(const ClaimRef& claim);
  Status Unprepare(const ClaimRef& claim);

  // What the kubelet last said through NotifyRegistrationStatus.
  struct Registration {
    int notifications = 0;
    bool registered = false;
    std::string error;
  };
  Registration registration() const;

  const DraPluginOptions& options() const { return options_; }

 private:
  // Writes `a`'s CDI spec, with its MPS client when it asks for one.
  Status WriteSpec(const Allocation& a, const std::map<std::string, uint32_t>& index);
  class Services;
  std::map<std::string, uint32_t> GpuIndex() const;

  DraPluginOptions options_;
  ClaimReader& reader_;
  AllocationStore& store_;
  NodeGpus node_gpus_;
  Mutex prepare_mu_;  // one prepare or unprepare at a time
  mutable Mutex mu_;
  Registration registration_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;  // ends the health streams
  std::condition_variable_any stop_cv_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gpuslice::daemon::kubelet
