// The MPS client side of the simulated driver: whether a context a process
// creates goes through an MPS server, and with which limits. A process is an
// MPS client when a control daemon listens in its CUDA_MPS_PIPE_DIRECTORY
// (default /tmp/nvidia-mps); otherwise its contexts are plain ones.
//
// Client environment (fixed at connect): CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=512M"), CUDA_MPS_CLIENT_PRIORITY,
// CUDA_MPS_SM_PARTITION (MPS v3 here: the name of one of its server's static
// SM partitions on the device).
//
// MPS v3 namespace routing: a client whose CUDA_MPS_PIPE_DIRECTORY is
// <root>/<server> or <root>/<server>/<namespace> connects to the control
// socket there, which a v3 daemon of <root> made (a link to its own); the
// client names that route in its request.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sim/core/sim_gpu.h"

namespace gpuslice::sim::mps {

struct ClientEnvironment {
  std::string pipe_dir;
  double thread_percent = 0;                // 0: not set (the server's applies)
  uint64_t pinned_bytes[kMaxDevices] = {};  // 0: not set
  uint32_t priority = 0;
  std::string sm_partition;  // "" for none
};

// Reads the variables above; InvalidArgument naming the variable when one is
// malformed.
StatusOr<ClientEnvironment> ClientEnvironmentFromEnv();

// Connects this process to the daemon for `device`. NotFound: no daemon (use
// a plain context). ResourceExhausted: the device has 48 clients.
// Unavailable: the daemon refused or could not start a server. Otherwise what
// the new context gets.
StatusOr<MpsAttachment> ConnectClient(const ClientEnvironment& env, int device);

}  // namespace gpuslice::sim::mps
