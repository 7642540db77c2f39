// The node's well-known paths and the environment variables that override
// them: where the daemon listens, where group segments live, what the daemon
// keeps on disk and where Kubernetes' files are. The daemon, the CLI, the
// limiter and the specs the daemon writes for containers all name them from
// here (docs/daemon.md "Configuration"). Constants only: safe in the
// preloaded library (no dynamic initialisation).
#pragma once

namespace gpuslice {

// The daemon's Unix socket (gpusliced --socket), unless $GPUSLICE_SOCKET names another.
inline constexpr char kEnvDaemonSocket[] = "GPUSLICE_SOCKET";
inline constexpr char kDefaultDaemonSocket[] = "/run/gpuslice/gpusliced.sock";

// The directory of group segments and the node segment (gpusliced --shm-dir),
// unless $GPUSLICE_SHM_DIR names another.
inline constexpr char kEnvShmDir[] = "GPUSLICE_SHM_DIR";
inline constexpr char kDefaultGroupSegmentDir[] = "/dev/shm/gpuslice";

// The daemon's durable records (gpusliced --state-dir).
inline constexpr char kDefaultStateDir[] = "/var/lib/gpuslice";
// MPS pipe and log directories and the MPS state (gpusliced --mps-root).
// Not under the socket's directory, which containers mount whole.
inline constexpr char kDefaultMpsRoot[] = "/run/gpuslice-mps";
// The limiter as installed on the host (gpusliced --limiter-library).
inline constexpr char kDefaultLimiterLibrary[] = "/usr/lib/gpuslice/libgpuslice.so";

// Kubernetes: the kubelet's directory and where CDI specs go (gpusliced
// --kubelet-dir, --cdi-dir).
inline constexpr char kDefaultKubeletDir[] = "/var/lib/kubelet";
inline constexpr char kDefaultCdiDir[] = "/var/run/cdi";

}  // namespace gpuslice
