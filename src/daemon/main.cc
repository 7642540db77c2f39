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
