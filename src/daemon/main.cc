// gpusliced: the node daemon (DESIGN.md sections 4-5, docs/daemon.md).
//
// Runs in the foreground (systemd Type=notify, or a container). Exit codes:
// 0 after a clean shutdown (SIGTERM/SIGINT), 1 when it cannot start (no
// NVML, socket in use, ...), 2 for a bad command line or config file.
#include <grp.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/api/gpu_routes.h"
#include "daemon/api/tenant_routes.h"
#include "daemon/backstop/backstop_monitor.h"
#include "daemon/backstop/compute_backstop_monitor.h"
#include "daemon/backstop/signaller.h"
#include "daemon/config.h"
#include "daemon/dashboard/dashboard_feed.h"
#include "daemon/dashboard/dashboard_routes.h"
#include "daemon/enforce/enforcers.h"
#include "daemon/event_hub.h"
#include "daemon/gpu/gpu_json.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_monitor.h"
#include "daemon/gpu/node_gpus.h"
#include "daemon/gpu/nvml_backend.h"
#include "daemon/groups/backend_busy.h"
#include "daemon/groups/control_loop.h"
#include "daemon/groups/group_controllers.h"
#include "daemon/groups/group_metrics.h"
#include "daemon/groups/segment_collector.h"
#include "daemon/http/server.h"
#include "daemon/kube/kube_node.h"
#include "daemon/kubelet/device_plugin.h"
#include "daemon/kubelet/kubelet_side.h"
#include "daemon/mps/health_checker.h"
#include "daemon/mps/mps_manager.h"
#include "daemon/mps/mps_routes.h"
#include "daemon/mps/posix_mps_host.h"
#include "daemon/mps_gpu_control.h"
#include "daemon/state/state_store.h"
#include "daemon/tenants/gpu_usage.h"
#include "daemon/tenants/group_tiers.h"
#include "daemon/tenants/pid_watcher.h"
#include "daemon/tenants/registry.h"
#include "daemon/tenants/tenant_metrics.h"
#include "gpuslice/group_segment.h"

namespace gpuslice::daemon {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::optional<gid_t> LookupGroup(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* result = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return std::nullopt;
  }
  return g.gr_gid;
}

LogLevel LevelOf(const std::string& name) {
  if (name == "off") return LogLevel::kOff;
  if (name == "error") return LogLevel::kError;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "trace") return LogLevel::kTrace;
  return LogLevel::kInfo;
}

