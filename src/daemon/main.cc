// gpusliced: the node daemon (DESIGN.md sections 4-5, docs/daemon.md): the
// command line, then a Node (node.h) until SIGTERM or SIGINT. Runs in the
// foreground (systemd Type=notify, or a container). Exit codes: node.h.
#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

#include "common/log.h"
#include "daemon/config.h"
#include "daemon/kubelet/kubelet_side.h"
#include "daemon/node.h"

namespace gpuslice::daemon {
namespace {

// Parses flags over the config file over the environment over defaults.
// Returns the exit code to use when the daemon must not start.
std::optional<int> Configure(int argc, char** argv, DaemonConfig& config,
                             kubelet::KubeletConfig& kubelet_config) {
  CLI::App app{"gpusliced: the gpuslice node daemon (GPU monitoring and management, HTTP API)",
               "gpusliced"};
  app.set_version_flag("--version", "gpusliced 0.1.0");
  DaemonConfig flags;
  std::string config_file;
  std::vector<std::pair<CLI::Option*, std::function<void()>>> overrides;
  auto bind = [&](const char* name, auto member, const char* help) {
    CLI::Option* o = app.add_option(name, flags.*member, help);
    overrides.emplace_back(o, [&config, &flags, member] { config.*member = flags.*member; });
  };
  app.add_option("--config", config_file, "JSON config file (keys: the flag names with _)");
  bind("--socket", &DaemonConfig::socket,
       "Unix socket of the API (env GPUSLICE_SOCKET; default /run/gpuslice/gpusliced.sock)");
  bind("--socket-mode", &DaemonConfig::socket_mode, "Socket file mode, octal (default 0660)");
  bind("--socket-group", &DaemonConfig::socket_group, "Group owning the socket file");
  bind("--admin-group", &DaemonConfig::admin_group,
       "Group whose members may change settings (besides root)");
  bind("--listen-tcp", &DaemonConfig::listen_tcp, "Also serve HOST:PORT over TCP (off by default)");
  bind("--token-file", &DaemonConfig::token_file,
       "Bearer tokens (one per line) that TCP clients need for mutating calls");
  bind("--log-level", &DaemonConfig::log_level, "off, error, warn, info (default), debug, trace");
  bind("--nvml-library", &DaemonConfig::nvml_library, "NVML to load (default libnvidia-ml.so.1)");
  bind("--mps-root", &DaemonConfig::mps_root,
       "MPS pipe and log directories and state (default /run/gpuslice/mps)");
  bind("--mps-control", &DaemonConfig::mps_control,
       "nvidia-cuda-mps-control to run: a path or a name on PATH");
  bind("--cgroup-root", &DaemonConfig::cgroup_root,
       "The cgroup v2 mount the driver's per-cgroup memory limits name (default /sys/fs/cgroup)");
  bind("--state-dir", &DaemonConfig::state_dir,
       "Durable records: leases, groups, tenants (default /var/lib/gpuslice)");
  bind("--shm-dir", &DaemonConfig::shm_dir,
       "Group segments (default $GPUSLICE_SHM_DIR, else /dev/shm/gpuslice)");
  bind("--group-gc-grace-s", &DaemonConfig::group_gc_grace_s,
       "Idle groups' segments are removed after this many seconds (default 600)");
  bind("--poll-interval-ms", &DaemonConfig::poll_interval_ms, "GPU sampling period (default 500)");
  bind("--default-lease-s", &DaemonConfig::default_lease_s,
       "Lease of a setting when the request names none (default 3600)");
  bind("--max-connections", &DaemonConfig::max_connections, "Open connections cap (default 1024)");
  bind("--max-body-bytes", &DaemonConfig::max_body_bytes, "Request body limit (default 65536)");
  bind("--header-timeout-ms", &DaemonConfig::header_timeout_ms,
       "Deadline for a request header (default 10000)");
  bind("--body-timeout-ms", &DaemonConfig::body_timeout_ms,
       "Deadline for a request body and for each write (default 10000)");
  bind("--idle-timeout-ms", &DaemonConfig::idle_timeout_ms,
       "Keep-alive connections idle longer are closed (default 60000)");
  bind("--sse-keepalive-ms", &DaemonConfig::sse_keepalive_ms,
       "Period of keep-alive comments on event streams (default 15000)");
  bind("--io-threads", &DaemonConfig::io_threads, "HTTP I/O threads (default 1)");
  bind("--worker-threads", &DaemonConfig::worker_threads,
       "Threads for blocking requests (default 4)");
  bind("--memory-backstop", &DaemonConfig::memory_backstop,
       "Groups over their memory limit by NVML's count: off, report (default), kill");
  bind("--compute-backstop", &DaemonConfig::compute_backstop,
       "Unregistered GPU processes and groups over their compute limit by NVML's samples: off, "
       "report (default), throttle (SIGSTOP/SIGCONT duty cycle; MPS clients terminated)");
  bind("--compute-backstop-tolerance", &DaemonConfig::compute_backstop_tolerance,
       "Points above its compute limit a group may be (default 5)");
  bind("--compute-backstop-over-ms", &DaemonConfig::compute_backstop_over_ms,
       "How long a group must be over before it is reported (default 5000)");
  bind("--compute-backstop-unregistered-percent",
       &DaemonConfig::compute_backstop_unregistered_percent,
       "What throttle holds an unregistered process to (default 10)");
  // Kubernetes (docs/kubernetes.md): nothing starts without --kube-node.
  bind("--kube-node", &DaemonConfig::kube_node,
       "Watch this Kubernetes node's pods and publish its GPUs as ResourceSlices (off by default)");
  bind("--kube-api", &DaemonConfig::kube_api,
       "The API server: in-cluster (the pod's service account; default) or an https:// URL");
  bind("--kube-ca", &DaemonConfig::kube_ca, "CA bundle for --kube-api URL (default: system CAs)");
  bind("--kube-token-file", &DaemonConfig::kube_token_file,
       "Bearer token file for --kube-api URL, re-read when it changes");
  bind("--kube-resource-slices", &DaemonConfig::kube_resource_slices,
       "Publish ResourceSlices for DRA: on (default), off");
  // The kubelet's side (docs/kubelet.md): nothing starts
  // without --dra or --device-plugin.
  auto bind_flag = [&](const char* name, bool DaemonConfig::*member, const char* help) {
    CLI::Option* o = app.add_flag(name, flags.*member, help);
    overrides.emplace_back(o, [&config, &flags, member] { config.*member = flags.*member; });
  };
  bind_flag("--dra", &DaemonConfig::dra,
            "Serve the DRA kubelet plugin gpuslice.io (docs/kubernetes.md; off by default)");
  bind_flag("--device-plugin", &DaemonConfig::device_plugin,
            "Serve the device plugins gpuslice.io/vgpu, gpu-memory, gpu-cores (off by default)");
  bind("--kubelet-dir", &DaemonConfig::kubelet_dir,
       "The kubelet's directory: plugins/, plugins_registry/, device-plugins/, pod-resources/ "
       "(default /var/lib/kubelet)");
  bind("--cdi-dir", &DaemonConfig::cdi_dir,
       "Where CDI specs of prepared claims are written (default /var/run/cdi)");
  bind("--dra-claims-dir", &DaemonConfig::dra_claims_dir,
       "Read ResourceClaims from DIR/<namespace>/<name>.json instead of the API server");
  bind("--limiter-library", &DaemonConfig::limiter_library,
       "Host path of libgpuslice.so, mounted into containers "
       "(default /usr/lib/gpuslice/libgpuslice.so)");
  bind("--ld-so-preload", &DaemonConfig::ld_so_preload,
       "Host file mounted as the containers' /etc/ld.so.preload instead of LD_PRELOAD");
  bind("--vgpu-per-gpu", &DaemonConfig::vgpu_per_gpu,
       "gpuslice.io/vgpu devices advertised per GPU (default 10)");
  bind("--gpu-memory-unit-mib", &DaemonConfig::gpu_memory_unit_mib,
       "MiB per gpuslice.io/gpu-memory device (default 1; raise it on GPUs above ~48 GiB: the "
       "kubelet reads at most 4 MiB of device list)");
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
  if (const char* env = getenv("GPUSLICE_SOCKET"); env != nullptr && *env != '\0') {
    config.socket = env;
  }
  if (const char* env = getenv("GPUSLICE_SHM_DIR"); env != nullptr && *env != '\0') {
    config.shm_dir = env;
  }
  for (const auto& [option, apply] : overrides) {
    if (option->count() > 0) apply();
  }
  if (Status s = ValidateConfig(config); !s.ok()) {
    fprintf(stderr, "gpusliced: %s\n", s.message().c_str());
    return kExitUsage;
  }
  kubelet_config.dra = config.dra;
  kubelet_config.device_plugin = config.device_plugin;
  kubelet_config.kubelet_dir = config.kubelet_dir;
  kubelet_config.cdi_dir = config.cdi_dir;
  kubelet_config.claims_dir = config.dra_claims_dir;
  kubelet_config.limiter_library = config.limiter_library;
  kubelet_config.ld_so_preload = config.ld_so_preload;
  kubelet_config.device_plugin_slices = static_cast<uint32_t>(config.vgpu_per_gpu);
  kubelet_config.memory_unit_mib = static_cast<uint32_t>(config.gpu_memory_unit_mib);
  return std::nullopt;
}

int Run(int argc, char** argv) {
  const sigset_t signals = BlockStopSignals();  // before any thread starts
  InitLogging(LogLevel::kInfo);
  DaemonConfig config;
  kubelet::KubeletConfig kubelet_config;
  if (auto code = Configure(argc, argv, config, kubelet_config)) return *code;
  PrepareProcess(config);
  auto options = NodeOptionsFrom(config, kubelet_config);
  if (!options.ok()) {
    fprintf(stderr, "gpusliced: %s\n", options.status().message().c_str());
    return kExitUsage;
  }
  auto node = Node::Create(std::move(*options));
  if (Status s = node.ok() ? (*node)->Start() : node.status(); !s.ok()) {
    GS_LOG(kError, "gpusliced", "event=start_failed error=\"%s\"", s.message().c_str());
    return kExitFailure;
  }
  sd_notify(0, "READY=1");
  int sig = 0;
  while (sigwait(&signals, &sig) != 0 || sig == SIGHUP) {
    if (sig == SIGHUP) GS_LOG(kInfo, "gpusliced", "event=signal signal=SIGHUP action=ignored");
    sig = 0;
  }
  GS_LOG(kInfo, "gpusliced", "event=stopping signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  sd_notify(0, "STOPPING=1");
  (*node)->Stop();
  GS_LOG(kInfo, "gpusliced", "event=stopped");
  return 0;
}

}  // namespace
}  // namespace gpuslice::daemon

int main(int argc, char** argv) try {
  return gpuslice::daemon::Run(argc, argv);
} catch (const std::exception& e) {
  fprintf(stderr, "gpusliced: %s\n", e.what());
  return 1;
}
