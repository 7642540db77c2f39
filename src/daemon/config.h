// gpusliced's configuration: defaults, then an optional JSON file
// (--config), then the environment (GPUSLICE_SOCKET, GPUSLICE_SHM_DIR), then flags; a later
// source wins. Parsing and validation are pure functions (unit-tested).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace gpuslice::daemon {

inline constexpr const char* kDefaultSocket = "/run/gpuslice/gpusliced.sock";
inline constexpr const char* kDefaultStateDir = "/var/lib/gpuslice";

struct DaemonConfig {
  std::string socket = kDefaultSocket;
  std::string socket_mode = "0660";  // octal
  std::string socket_group;          // group name or number owning the socket; empty: ours
  std::string admin_group;           // members may change settings; empty: root only
  std::string listen_tcp;            // "HOST:PORT"; empty: no TCP
  std::string token_file;            // bearer tokens for TCP (required with listen_tcp)
  std::string log_level = "info";    // off, error, warn, info, debug, trace
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string mps_root = "/run/gpuslice/mps";           // MPS pipe/log dirs and state
  std::string mps_control = "nvidia-cuda-mps-control";  // a path, or a name on PATH
  std::string cgroup_root = "/sys/fs/cgroup";  // the cgroup v2 mount (driver memory limits)
  std::string state_dir = kDefaultStateDir;    // durable records (leases, tenants)
  std::string shm_dir;             // group segments; empty: $GPUSLICE_SHM_DIR or the default
  int64_t group_gc_grace_s = 600;  // idle groups' segments are removed after this
  int64_t poll_interval_ms = 500;  // GPU sampling period
  int64_t default_lease_s = 3600;
  int64_t max_connections = 1024;
  int64_t max_body_bytes = 65536;
  int64_t header_timeout_ms = 10000;
  int64_t body_timeout_ms = 10000;
  int64_t idle_timeout_ms = 60000;
  int64_t sse_keepalive_ms = 15000;
  int64_t io_threads = 1;
  int64_t worker_threads = 4;
  // The NVML memory backstop (docs/backstop.md): off, report, kill.
  std::string memory_backstop = "report";
  // The NVML compute backstop (docs/backstop.md): off, report, throttle;
  // a group is over when above its compute limit by more than
  // compute_backstop_tolerance points for more than compute_backstop_over_ms;
  // an unregistered process is throttled to compute_backstop_unregistered_percent.
  std::string compute_backstop = "report";
  int64_t compute_backstop_tolerance = 5;
  int64_t compute_backstop_over_ms = 5000;
  int64_t compute_backstop_unregistered_percent = 10;
  // Kubernetes, the API server's side (docs/kubernetes.md): off unless
  // kube_node is set. kube_api: "in-cluster" (the pod's service account) or
  // a URL, with kube_ca and kube_token_file.
  std::string kube_node;
  std::string kube_api = "in-cluster";
  std::string kube_ca;
  std::string kube_token_file;
  std::string kube_resource_slices = "on";  // on, off
  // Kubernetes, the kubelet's side (docs/kubelet.md): off
  // unless dra or device_plugin is set (kubelet::KubeletConfig mirrors these).
  bool dra = false;
  bool device_plugin = false;
  std::string kubelet_dir = "/var/lib/kubelet";
  std::string cdi_dir = "/var/run/cdi";
  std::string dra_claims_dir;  // "": claims come from the API server
  std::string limiter_library = "/usr/lib/gpuslice/libgpuslice.so";
  std::string ld_so_preload;  // "": LD_PRELOAD
  int64_t vgpu_per_gpu = 10;
  int64_t gpu_memory_unit_mib = 1;
};

// Applies the keys of a JSON object (the names of DaemonConfig's fields) to
// `config`. kInvalidArgument naming the key for an unknown key or a wrong type.
Status ApplyConfigJson(const nlohmann::json& json, DaemonConfig& config);
// Reads and applies a config file; errors name the file.
Status ApplyConfigFile(const std::string& path, DaemonConfig& config);
// Ranges and formats (mode is octal, listen_tcp is HOST:PORT, numbers > 0, ...).
Status ValidateConfig(const DaemonConfig& config);

struct HostPort {
  std::string host;
  uint16_t port;
};
StatusOr<HostPort> ParseHostPort(const std::string& text);
StatusOr<mode_t> ParseMode(const std::string& text);
// A group name or number; `lookup` maps names to gids (getgrnam_r in production).
StatusOr<gid_t> ResolveGroup(const std::string& text,
                             const std::function<std::optional<gid_t>(const std::string&)>& lookup);

}  // namespace gpuslice::daemon
