// How nvidia-cuda-mps-control's client mode and the simulated driver reach the
// control daemon: a Unix stream socket "control" in the pipe directory. One
// request per connection: the client writes one command line and shuts down
// its writing side; the daemon writes the reply and closes.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice::sim::mps {

inline constexpr char kDefaultPipeDirectory[] = "/tmp/nvidia-mps";
inline constexpr char kDefaultLogDirectory[] = "/var/log/nvidia-mps";
inline constexpr char kPidFileName[] = "nvidia-cuda-mps-control.pid";

// CUDA_MPS_PIPE_DIRECTORY, or the default.
std::string PipeDirectory();
// CUDA_MPS_LOG_DIRECTORY, or the default.
std::string LogDirectory();
// <pipe_dir>/control
std::string SocketPath(const std::string& pipe_dir);

// Sends `line` to the daemon of `pipe_dir` and returns its reply. NotFound
// when no daemon listens there; Unavailable when it does not answer within
// `timeout_ms`.
StatusOr<std::string> Request(const std::string& pipe_dir, std::string_view line,
                              int timeout_ms = 10'000);

}  // namespace gpuslice::sim::mps
