// Node: the daemon's composition root (DESIGN.md sections 4-5, docs/daemon.md).
//
// One object owns every part of the running daemon. Its members are built in
// the order they are declared, each from the ones before it, and go in the
// reverse order; a few steps of the start (restores, a registration as an
// observer) sit between two members as Step fields. A part that must tell one
// built after it exposes a typed observer interface the later one registers
// on (TenantRegistry's RegistryObserver, GpuMonitor::Observer); events are
// never routed by name.
//
// Lifecycle: Create (the members; nothing serves yet), Start (sampling, the
// control loops, the API, then Kubernetes and the kubelet's side), Stop (the
// reverse, then the reverts). A Node whose Start failed is destroyed without
// Stop: a second daemon that cannot have the socket leaves the running one's
// settings and driver limits alone.
//
// Thread safety: Create, Start, Stop and the destructor on one thread.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/api/api.h"
#include "daemon/backstop/backstop_monitor.h"
#include "daemon/backstop/signaller.h"
#include "daemon/config.h"
#include "daemon/dashboard/dashboard_feed.h"
#include "daemon/enforce/enforcers.h"
#include "daemon/event_hub.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/gpu/nvml_backend.h"
#include "daemon/groups/backend_busy.h"
#include "daemon/groups/control_loop.h"
#include "daemon/groups/group_controllers.h"
#include "daemon/groups/segment_collector.h"
#include "daemon/http/server.h"
#include "daemon/kube/kube_node.h"
#include "daemon/kubelet/claim_reader.h"
#include "daemon/kubelet/kubelet_side.h"
#include "daemon/mig/mig_manager.h"
#include "daemon/mps/health_checker.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/mps/posix_mps_host.h"
#include "daemon/mps_gpu_control.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/group_tiers.h"
#include "daemon/tenants/pid_watcher.h"
#include "daemon/tenants/registry.h"
#include "shm/node_segment.h"

namespace gpuslice::daemon {

// gpusliced's exit codes besides 0 (a clean shutdown): the node cannot start
// (no NVML, socket in use, ...), or a bad command line or config file.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, and so in every
// thread it starts from then on, and ignores SIGPIPE. Returns the blocked
// set, for the caller to take them with sigwait.
sigset_t BlockStopSignals();
// Sets the process up as `config` says: the log level; the descriptor limit
// raised to its hard limit, so that the connection cap, not the descriptor
// limit, is what bounds clients.
void PrepareProcess(const DaemonConfig& config);

// What the node is built from: the configuration, and what is parsed out of
// it before anything starts.
struct NodeOptions {
  DaemonConfig config;
  kubelet::KubeletConfig kubelet;
  ServerOptions server;
  std::optional<kube::KubeConfig> kube_api;  // set with --kube-node
};
// kInvalidArgument-like errors for what `config` says wrong (a group that
// does not exist, a bad --listen-tcp, an unreadable token file, a bad
// --kube-api: the message names it): the daemon's usage error.
StatusOr<NodeOptions> NodeOptionsFrom(const DaemonConfig& config,
                                      const kubelet::KubeletConfig& kubelet);

class Node {
 public:
  // Opens NVML and the state directory, then builds every member (MPS
  // daemons re-adopted, leases, tenants and driver limits restored).
  // Errors: the node cannot start.
  static StatusOr<std::unique_ptr<Node>> Create(NodeOptions options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Samples, runs the control loops, serves the API, then starts the
  // Kubernetes and kubelet sides. On error what it started is stopped again
  // (the reverts are not made) and the node is only to be destroyed.
  Status Start();
  // REQUIRES: Start succeeded. Stops taking requests and settings, then
  // sampling and control, then clears the driver's limits and reverts every
  // lease.
  void Stop();

 private:
  // A step of the start between two members, made where it is declared.
  struct Step {
    explicit Step(const std::function<void()>& step) { step(); }
  };
  class SchedulerWake;
  class SegmentPublisher;
  class KubeletTicks;

  Node(NodeOptions options, std::unique_ptr<NvmlBackend> backend,
       std::unique_ptr<StateStore> state);
  // Publishes `type` with `data` on the event stream.
  void Publish(std::string_view type, const nlohmann::json& data);
  // Everything /metrics says beyond the GPUs' own families.
  std::string ExtraMetrics() const;
  // Each GPU sample's work on the monitor thread: expiry, reconciles, sweeps.
  void OnTick();
  Status StartKube();

  NodeOptions options_;
  const std::unique_ptr<NvmlBackend> backend_;
  const std::unique_ptr<StateStore> state_;
  MonotonicClock clock_;
  RealtimeClock wall_clock_;
  EventHub hub_;
  GpuManager manager_;
  Step leases_restored_;  // saved before each change, reconciled before the API serves
  GpuMonitor monitor_;
  PidWatcher pid_watcher_;
  TenantRegistry registry_;
  Step tenants_restored_;  // re-adopted from the checkpoint before anyone reads them
  GpuUsageCache usage_;
  const std::string shm_dir_;
  SegmentCollector collector_;
  MpsGpuControl mps_gpus_;
  mps::PosixMpsHost mps_host_;
  mps::MpsManager mps_;
  Step mps_started_;
  mps::MpsHealthChecker mps_health_;
  MigManager mig_;  // `mig` groups' instances, reconciled by tiers_started_
  GroupTiers tiers_;
  Step tiers_started_;  // reconciled with what MPS kept, then a registry observer
  Enforcers enforcers_;
  Step enforcers_observing_;
  PidfdSignaller signaller_;
  BackstopMonitor backstop_;  // memory and compute, on the GPU monitor's ticks
  Step backstop_started_;
  BackendBusy device_busy_;
  GroupControllers controllers_;
  ControlLoop control_loop_;
  const std::unique_ptr<SchedulerWake> scheduler_wake_;
  Step scheduler_wired_;  // the control loop woken by the registry's schedule changes
  ApiRouter router_;
  Step routes_added_;
  DashboardFeed dashboard_feed_;
  Step dashboard_routes_added_;
  ControlLoop dashboard_loop_;
  HttpServer server_;
  // Made by Start, once the daemon owns the socket.
  std::unique_ptr<NodeSegmentWriter> node_segment_;
  std::unique_ptr<SegmentPublisher> segment_publisher_;  // a monitor observer
  std::unique_ptr<kube::KubeNode> kube_node_;
  std::unique_ptr<kubelet::ClaimReader> claim_reader_;
  std::unique_ptr<kubelet::KubeletSide> kubelet_side_;
  std::unique_ptr<KubeletTicks> kubelet_ticks_;  // a monitor observer
};

}  // namespace gpuslice::daemon
