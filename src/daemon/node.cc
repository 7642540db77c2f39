#include "daemon/node.h"

#include <grp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <utility>
#include <vector>

#include "common/log.h"
#include "daemon/api/gpu_routes.h"
#include "daemon/api/tenant_routes.h"
#include "daemon/dashboard/dashboard_routes.h"
#include "daemon/gpu/gpu_json.h"
#include "daemon/gpu/node_gpus.h"
#include "daemon/http/http_util.h"
#include "daemon/kube/pod_settings.h"
#include "daemon/kubelet/device_plugin.h"
#include "daemon/mig/mig_routes.h"
#include "daemon/mps/mps_routes.h"
#include "daemon/node_metrics.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::daemon {
namespace {

// The group controllers' word for one tick: the registry's limits (the
// group's, lowered by its tenants' own) and schedules, from one view.
GroupControllers::Word WordOfRegistry(RegistryView view) {
  auto shared = std::make_shared<const RegistryView>(std::move(view));
  return GroupControllers::Word{
      .limits_of = [shared](const std::string& group, const std::string& uuid)
          -> std::optional<GroupControllers::DeviceLimit> {
        const std::optional<GpuLimit> limit = shared->LimitOf(group, uuid);
        if (!limit) return std::nullopt;
        return GroupControllers::DeviceLimit{.memory_bytes = limit->memory_bytes,
                                             .compute_percent = limit->compute_percent};
      },
      .schedule_of = [shared](const std::string& group,
                              const std::string& uuid) { return shared->ScheduleOn(group, uuid); }};
}

std::optional<gid_t> LookupGroup(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* result = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return std::nullopt;
  }
  return g.gr_gid;
}

StatusOr<ServerOptions> MakeServerOptions(const DaemonConfig& c) {
  ServerOptions o;
  o.socket_path = c.socket;
  GS_ASSIGN_OR_RETURN(o.socket_mode, ParseMode(c.socket_mode));
  if (!c.socket_group.empty()) {
    GS_ASSIGN_OR_RETURN(gid_t gid, ResolveGroup(c.socket_group, LookupGroup));
    o.socket_gid = gid;
  }
  if (!c.admin_group.empty()) {
    GS_ASSIGN_OR_RETURN(gid_t gid, ResolveGroup(c.admin_group, LookupGroup));
    o.auth.admin_gid = gid;
  }
  o.auth.in_group = UserInGroup;
  if (!c.listen_tcp.empty()) {
    GS_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(c.listen_tcp));
    o.tcp_host = hp.host;
    o.tcp_port = hp.port;
    GS_ASSIGN_OR_RETURN(o.tokens, LoadTokens(c.token_file));
  }
  o.max_connections = static_cast<size_t>(c.max_connections);
  o.max_body_bytes = static_cast<size_t>(c.max_body_bytes);
  o.header_timeout = std::chrono::milliseconds(c.header_timeout_ms);
  o.body_timeout = std::chrono::milliseconds(c.body_timeout_ms);
  o.idle_timeout = std::chrono::milliseconds(c.idle_timeout_ms);
  o.sse_keepalive = std::chrono::milliseconds(c.sse_keepalive_ms);
  o.io_threads = static_cast<int>(c.io_threads);
  o.worker_threads = static_cast<int>(c.worker_threads);
  return o;
}

// Whether group `group` holds MPS on GPU `uuid` (an mps group's grant).
bool MpsGranted(const GroupTiers& tiers, const std::string& group, const std::string& uuid) {
  auto grant = tiers.GroupState(group);
  return grant && grant->tier == Tier::kMps &&
         std::find(grant->uuids.begin(), grant->uuids.end(), uuid) != grant->uuids.end();
}

