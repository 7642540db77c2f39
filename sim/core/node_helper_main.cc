// gpuslice-sim-node: the simulator's node helper (node_helper.h). Tells every
// simulated process that asks its pid as this helper's pid namespace sees it,
// as NVIDIA's kernel module knows every process's host pid. Run it in the
// node's (host's) pid namespace; processes in containers then appear in the
// simulated NVML under their host pids.
//
//   gpuslice-sim-node [--socket PATH]
//
// PATH defaults to GPUSLICE_SIM_NODE_SOCKET, else "<state file>.node" for the
// state file of GPUSLICE_SIM_STATE (or the default state). Prints one line
// "serving PATH" once it answers, then serves until SIGTERM or SIGINT, or
// until its socket file is removed or replaced (checked every second).
// Exit codes: 0 stopped by a signal, 1 cannot serve, 2 bad arguments.
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/core/node_helper.h"
#include "sim/core/process_identity.h"
#include "sim/core/sim_gpu.h"

int main(int argc, char** argv) {
  using namespace gpuslice::sim;  // NOLINT(google-build-using-namespace): a main
  std::string path;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
      path = argv[++i];
    } else {
      fprintf(stderr, "usage: gpuslice-sim-node [--socket PATH]\n");
      return 2;
    }
  }
  if (path.empty()) path = NodeSocketPath(DefaultStatePath());

  // Block the stop signals before any thread starts, then wait for one.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto helper = NodeHelper::Start(path);
  if (!helper.ok()) {
    fprintf(stderr, "gpuslice-sim-node: %s\n", helper.status().message().c_str());
    return 1;
  }
  printf("serving %s\n", path.c_str());
  fflush(stdout);
  // A helper whose socket file is gone (its directory removed, a new helper
  // took the path) can no longer be reached: it ends too.
  const timespec second{1, 0};
  struct stat served {};
  stat(path.c_str(), &served);
  for (;;) {
    if (sigtimedwait(&stop, nullptr, &second) > 0) break;
    struct stat now {};
    if (stat(path.c_str(), &now) != 0 || now.st_ino != served.st_ino) break;
  }
  (*helper)->Stop();
  return 0;
}
