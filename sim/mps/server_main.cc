// nvidia-cuda-mps-server for the simulated GPU: started by the control daemon
// (never by hand), it owns one context per device it serves
// (GPUSLICE_MPS_SERVER_DEVICES, simulator indices) and is registered as the
// device's MPS server; client contexts are attributed to it in NVML. It
// writes "ready" (or "error: ...") on stdout once, then runs until its stdin
// reaches EOF (the daemon closed it, or died) or SIGTERM.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sim/core/sim_gpu.h"
#include "sim/mps/log_file.h"
#include "sim/mps/protocol.h"

namespace gpuslice::sim::mps {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnStop(int /*signal*/) { g_stop = 1; }

int Fail(LogFile* log, const std::string& message) {
  if (log != nullptr) log->Write("Server", "Server failed to start: " + message);
  printf("error: %s\n", message.c_str());
  fflush(stdout);
  return 1;
}

int Run() {
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  auto log_or = LogFile::Open(LogDirectory() + "/server.log");
  if (!log_or.ok()) return Fail(nullptr, log_or.status().message());
  LogFile& log = **log_or;
  log.Write("Other", "Startup");
  log.Write("Other", "Connecting to control daemon on socket: " + SocketPath(PipeDirectory()));
  log.Write("Other", "Initializing server process");

  auto options = OptionsFromEnv();
  if (!options.ok()) return Fail(&log, options.status().message());
  auto gpu_or = SimGpu::Open(*options);
  if (!gpu_or.ok()) return Fail(&log, gpu_or.status().message());
  SimGpu& gpu = **gpu_or;

  std::vector<int> devices;
  const char* list = getenv("GPUSLICE_MPS_SERVER_DEVICES");
  for (const char* p = list != nullptr ? list : ""; *p != '\0';) {
    char* end = nullptr;
    long d = strtol(p, &end, 10);
    if (end == p || d < 0 || d >= gpu.device_count()) {
      return Fail(&log, std::string("bad GPUSLICE_MPS_SERVER_DEVICES: ") + list);
    }
    devices.push_back(static_cast<int>(d));
    p = *end == ',' ? end + 1 : end;
  }
  if (devices.empty()) return Fail(&log, "no devices to serve");

  std::vector<ContextId> contexts;
  for (int d : devices) {
    log.Write("Server", "Creating server context on device " + std::to_string(d) + " (" +
                            gpu.device(d).name + ")");
    auto ctx = gpu.CreateContext(d, kContextMpsServer);
    if (!ctx.ok()) {
      for (size_t i = 0; i < contexts.size(); ++i) {
        gpu.SetMpsServer(devices[i], false);
        (void)gpu.DestroyContext(contexts[i]);
      }
      return Fail(&log, ctx.status().message());
    }
    contexts.push_back(*ctx);
    gpu.SetMpsServer(d, true);
  }
  log.Write("Server", "CUDA MPS Server for Linux/Unix (simulated)");
  log.Write("Server", "Server has started");
  printf("ready\n");
  fflush(stdout);

  while (g_stop == 0) {
    pollfd p{0, POLLIN, 0};
    int r = poll(&p, 1, 1000);
    if (r > 0) {
      char buf[64];
      if (read(0, buf, sizeof buf) <= 0) break;  // EOF: the daemon let go of us
    }
  }
  for (size_t i = 0; i < contexts.size(); ++i) {
    gpu.SetMpsServer(devices[i], false);
    (void)gpu.DestroyContext(contexts[i]);
  }
  log.Write("Server", "Server exiting");
  return 0;
}

}  // namespace
}  // namespace gpuslice::sim::mps

int main() { return gpuslice::sim::mps::Run(); }