// So that the connection cap, not the descriptor limit, is what bounds clients.
void RaiseFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Parses flags over the config file over the environment over defaults.
// Returns the exit code to use when the daemon must not start.
std::optional<int> Configure(int argc, char** argv, DaemonConfig& config,
                             kubelet::KubeletConfig& kubelet_config) {
  CLI::App app{"gpusliced: the gpuslice node daemon (GPU monitoring and management, HTTP API)",
               "gpusliced"};
  app.set_version_flag("--version", "gpusliced 0.1.0");
  std::string config_file;
  app.add_option("--config", config_file, "JSON config file (keys: the flag names with _)");
  const ConfigFlags flags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (!config_file.empty()) {
    if (Status s = ApplyConfigFile(config_file, config); !s.ok()) {
      fprintf(stderr, "gpusliced: %s\n", s.message().c_str());
      return kExitUsage;
    }
  }
  ApplyConfigEnv(getenv, config);
  flags.ApplyGiven(config);
  if (Status s = ValidateConfig(config); !s.ok()) {
    fprintf(stderr, "gpusliced: %s\n", s.message().c_str());
    return kExitUsage;
  }
  kubelet_config = kubelet::KubeletConfigOf(config);
  return std::nullopt;
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

int Run(int argc, char** argv) {
  // Every thread inherits this mask; the main thread takes the signals with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  InitLogging(LogLevel::kInfo);
  DaemonConfig config;
  kubelet::KubeletConfig kubelet_config;
  if (auto code = Configure(argc, argv, config, kubelet_config)) return *code;
  SetLogLevel(LevelOf(config.log_level));
  RaiseFileLimit();

  auto server_options = MakeServerOptions(config);
  if (!server_options.ok()) {
    fprintf(stderr, "gpusliced: %s\n", server_options.status().message().c_str());
    return kExitUsage;
  }
  std::optional<kube::KubeConfig> kube_api;
  if (!config.kube_node.empty()) {
    auto api = kube::KubeConfigFromFlags(config.kube_api, config.kube_ca, config.kube_token_file);
    if (!api.ok()) {
      fprintf(stderr, "gpusliced: --kube-api: %s\n", api.status().message().c_str());
      return kExitUsage;
    }
    kube_api = std::move(*api);
  }
  auto backend = NvmlBackend::Open(config.nvml_library.c_str());
  if (!backend.ok()) {
    GS_LOG(kError, "gpusliced", "event=start_failed error=\"%s\"",
           backend.status().message().c_str());
    return kExitFailure;
  }
  // Durable records: a daemon that cannot keep its promises must not make them.
  auto state = StateStore::Open(config.state_dir);
  if (!state.ok()) {
    GS_LOG(kError, "gpusliced", "event=start_failed error=\"%s\"",
           state.status().message().c_str());
    return kExitFailure;
  }
  MonotonicClock clock;
  RealtimeClock wall_clock;
  EventHub hub;
  GpuManager manager(**backend, clock);
  // Leases survive a crash: saved before each change, reconciled before the
  // API serves (docs/daemon.md, "State").
  manager.SetPersistence(LeasePersistence{
      [&state](const nlohmann::json& data) { return (*state)->Save(kLeaseRecordName, data); },
      &wall_clock, ReadBootId()});
  // A revert the GPU refused is retried (docs/errors.md); each try is an event.
  manager.SetEventListener([&hub](std::string_view type, const nlohmann::json& data) {
    hub.Publish(type, data.dump());
  });
  manager.Restore((*state)->Load(kLeaseRecordName));
  GpuMonitor monitor(**backend, std::chrono::milliseconds(config.poll_interval_ms));
  monitor.SetChangeListener(
      [&hub](const GpuInfo& gpu) { hub.Publish("gpu", GpuJson(gpu).dump()); });
  // Tenants and groups (docs/api.md "Tenants and groups"): exits by pidfd,
  // the checkpoint re-adopted at start, the driver's per-process usage
  // refreshed after each sample.
  PidWatcher pid_watcher;
  // Set once the MPS manager is up: a group's last member leaving releases its
  // MPS tenant, a change of its limits changes the MPS tenant's settings.
  std::atomic<GroupTiers*> tiers_ref{nullptr};
  // Set once the enforcers are up: every change of who is in a group or of
  // its limits reaches the driver's limits before the call that made it
  // returns (a registration's reply follows its driver limit).
  std::atomic<Enforcers*> enforcers_ref{nullptr};
  // Set once the group controllers' loop is up: a pause, resume or schedule
  // change reaches the segments at once, not at the scheduler's next period.
  std::atomic<std::function<void()>*> schedule_soon_ref{nullptr};
  TenantRegistry registry(
      {}, clock, pid_watcher, state->get(),
      [&hub, &tiers_ref, &enforcers_ref, &schedule_soon_ref](std::string_view type,
                                                             const nlohmann::json& data) {
        hub.Publish(type, data.dump());
        if (std::function<void()>* soon = schedule_soon_ref.load();
            soon != nullptr && (type == "group_paused" || type == "group_resumed" ||
                                type == "group_schedule_changed")) {
          (*soon)();
        }
        if (Enforcers* e = enforcers_ref.load();
            e != nullptr && (type == "tenant_registered" || type == "tenant_exited" ||
                             type == "group_limits_changed" || type == "group_schedule_changed" ||
                             type == "group_forgotten")) {
          e->Reconcile();
        }
        GroupTiers* tiers = tiers_ref.load();
        if (tiers == nullptr) return;
        if (type == "tenant_exited") {
          auto group = data.find("group");
          if (group != data.end() && group->is_string()) {
            tiers->TenantLeft(group->get<std::string>());
          }
        } else if (type == "group_limits_changed") {
          auto id = data.find("id");
          if (id != data.end() && id->is_string()) {
            tiers->LimitsChanged(id->get<std::string>());
          }
        } else if (type == "group_schedule_changed") {  // its request: an SM partition
          auto group = data.find("group");
          if (group != data.end() && group->is_string()) {
            tiers->LimitsChanged(group->get<std::string>());
          }
        }
      });
  // Requests for "all" GPUs are admitted against every GPU of the node.
  registry.SetNodeGpus([&monitor] {
    std::vector<std::string> uuids;
    for (const GpuInfo& gpu : monitor.Current()->gpus) uuids.push_back(gpu.uuid);
    return uuids;
  });
  pid_watcher.SetExitCallback(
      [&registry](const std::vector<pid_t>& pids) { registry.OnExited(pids); });
  struct WatcherStop {  // the watcher's thread ends before the registry it calls
    PidWatcher& watcher;
    ~WatcherStop() { watcher.Stop(); }
  } watcher_stop{pid_watcher};
  if (Status s = pid_watcher.Start(); !s.ok()) {
    // Everything else still works; registrations are refused (503) saying why.
    GS_LOG(kError, "gpusliced", "event=registry_unavailable error=\"%s\"", s.message().c_str());
  }
  if (Status s = registry.Restore(); !s.ok()) {
    GS_LOG(kError, "gpusliced", "event=checkpoint_failed error=\"%s\"", s.message().c_str());
  }
  GpuUsageCache usage(**backend);
  // Segments of groups idle past the grace period (DESIGN.md section 3).
  const std::string shm_dir = config.shm_dir.empty() ? kDefaultGroupSegmentDir : config.shm_dir;
  const int64_t grace_ns = config.group_gc_grace_s * 1'000'000'000;
  SegmentCollector collector(
      shm_dir, grace_ns, std::clamp<int64_t>(grace_ns / 4, 1'000'000'000, 10'000'000'000), clock);
  manager.SetChangeListener([&monitor](uint32_t) { monitor.Poke(); });

  // MPS: started per GPU on first demand, kept across daemon restarts (the
  // manager re-adopts its daemons from its state file at start).
  MpsGpuControl mps_gpus(**backend, manager);
  mps::PosixMpsHost mps_host;
  mps::MpsManager mps(
      mps::MpsOptions{.root = config.mps_root, .control_binary = config.mps_control}, mps_gpus,
      mps_host, clock);
  if (Status s = mps.Start(); !s.ok()) {
    GS_LOG(kError, "gpusliced", "event=mps_unavailable error=\"%s\"", s.message().c_str());
  }
  monitor.SetMpsProvider([&mps](const GpuInfo& gpu) -> std::string {
    for (const mps::GpuMpsStatus& g : mps.GetStatus().gpus) {
      if (g.uuid == gpu.uuid) return g.running ? "on" : "restarting";
    }
    return "off";
  });
  mps::MpsHealthChecker mps_health(mps, std::chrono::seconds(5));
  // What each GPU's node offers (DESIGN.md section 5a): the driver's part
  // comes from NVML, the node's here; the MPS protocol from the control
  // binary (MpsManager's probe).
  const bool cgroup_v2 = access((config.cgroup_root + "/cgroup.controllers").c_str(), F_OK) == 0;
  monitor.SetFeaturesProvider([&mps, cgroup_v2](GpuFeatures& f) {
    f.cgroup_v2 = cgroup_v2;
    const mps::MpsStatus status = mps.GetStatus();
    f.mps_protocol = status.available ? status.protocol : 0;  // probed from the binary
    f.mps_reason = status.available ? "" : status.reason;
  });
  // Isolation tiers (docs/api.md "Tenants and groups"): an mps group holds
  // one MPS tenant, named by the group, while it has members.
  GroupTiers tiers(registry, mps, [&hub](std::string_view type, const nlohmann::json& data) {
    hub.Publish(type, data.dump());
  });
  tiers.Reconcile();
  tiers.Start();
  tiers_ref.store(&tiers);
  // The enforcer of each group on each GPU (docs/backstop.md "Enforcers").
  Enforcers enforcers(
      Enforcers::Options{.cgroup_root = config.cgroup_root}, **backend, registry,
      Enforcers::Sources{.gpus = [&monitor] { return monitor.Current(); },
                         .mps_granted =
                             [&tiers](const std::string& group, const std::string& uuid) {
                               auto grant = tiers.GroupState(group);
                               return grant && grant->tier == Tier::kMps &&
                                      std::find(grant->uuids.begin(), grant->uuids.end(), uuid) !=
                                          grant->uuids.end();
                             },
                         // An mps group's MPS tenant is named by the group.
                         .mps_partition_sms =
                             [&mps](const std::string& group, const std::string& uuid) {
                               for (const mps::GpuMpsStatus& g : mps.GetStatus().gpus) {
                                 if (g.uuid != uuid) continue;
                                 auto it = g.sm_partitions.find(group);
                                 return it == g.sm_partitions.end() ? 0u : it->second;
                               }
                               return 0u;
                             }},
      state->get());
  enforcers_ref.store(&enforcers);
  struct EnforcersUnref {  // declared after the enforcers: unset before they go
    std::atomic<Enforcers*>& ref;
    ~EnforcersUnref() { ref.store(nullptr); }
  } enforcers_unref{enforcers_ref};
  struct TiersUnref {  // on every way out: no exit reaches the tiers once they go
    PidWatcher& watcher;
    std::atomic<GroupTiers*>& ref;
    ~TiersUnref() {
      watcher.Stop();
      ref.store(nullptr);
    }
  } tiers_unref{pid_watcher, tiers_ref};

  // The memory backstop (docs/backstop.md): NVML's per-process
  // memory against the registry's groups, each monitor tick.
  std::optional<BackstopMonitor> backstop;
  if (config.memory_backstop != "off") {
    backstop.emplace(
        BackstopMonitor::Options{
            .action = config.memory_backstop == "kill" ? MemoryBackstop::Action::kKill
                                                       : MemoryBackstop::Action::kReport,
            .allowance_per_process_bytes = 2ull << 20,
            .is_ignored = [](uint32_t pid) { return IsMpsServer("/proc", pid); }},
        **backend, registry, TenantKiller(registry),
        [&hub](std::string_view type, const nlohmann::json& data) {
          hub.Publish(type, data.dump());
        });
  }
  // The compute backstop (docs/backstop.md): NVML's per-process
  // utilization against the registry's groups, on a thread of its own, with
  // the SIGSTOP/SIGCONT duty cycle where the operator enabled it. Whatever the
  // mode, what a previous run may have left stopped is continued first.
  PidfdSignaller signaller;
  ComputeBackstopMonitor::Options compute_options;
  compute_options.backstop = {
      .action = config.compute_backstop == "throttle" ? ComputeBackstop::Action::kThrottle
                                                      : ComputeBackstop::Action::kReport,
      .tolerance_points = static_cast<uint32_t>(config.compute_backstop_tolerance),
      .over_for_ns = config.compute_backstop_over_ms * 1'000'000,
      .unregistered_percent = static_cast<uint32_t>(config.compute_backstop_unregistered_percent)};
  compute_options.is_ignored = [](uint32_t pid) { return IsMpsServer("/proc", pid); };
  compute_options.is_mps = [&tiers](const std::string& group, const std::string& uuid) {
    auto grant = tiers.GroupState(group);
    return grant && grant->tier == Tier::kMps &&
           std::find(grant->uuids.begin(), grant->uuids.end(), uuid) != grant->uuids.end();
  };
  ComputeBackstopMonitor compute_backstop(
      std::move(compute_options), **backend, registry, signaller, state->get(),
      [&mps](const std::string& uuid, pid_t pid) { return mps.TerminateClient(uuid, pid); },
      [&hub](std::string_view type, const nlohmann::json& data) { hub.Publish(type, data.dump()); },
      ComputeBackstopMonitor::Clocks{clock, wall_clock});
  compute_backstop.Recover();
  if (config.compute_backstop != "off") compute_backstop.Start();

  // The kubelet side, once started (later): its allocations' checkpoints are
  // retried here too. Set before the API serves, read on the monitor thread.
  std::atomic<kubelet::KubeletSide*> kube_side{nullptr};
  monitor.SetTickHook(
      [&manager, &usage, &monitor, &collector, &hub, &backstop, &enforcers, &registry, &kube_side] {
        manager.ExpireDue();
        enforcers.Reconcile();
        (void)registry.RetryCheckpoint();  // a checkpoint a full disk left behind (logged there)
        if (kubelet::KubeletSide* side = kube_side.load()) {
          (void)side->RetryCheckpoint();  // same
          side->SweepClaimDirs();         // segment directories their release left
        }
        usage.Refresh(*monitor.Current());
        if (backstop) backstop->Tick(*monitor.Current());
        SegmentCollector::Sweep sweep = collector.MaybeSweep();
        for (const std::string& group : sweep.removed) {
          GS_LOG(kInfo, "gpusliced", "event=group_removed group=%s reason=idle", group.c_str());
          hub.Publish("group_removed", nlohmann::json{{"group", group}, {"reason", "idle"}}.dump());
        }
        for (const std::string& error : sweep.errors) {
          GS_LOG(kWarn, "gpusliced", "event=group_gc_failed error=\"%s\"", error.c_str());
        }
      });

  // Every group's controller (DESIGN.md section 3), on a thread of its own:
  // members yield to the daemon's claim and take over when it goes stale.
  RealtimeClock realtime;
  // The GPUs' own busy figure (NVML's device utilization samples); the
  // registry's limits (the group's, lowered by its tenants' own) are the
  // daemon's word.
  BackendBusy device_busy(**backend);
  GroupControllers controllers(
      GroupControllers::Options{.shm_dir = shm_dir, .self = getpid()}, device_busy,
      [&registry](const std::string& group,
                  const std::string& uuid) -> std::optional<GroupControllers::DeviceLimit> {
        auto control = registry.ControlOf(group);
        if (!control) return std::nullopt;
        const GpuLimit limit = control->LimitOn(uuid);
        return GroupControllers::DeviceLimit{.memory_bytes = limit.memory_bytes,
                                             .compute_percent = limit.compute_percent};
      },
      GroupControllers::Clocks{realtime, clock});
  controllers.SetScheduleOf(ScheduleOfRegistry(registry));  // one scheduler per GPU (issue 13)
  // What the API says of a group's compute: the scheduler's grant and what
  // the group ran (docs/scheduling.md "Evidence"; top, the dashboard and the
  // demo read it there).
  auto share_of = [&controllers](
                      const std::string& g,
                      const std::string& u) -> std::optional<TenantRoutesOptions::Share> {
    const std::optional<int32_t> share = controllers.ShareOf(g, u);
    const std::optional<uint32_t> grant = controllers.GrantOf(g, u);
    if (!share && !grant) return std::nullopt;
    return TenantRoutesOptions::Share{.grant_bp = grant, .share_bp = share.value_or(-1)};
  };
  ControlLoop control_loop([&controllers] { return controllers.Tick(); });
  std::function<void()> schedule_soon = [&controllers, &control_loop] {
    controllers.ScheduleSoon();
    control_loop.Wake();
  };
  schedule_soon_ref.store(&schedule_soon);
  struct ScheduleSoonUnref {  // declared after the loop: unset before it goes
    std::atomic<std::function<void()>*>& ref;
    ~ScheduleSoonUnref() { ref.store(nullptr); }
  } schedule_soon_unref{schedule_soon_ref};

  ApiRouter router;
  GpuRoutesOptions route_options;
  route_options.default_lease_s = config.default_lease_s;
  route_options.extra_metrics = [&registry, &usage, &monitor, &controllers, &backstop,
                                 &compute_backstop, &config, &enforcers, &mps, &manager, &state,
                                 &tiers] {
    std::map<std::string, int> gpu_index;
    for (const GpuInfo& gpu : monitor.Current()->gpus)
      gpu_index[gpu.uuid] = static_cast<int>(gpu.index);
    std::string text =
        FormatTenantMetrics(registry, UsageOfEach(*monitor.Current(), *usage.Current()),
                            [&controllers](const std::string& g, const std::string& u) {
                              return controllers.ShareOf(g, u);
                            }) +
        FormatGroupMetrics(controllers.Snapshot(), gpu_index);
    if (backstop) text += backstop->FormatMetrics();
    text += enforcers.FormatMetrics(gpu_index);
    text += tiers.FormatMetrics();
    text +=
        "# HELP gpuslice_mps_state_save_failures_total Writes of the MPS state file that "
        "failed.\n# TYPE gpuslice_mps_state_save_failures_total counter\n"
        "gpuslice_mps_state_save_failures_total " +
        std::to_string(mps.GetStatus().save_failures) + "\n";
    if (config.compute_backstop != "off") text += compute_backstop.FormatMetrics(!backstop);
    text += FormatRevertMetrics(manager.Reverts());
    text += (*state)->FormatMetrics();  // failed saves per record
    return text;
  };
  AddGpuRoutes(router, manager, monitor, route_options);
  AddTenantRoutes(
      router, registry, monitor, usage,
      TenantRoutesOptions{
          .is_admin = [auth = server_options->auth](
                          const Caller& c) { return Authorize(c, Access::kMutate, auth).ok(); },
          .proc_root = "/proc",
          .tiers = &tiers,
          .share_of = share_of,
          .enforcer_of =
              [&enforcers](const std::string& group, const std::string& uuid) {
                auto c = enforcers.ChoiceOf(group, uuid);
                return c ? EnforcerChoiceJson(*c) : nlohmann::json(nullptr);
              }});
  mps::RegisterMpsRoutes(router, mps);
  // The web dashboard (docs/dashboard.md): the page at /, and a sample of the
  // node every second on the event stream, the last minutes kept for new pages.
  DashboardFeed dashboard_feed({}, SampleFromRouter(router), hub, clock, wall_clock);
  AddDashboardRoutes(router, dashboard_feed, [auth = server_options->auth](const Caller& c) {
    return Authorize(c, Access::kMutate, auth);
  });
  ControlLoop dashboard_loop([&dashboard_feed] { return dashboard_feed.Tick(); });

  // The node segment (docs/daemon.md "Node segment"), written after every
  // sample once the daemon owns the socket (a second daemon that cannot start
  // must not replace the running one's segment).
  std::unique_ptr<NodeSegmentWriter> node_segment;
  std::atomic<NodeSegmentWriter*> node_writer{nullptr};
  monitor.SetSampleSink([&node_writer](const Snapshot& s) {
    if (NodeSegmentWriter* w = node_writer.load(std::memory_order_acquire)) {
      w->Publish(NodeGpusOf(s));
    }
  });

  monitor.Start();
  control_loop.Start();
  dashboard_loop.Start();
  HttpServer server(std::move(*server_options), router, hub);
  if (Status s = server.Start(); !s.ok()) {
    GS_LOG(kError, "gpusliced", "event=start_failed error=\"%s\"", s.message().c_str());
    dashboard_loop.Stop();
    control_loop.Stop();
    monitor.Stop();
    return kExitFailure;
  }
  if (auto w = NodeSegmentWriter::Create(shm_dir, getpid(), clock); w.ok()) {
    node_segment = std::move(*w);
    node_segment->Publish(NodeGpusOf(*monitor.Current()));  // the next sample follows
    node_writer.store(node_segment.get(), std::memory_order_release);
  } else {  // readers do without it; everything else works
    GS_LOG(kError, "gpusliced", "event=node_segment_unavailable error=\"%s\"",
           w.status().message().c_str());
  }
  // Kubernetes (docs/kubernetes.md): the node's pods' annotations into the
  // registry, the node's GPUs as ResourceSlices.
  std::unique_ptr<kube::KubeNode> kube_node;
  if (kube_api) {
    kube_node = std::make_unique<kube::KubeNode>(
        kube::KubeNodeOptions{.node = config.kube_node,
                              .api = *kube_api,
                              .publish_slices = config.kube_resource_slices == "on"},
        registry,
        [&hub](std::string_view type, const nlohmann::json& data) {
          hub.Publish(type, data.dump());
        },
        [&monitor, &backend, facts = std::map<uint32_t, GpuFacts>()]() mutable {
          std::vector<kube::SliceGpu> gpus;
          for (const GpuInfo& g : monitor.Current()->gpus) {
            if (!facts.contains(g.index)) {  // read once: they do not change
              auto f = (*backend)->Facts(g.index);
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
        });
  }
  // The DRA plugin reads claims from the API server unless --dra-claims-dir
  // names files.
  std::unique_ptr<kubelet::ClaimReader> claim_reader;
  if (kube_node && kubelet_config.claims_dir.empty()) {
    claim_reader = std::make_unique<kubelet::ApiClaimReader>(
        [&client = kube_node->client()](const std::string& path) { return client.Get(path); });
  }
  // The kubelet side (docs/kubelet.md), only when asked:
  // allocations restored, the DRA plugin and device plugins served.
  std::unique_ptr<kubelet::KubeletSide> kubelet_side;
  // A device-plugin slice whose pod asks for tier mps, or a claim whose
  // SliceConfig does, gets the group's MPS tenant: the placement a
  // registration would be checked for, then the grant it gets
  // (docs/kubelet.md "MPS"). Only where MPS runs.
  kubelet::MpsAcquire mps_acquire;
  if (mps.GetStatus().available) {
    mps_acquire = [&tiers](const std::string& group, const std::vector<std::string>& uuids) {
      if (Status s = tiers.CheckPlacement(group, Tier::kMps, uuids); !s.ok()) {
        return kubelet::MpsGrant{.mps = false, .reason = s.message(), .env = {}};
      }
      Tenant t;
      t.group = group;
      t.devices = uuids;
      const GroupTiers::Grant g = tiers.GrantFor(t);
      return kubelet::MpsGrant{.mps = g.tier == Tier::kMps, .reason = g.reason, .env = g.env};
    };
  }
  if (kubelet_config.enabled()) {
    auto side = kubelet::KubeletSide::Start(
        kubelet_config,
        kubelet::KubeletSide::Context{
            .registry = registry,
            .state = state->get(),
            .node_gpus =
                [&monitor] {
                  std::vector<kubelet::NodeGpu> gpus;
                  for (const GpuInfo& gpu : monitor.Current()->gpus) {
                    gpus.push_back(kubelet::NodeGpu{gpu.index, gpu.uuid});
                  }
                  return gpus;
                },
            .memory = [&monitor](const std::string& uuid) -> uint64_t {
              for (const GpuInfo& gpu : monitor.Current()->gpus) {
                if (gpu.uuid == uuid) return gpu.memory_total_bytes;
              }
              return 0;
            },
            .daemon_socket = config.socket,
            .shm_dir = shm_dir,
            .claim_reader = claim_reader.get(),
            .health = [&monitor] { return kubelet::GpuHealth(*monitor.Current(), time(nullptr)); },
            .pool = kubelet::NodeName(config.kube_node),
            .mps_acquire = mps_acquire,
            .mps_release = [&tiers](const std::string& group) { tiers.ReleaseIfUnused(group); }});
    if (!side.ok()) {
      GS_LOG(kError, "gpusliced", "event=start_failed error=\"%s\"",
             side.status().message().c_str());
      server.Stop();
      control_loop.Stop();
      monitor.Stop();
      return kExitFailure;
    }
    kubelet_side = std::move(*side);
    kube_side.store(kubelet_side.get());
  }
  GS_LOG(kInfo, "gpusliced", "event=ready socket=%s tcp=%s gpus=%u pid=%d", config.socket.c_str(),
         config.listen_tcp.empty() ? "off" : config.listen_tcp.c_str(), manager.DeviceCount(),
         static_cast<int>(getpid()));
  if (kube_node && kubelet_side && kubelet_side->device_plugins() != nullptr) {
    // Pods using the device plugins: their annotations go to their
    // containers' slices (docs/kubernetes.md "Annotations").
    kube_node->SetDevicePluginPods(
        [plugins = kubelet_side->device_plugins()](const std::string& pod,
                                                   const std::optional<kube::PodSettings>& s) {
          plugins->SetPodSettings(pod, s ? std::optional(kube::GroupChangeFor(*s)) : std::nullopt);
        });
  }
  if (kube_node) kube_node->Start();
  sd_notify(0, "READY=1");

  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      GS_LOG(kInfo, "gpusliced", "event=signal signal=SIGHUP action=ignored");
      continue;
    }
    GS_LOG(kInfo, "gpusliced", "event=stopping signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  sd_notify(0, "STOPPING=1");
  if (kube_node) kube_node->Stop();        // no more settings into the registry
  if (kubelet_side) kubelet_side->Stop();  // allocations stay recorded
  // In this order: no request, then no sampling or expiry, then the reverts;
  // the executors end before the monitor their callbacks poke is destroyed.
  server.Stop();
  dashboard_loop.Stop();
  compute_backstop.Stop();  // every throttled process continued
  control_loop.Stop();
  controllers.Stop();  // members take their groups back at once
  monitor.Stop();
  if (node_segment) node_segment->MarkStopped();  // readers see it stale at once
  // The driver's per-cgroup limits go with the daemon, as its leases do
  // (docs/backstop.md "Enforcers"); what could not be cleared stays recorded.
  if (Status s = enforcers.ClearAll(); !s.ok()) {
    GS_LOG(kWarn, "gpusliced", "event=driver_limits_left error=\"%s\"", s.message().c_str());
  }
  manager.RevertAll();
  manager.Stop();
  GS_LOG(kInfo, "gpusliced", "event=stopped");
  return 0;
}

}  // namespace
}  // namespace gpuslice::daemon

int main(int argc, char** argv) {
  try {
    return gpuslice::daemon::Run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "gpusliced: %s\n", e.what());
    return 1;
  }
}
