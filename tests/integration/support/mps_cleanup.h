// Test support: stopping the simulated MPS control daemons a test left under
// its own MPS root. A control daemon detaches (setsid, a child of init), so
// SimProcessTest's SIGKILL of gpusliced leaves it running unless gpusliced
// stopped it first; a test calls this in TearDown before removing the root.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::testing {

// SIGTERMs each control daemon whose pid file lies under `root`
// (<root>/<gpu>/pipe/nvidia-cuda-mps-control.pid) and is still that
// program (the pid is checked > 0 and against /proc/<pid>/cmdline, so a
// stale file never signals another process), then waits up to `deadline`
// for each to be gone. Returns how many it signalled.
inline int StopMpsControlDaemonsUnder(
    const std::string& root, std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  int signalled = 0;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator(root, ec)) {
    std::ifstream in(gpu.path() / "pipe" / "nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0) continue;
    std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (args.find("nvidia-cuda-mps-control") == std::string::npos) continue;
    if (kill(pid, SIGTERM) != 0) continue;
    ++signalled;
    // Not our child: gone once kill(pid, 0) fails (init reaps it).
    WaitFor([&] { return kill(pid, 0) != 0; }, deadline);
  }
  return signalled;
}

}  // namespace gpuslice::testing