// The backstop's checks as the operator set them (docs/backstop.md).
BackstopMonitor::Options BackstopOptions(const DaemonConfig& config, const GroupTiers& tiers) {
  BackstopMonitor::Options o;
  if (config.memory_backstop != "off") {
    o.memory = MemoryBackstop::Options{.action = config.memory_backstop == "kill"
                                                     ? MemoryBackstop::Action::kKill
                                                     : MemoryBackstop::Action::kReport,
                                       .allowance_per_process_bytes = 2ull << 20};
  }
  if (config.compute_backstop != "off") {
    o.compute = ComputeBackstop::Options{
        .action = config.compute_backstop == "throttle" ? ComputeBackstop::Action::kThrottle
                                                        : ComputeBackstop::Action::kReport,
        .tolerance_points = static_cast<uint32_t>(config.compute_backstop_tolerance),
        .over_for_ns = config.compute_backstop_over_ms * 1'000'000,
        .unregistered_percent =
            static_cast<uint32_t>(config.compute_backstop_unregistered_percent)};
  }
  o.is_ignored = [](uint32_t pid) { return IsMpsServer("/proc", pid); };
  o.is_mps = [&tiers](const std::string& group, const std::string& uuid) {
    return MpsGranted(tiers, group, uuid);
  };
  return o;
}

// The node's GPUs as ResourceSlices describe them; each GPU's facts are read once.
std::function<std::vector<kube::SliceGpu>()> SliceGpusOf(const GpuMonitor& monitor,
                                                         GpuBackend& backend) {
  return [&monitor, &backend, facts = std::map<uint32_t, GpuFacts>()]() mutable {
    std::vector<kube::SliceGpu> gpus;
    for (const GpuInfo& g : monitor.Current()->gpus) {
      if (!facts.contains(g.index)) {  // read once: they do not change
        auto f = backend.Facts(g.index);
        facts[g.index] = f.ok() ? *f : GpuFacts{};
      }
      gpus.push_back({.index = g.index,
                      .uuid = g.uuid,
                      .product = g.name,
                      .memory_bytes = g.memory_total_bytes,
                      .compute_capability = facts[g.index].compute_capability,
                      .driver_version = facts[g.index].driver_version});
    }
    return gpus;
  };
}

LogLevel LevelOf(const std::string& name) {
  if (name == "off") return LogLevel::kOff;
  if (name == "error") return LogLevel::kError;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "trace") return LogLevel::kTrace;
  return LogLevel::kInfo;
}

}  // namespace

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

void PrepareProcess(const DaemonConfig& config) {
  SetLogLevel(LevelOf(config.log_level));
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

StatusOr<NodeOptions> NodeOptionsFrom(const DaemonConfig& config,
                                      const kubelet::KubeletConfig& kubelet) {
  NodeOptions o{.config = config, .kubelet = kubelet, .server = {}, .kube_api = std::nullopt};
  GS_ASSIGN_OR_RETURN(o.server, MakeServerOptions(config));
  if (!config.kube_node.empty()) {
    auto api = kube::KubeConfigFromFlags(config.kube_api, config.kube_ca, config.kube_token_file);
    if (!api.ok()) return Status(api.status().code(), "--kube-api: " + api.status().message());
    o.kube_api = std::move(*api);
  }
  return o;
}

// A pause, resume or schedule change reaches the segments at once, not at
// the scheduler's next period.
class Node::SchedulerWake final : public RegistryObserver {
 public:
  SchedulerWake(GroupControllers& controllers, ControlLoop& loop)
      : controllers_(controllers), loop_(loop) {}
  void OnScheduleChanged(const GroupScheduleChanged& /*event*/) override { Wake(); }
  void OnPauseChanged(const GroupPauseChanged& /*event*/) override { Wake(); }

 private:
  void Wake() {
    controllers_.ScheduleSoon();
    loop_.Wake();
  }
  GroupControllers& controllers_;
  ControlLoop& loop_;
};

// The node segment (docs/daemon.md "Node segment"), written after every sample.
class Node::SegmentPublisher final : public GpuMonitor::Observer {
 public:
  explicit SegmentPublisher(NodeSegmentWriter& writer) : writer_(writer) {}
  void OnSample(const Snapshot& snapshot) override { writer_.Publish(NodeGpusOf(snapshot)); }

 private:
  NodeSegmentWriter& writer_;
};

// The kubelet side's allocations' checkpoints are retried on every sample,
// as the registry's are, and the segment directories their release left swept.
class Node::KubeletTicks final : public GpuMonitor::Observer {
 public:
  explicit KubeletTicks(kubelet::KubeletSide& side) : side_(side) {}
  void OnTick() override {
    (void)side_.RetryCheckpoint();  // a checkpoint a full disk left behind (logged there)
    side_.SweepClaimDirs();
  }

 private:
  kubelet::KubeletSide& side_;
};

StatusOr<std::unique_ptr<Node>> Node::Create(NodeOptions options) {
  GS_ASSIGN_OR_RETURN(std::unique_ptr<NvmlBackend> backend,
                      NvmlBackend::Open(options.config.nvml_library.c_str()));
  // Durable records: a daemon that cannot keep its promises must not make them.
  GS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> state,
                      StateStore::Open(options.config.state_dir));
  return std::unique_ptr<Node>(new Node(std::move(options), std::move(backend), std::move(state)));
}

Node::Node(NodeOptions options, std::unique_ptr<NvmlBackend> backend,
           std::unique_ptr<StateStore> state)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      state_(std::move(state)),
      manager_(*backend_, clock_),
      // Leases survive a crash: saved before each change, reconciled before
      // the API serves (docs/daemon.md, "State"). A revert the GPU refused is
      // retried (docs/errors.md); each try is an event.
      leases_restored_([this] {
        manager_.SetPersistence(LeasePersistence{
            [this](const nlohmann::json& data) { return state_->Save(kLeaseRecordName, data); },
            &wall_clock_, ReadBootId()});
        manager_.SetEventListener(
            [this](std::string_view type, const nlohmann::json& data) { Publish(type, data); });
        manager_.Restore(state_->Load(kLeaseRecordName));
      }),
      monitor_(*backend_, std::chrono::milliseconds(options_.config.poll_interval_ms)),
      // Tenants and groups (docs/api.md "Tenants and groups"): exits by
      // pidfd, the checkpoint re-adopted at start, the driver's per-process
      // usage refreshed after each sample. The event stream gets the JSON
      // form of each of the registry's events.
      registry_({}, clock_, pid_watcher_, state_.get(),
                [this](std::string_view type, const nlohmann::json& data) { Publish(type, data); }),
      tenants_restored_([this] {
        monitor_.SetChangeListener(
            [this](const GpuInfo& gpu) { hub_.Publish("gpu", GpuJson(gpu).dump()); });
        // Requests for "all" GPUs are admitted against every GPU of the node.
        registry_.SetNodeGpus([this] {
          std::vector<std::string> uuids;
          for (const GpuInfo& gpu : monitor_.Current()->gpus) uuids.push_back(gpu.uuid);
          return uuids;
        });
        pid_watcher_.SetExitCallback(
            [this](const std::vector<pid_t>& pids) { registry_.OnExited(pids); });
        if (Status s = pid_watcher_.Start(); !s.ok()) {
          // Everything else still works; registrations are refused (503) saying why.
          GS_LOG(kError, "gpusliced", "event=registry_unavailable error=\"%s\"",
                 s.message().c_str());
        }
        if (Status s = registry_.Restore(); !s.ok()) {
          GS_LOG(kError, "gpusliced", "event=checkpoint_failed error=\"%s\"", s.message().c_str());
        }
      }),
      // Segments of groups idle past the grace period (DESIGN.md section 3).
      shm_dir_(options_.config.shm_dir.empty() ? kDefaultGroupSegmentDir : options_.config.shm_dir),
      collector_(shm_dir_, options_.config.group_gc_grace_s * 1'000'000'000,
                 std::clamp<int64_t>(options_.config.group_gc_grace_s * 250'000'000, 1'000'000'000,
                                     10'000'000'000),
                 clock_),
      // MPS: started per GPU on first demand, kept across daemon restarts
      // (the manager re-adopts its daemons from its state file at start).
      mps_gpus_(*backend_, manager_),
      mps_(mps::MpsOptions{.root = options_.config.mps_root,
                           .control_binary = options_.config.mps_control},
           mps_gpus_, mps_host_, clock_),
      mps_started_([this] {
        manager_.SetChangeListener([this](uint32_t) { monitor_.Poke(); });
        if (Status s = mps_.Start(); !s.ok()) {
          GS_LOG(kError, "gpusliced", "event=mps_unavailable error=\"%s\"", s.message().c_str());
        }
        monitor_.SetMpsProvider([this](const GpuInfo& gpu) -> std::string {
          for (const mps::GpuMpsStatus& g : mps_.GetStatus().gpus) {
            if (g.uuid == gpu.uuid) return g.running ? "on" : "restarting";
          }
          return "off";
        });
        // What each GPU's node offers (DESIGN.md section 5a): the driver's
        // part comes from NVML, the node's here; the MPS protocol from the
        // control binary (MpsManager's probe).
        const bool cgroup_v2 =
            access((options_.config.cgroup_root + "/cgroup.controllers").c_str(), F_OK) == 0;
        monitor_.SetFeaturesProvider([this, cgroup_v2](GpuFeatures& f) {
          f.cgroup_v2 = cgroup_v2;
          const mps::MpsStatus status = mps_.GetStatus();
          f.mps_protocol = status.available ? status.protocol : 0;  // probed from the binary
          f.mps_reason = status.available ? "" : status.reason;
        });
      }),
      mps_health_(mps_, std::chrono::seconds(5)),
      // Isolation tiers (docs/api.md "Tenants and groups"): an mps group
      // holds one MPS tenant, named by the group, while it has members; its
      // last member leaving releases it, a change of its limits changes its
      // settings.
      // a mig group holds one MIG instance while it has members (docs/mig.md).
      mig_(*backend_, state_.get()),
      tiers_(
          registry_, mps_,
          [this](std::string_view type, const nlohmann::json& data) { Publish(type, data); },
          &mig_),
      tiers_started_([this] {
        tiers_.Reconcile();
        tiers_.Start();
        registry_.AddObserver(&tiers_);
      }),
      // The enforcer of each group on each GPU (docs/backstop.md
      // "Enforcers"): every change of who is in a group or of its limits
      // reaches the driver's limits before the call that made it returns.
      enforcers_(Enforcers::Options{.cgroup_root = options_.config.cgroup_root}, *backend_,
                 registry_,
                 Enforcers::Sources{.gpus = [this] { return monitor_.Current(); },
                                    .mps_granted =
                                        [this](const std::string& group, const std::string& uuid) {
                                          return MpsGranted(tiers_, group, uuid);
                                        },
                                    // An mps group's MPS tenant is named by the group.
                                    .mps_partition_sms =
                                        [this](const std::string& group, const std::string& uuid) {
                                          for (const mps::GpuMpsStatus& g : mps_.GetStatus().gpus) {
                                            if (g.uuid != uuid) continue;
                                            auto it = g.sm_partitions.find(group);
                                            return it == g.sm_partitions.end() ? 0u : it->second;
                                          }
                                          return 0u;
                                        },
                                    .mig_profile =
                                        [this](const std::string& group, const std::string& uuid) {
                                          auto g = tiers_.GroupState(group);
                                          return g && g->mig && g->mig->gpu_uuid == uuid
                                                     ? g->mig->instance.profile
                                                     : std::string();
                                        }},
                 state_.get()),
      enforcers_observing_([this] { registry_.AddObserver(&enforcers_); }),
      // The backstop (docs/backstop.md): NVML's per-process memory and
      // utilization against the registry's groups, each monitor tick, with
      // the SIGSTOP/SIGCONT duty cycle on a thread of its own where the
      // operator enabled it. Whatever the modes, what a previous run may have
      // left stopped is continued first.
      backstop_(
          BackstopOptions(options_.config, tiers_), *backend_,
          BackstopMonitor::Actions{
              .killer = TenantKiller(registry_),
              .signaller = signaller_,
              .terminator = [this](const std::string& uuid,
                                   pid_t pid) { return mps_.TerminateClient(uuid, pid); }},
          state_.get(),
          [this](std::string_view type, const nlohmann::json& data) { Publish(type, data); },
          BackstopMonitor::Clocks{clock_, wall_clock_}),
      backstop_started_([this] {
        backstop_.Recover();
        if (options_.config.compute_backstop != "off") backstop_.Start();
        monitor_.SetTickHook([this] { OnTick(); });
      }),
      // Every group's controller (DESIGN.md section 3), on a thread of its
      // own: members yield to the daemon's claim and take over when it goes
      // stale. The GPUs' own busy figure (NVML's device utilization
      // samples); the registry's limits (the group's, lowered by its
      // tenants' own) are the daemon's word; one scheduler per GPU (issue 13).
      device_busy_(*backend_),
      controllers_(
          GroupControllers::Options{
              .shm_dir = shm_dir_, .self = getpid(), .schedule = true},  // one scheduler per GPU
          device_busy_, [this] { return WordOfRegistry(registry_.TakeView()); },
          GroupControllers::Clocks{wall_clock_, clock_}),
      control_loop_([this] { return controllers_.Tick(); }),
      scheduler_wake_(std::make_unique<SchedulerWake>(controllers_, control_loop_)),
      scheduler_wired_([this] { registry_.AddObserver(scheduler_wake_.get()); }),
      routes_added_([this] {
        GpuRoutesOptions route_options;
        route_options.default_lease_s = options_.config.default_lease_s;
        route_options.extra_metrics = [this] { return ExtraMetrics(); };
        AddGpuRoutes(router_, manager_, monitor_, route_options);
        // What the API says of a group's compute: the scheduler's grant and
        // what the group ran (docs/scheduling.md "Evidence"; top, the
        // dashboard and the demo read it there).
        auto share_of = [this](const std::string& g,
                               const std::string& u) -> std::optional<TenantRoutesOptions::Share> {
          const std::optional<int32_t> share = controllers_.ShareOf(g, u);
          const std::optional<uint32_t> grant = controllers_.GrantOf(g, u);
          if (!share && !grant) return std::nullopt;
          return TenantRoutesOptions::Share{.grant_bp = grant, .share_bp = share.value_or(-1)};
        };
        AddTenantRoutes(
            router_, registry_, monitor_, usage_,
            TenantRoutesOptions{.is_admin =
                                    [auth = options_.server.auth](const Caller& c) {
                                      return Authorize(c, Access::kMutate, auth).ok();
                                    },
                                .proc_root = "/proc",
                                .tiers = &tiers_,
                                .share_of = share_of,
                                .enforcer_of =
                                    [this](const std::string& group, const std::string& uuid) {
                                      auto c = enforcers_.ChoiceOf(group, uuid);
                                      return c ? EnforcerChoiceJson(*c) : nlohmann::json(nullptr);
                                    },
                                .ledger_evictions_of =
                                    [this](const std::string& group) {
                                      return controllers_.LedgerEvictionsOf(group);
                                    }});
        mps::RegisterMpsRoutes(router_, mps_);
        AddMigRoutes(router_, mig_);
      }),
      // The web dashboard (docs/dashboard.md): the page at /, and a sample of
      // the node every second on the event stream, the last minutes kept for
      // new pages.
      dashboard_feed_({}, SampleFromRouter(router_), hub_, clock_, wall_clock_),
      dashboard_routes_added_([this] {
        AddDashboardRoutes(router_, dashboard_feed_,
                           [auth = options_.server.auth](const Caller& c) {
                             return Authorize(c, Access::kMutate, auth);
                           });
      }),
      dashboard_loop_([this] { return dashboard_feed_.Tick(); }),
      server_(std::move(options_.server), router_, hub_) {}

Node::~Node() {
  // No exit, request or sample reaches a member from here on: their
  // sources stop (or stopped) before the members go.
  pid_watcher_.Stop();
  if (kubelet_ticks_) monitor_.RemoveObserver(kubelet_ticks_.get());
  if (segment_publisher_) monitor_.RemoveObserver(segment_publisher_.get());
  registry_.RemoveObserver(scheduler_wake_.get());
  registry_.RemoveObserver(&enforcers_);
  registry_.RemoveObserver(&tiers_);
}

void Node::Publish(std::string_view type, const nlohmann::json& data) {
  hub_.Publish(type, data.dump());
}

std::string Node::ExtraMetrics() const {
  return FormatNodeMetrics(NodeMetricsSources{.registry = registry_,
                                              .monitor = monitor_,
                                              .usage = usage_,
                                              .controllers = controllers_,
                                              .backstop = backstop_,
                                              .enforcers = enforcers_,
                                              .tiers = tiers_,
                                              .mps = mps_,
                                              .manager = manager_,
                                              .state = *state_}) +
         mig_.FormatMetrics();
}

void Node::OnTick() {
  manager_.ExpireDue();
  mig_.RetryReleases();  // instances a process still used when their group ended
  const RegistryView registry = registry_.TakeView();  // one reading, for every consumer below
  enforcers_.Reconcile(registry);
  (void)registry_.RetryCheckpoint();  // a checkpoint a full disk left behind (logged there)
  usage_.Refresh(backstop_.Tick(*monitor_.Current(), registry).readings);  // one read of NVML
  SegmentCollector::Sweep sweep = collector_.MaybeSweep();
  for (const std::string& group : sweep.removed) {
    GS_LOG(kInfo, "gpusliced", "event=group_removed group=%s reason=idle", group.c_str());
    Publish("group_removed", nlohmann::json{{"group", group}, {"reason", "idle"}});
  }
  for (const std::string& error : sweep.errors) {
    GS_LOG(kWarn, "gpusliced", "event=group_gc_failed error=\"%s\"", error.c_str());
  }
}

Status Node::Start() {
  monitor_.Start();
  control_loop_.Start();
  dashboard_loop_.Start();
  if (Status s = server_.Start(); !s.ok()) {
    dashboard_loop_.Stop();
    control_loop_.Stop();
    monitor_.Stop();
    return s;
  }
  // The node segment (docs/daemon.md "Node segment"), written after every
  // sample once the daemon owns the socket (a second daemon that cannot
  // start must not replace the running one's segment).
  if (auto w = NodeSegmentWriter::Create(shm_dir_, getpid(), clock_); w.ok()) {
    node_segment_ = std::move(*w);
    node_segment_->Publish(NodeGpusOf(*monitor_.Current()));  // the next sample follows
    segment_publisher_ = std::make_unique<SegmentPublisher>(*node_segment_);
    monitor_.AddObserver(segment_publisher_.get());
  } else {  // readers do without it; everything else works
    GS_LOG(kError, "gpusliced", "event=node_segment_unavailable error=\"%s\"",
           w.status().message().c_str());
  }
  if (Status s = StartKube(); !s.ok()) {
    server_.Stop();
    control_loop_.Stop();
    monitor_.Stop();
    return s;
  }
  GS_LOG(kInfo, "gpusliced", "event=ready socket=%s tcp=%s gpus=%u pid=%d",
         options_.config.socket.c_str(),
         options_.config.listen_tcp.empty() ? "off" : options_.config.listen_tcp.c_str(),
         manager_.DeviceCount(), static_cast<int>(getpid()));
  if (kube_node_ && kubelet_side_ && kubelet_side_->device_plugins() != nullptr) {
    // Pods using the device plugins: their annotations go to their
    // containers' slices (docs/kubernetes.md "Annotations").
    kube_node_->SetDevicePluginPods(
        [plugins = kubelet_side_->device_plugins()](const std::string& pod,
                                                    const std::optional<kube::PodSettings>& s) {
          plugins->SetPodSettings(pod, s ? std::optional(kube::GroupChangeFor(*s)) : std::nullopt);
        });
  }
  if (kube_node_) kube_node_->Start();
  return Status::Ok();
}

Status Node::StartKube() {
  const DaemonConfig& config = options_.config;
  // Kubernetes (docs/kubernetes.md): the node's pods' annotations into the
  // registry, the node's GPUs as ResourceSlices.
  if (options_.kube_api) {
    kube_node_ = std::make_unique<kube::KubeNode>(
        kube::KubeNodeOptions{.node = config.kube_node,
                              .api = *options_.kube_api,
                              .publish_slices = config.kube_resource_slices == "on"},
        registry_,
        [this](std::string_view type, const nlohmann::json& data) { Publish(type, data); },
        SliceGpusOf(monitor_, *backend_));
  }
  // The DRA plugin reads claims from the API server unless --dra-claims-dir
  // names files.
  if (kube_node_ && options_.kubelet.claims_dir.empty()) {
    claim_reader_ = std::make_unique<kubelet::ApiClaimReader>(
        [&client = kube_node_->client()](const std::string& path) { return client.Get(path); });
  }
  if (!options_.kubelet.enabled()) return Status::Ok();
  // The kubelet side (docs/kubelet.md), only when asked: allocations
  // restored, the DRA plugin and device plugins served. A device-plugin
  // slice whose pod asks for tier mps, or a claim whose SliceConfig does,
  // gets the group's MPS tenant: the placement a registration would be
  // checked for, then the grant it gets (docs/kubelet.md "MPS"). Only where
  // MPS runs.
  kubelet::MpsAcquire mps_acquire;
  if (mps_.GetStatus().available) {
    mps_acquire = [this](const std::string& group, const std::vector<std::string>& uuids) {
      if (Status s = tiers_.CheckPlacement(group, Tier::kMps, uuids); !s.ok()) {
        return kubelet::MpsGrant{.tier = Tier::kShared, .reason = s.message(), .env = {}};
      }
      Tenant t;
      t.group = group;
      t.devices = uuids;
      const GroupTiers::Grant g = tiers_.GrantFor(t);
      return kubelet::MpsGrant{.tier = g.tier, .reason = g.reason, .env = g.env};
    };
  }
  GS_ASSIGN_OR_RETURN(
      kubelet_side_,
      kubelet::KubeletSide::Start(
          options_.kubelet,
          kubelet::KubeletSide::Context{
              .registry = registry_,
              .state = state_.get(),
              .node_gpus =
                  [this] {
                    std::vector<kubelet::NodeGpu> gpus;
                    for (const GpuInfo& gpu : monitor_.Current()->gpus) {
                      gpus.push_back(kubelet::NodeGpu{gpu.index, gpu.uuid});
                    }
                    return gpus;
                  },
              .memory = [this](const std::string& uuid) -> uint64_t {
                for (const GpuInfo& gpu : monitor_.Current()->gpus) {
                  if (gpu.uuid == uuid) return gpu.memory_total_bytes;
                }
                return 0;
              },
              .daemon_socket = config.socket,
              .shm_dir = shm_dir_,
              .claim_reader = claim_reader_.get(),
              .health = [this] { return kubelet::GpuHealth(*monitor_.Current(), time(nullptr)); },
              .pool = kubelet::NodeName(config.kube_node),
              .mps_acquire = mps_acquire,
              .mps_release = [this](const std::string& group) { tiers_.ReleaseIfUnused(group); }}));
  kubelet_ticks_ = std::make_unique<KubeletTicks>(*kubelet_side_);
  monitor_.AddObserver(kubelet_ticks_.get());
  return Status::Ok();
}

void Node::Stop() {
  if (kube_node_) kube_node_->Stop();        // no more settings into the registry
  if (kubelet_side_) kubelet_side_->Stop();  // allocations stay recorded
  // In this order: no request, then no sampling or expiry, then the reverts;
  // the executors end before the monitor their callbacks poke is destroyed.
  server_.Stop();
  dashboard_loop_.Stop();
  backstop_.Stop();  // every throttled process continued
  control_loop_.Stop();
  controllers_.Stop();  // members take their groups back at once
  monitor_.Stop();
  if (node_segment_) node_segment_->MarkStopped();  // readers see it stale at once
  // The driver's per-cgroup limits go with the daemon, as its leases do
  // (docs/backstop.md "Enforcers"); what could not be cleared stays recorded.
  if (Status s = enforcers_.ClearAll(); !s.ok()) {
    GS_LOG(kWarn, "gpusliced", "event=driver_limits_left error=\"%s\"", s.message().c_str());
  }
  manager_.RevertAll();
  manager_.Stop();
}

}  // namespace gpuslice::daemon
