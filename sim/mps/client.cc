#include "sim/mps/client.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "common/quantity.h"
#include "sim/mps/command.h"
#include "sim/mps/protocol.h"

namespace gpuslice::sim::mps {

StatusOr<ClientEnvironment> ClientEnvironmentFromEnv() {
  ClientEnvironment env;
  env.pipe_dir = PipeDirectory();
  if (const char* p = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); p != nullptr && *p != '\0') {
    auto c = ParseCommand(std::string("set_default_active_thread_percentage ") + p);
    if (!c.ok()) {
      return InvalidArgument("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '" + std::string(p) +
                             "' is not a number in (0, 100]");
    }
    env.thread_percent = c->percent;
  }
  if (const char* p = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); p != nullptr && *p != '\0') {
    std::stringstream items(p);
    std::string item;
    while (std::getline(items, item, ',')) {
      const size_t eq = item.find('=');
      int dev = -1;
      const std::string index = item.substr(0, eq == std::string::npos ? 0 : eq);
      auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), dev);
      auto bytes = eq == std::string::npos ? StatusOr<uint64_t>(InvalidArgument(""))
                                           : ParseBytes(Trim(item.substr(eq + 1)));
      if (ec != std::errc() || end != index.data() + index.size() || dev < 0 ||
          dev >= kMaxDevices || !bytes.ok()) {
        return InvalidArgument("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: bad entry '" + item +
                               "' (expected DEV=LIMIT, e.g. 0=1G,1=512M)");
      }
      env.pinned_bytes[dev] = *bytes;
    }
  }
  if (const char* p = getenv("CUDA_MPS_CLIENT_PRIORITY"); p != nullptr && *p != '\0') {
    const std::string v(p);
    if (v != "0" && v != "1") {
      return InvalidArgument("CUDA_MPS_CLIENT_PRIORITY: '" + v + "' is not 0 or 1");
    }
    env.priority = v == "1" ? 1 : 0;
  }
  if (const char* p = getenv("CUDA_MPS_SM_PARTITION"); p != nullptr && *p != '\0') {
    const std::string v(p);
    const bool ok =
        v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
          return isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
        });
    if (!ok) return InvalidArgument("CUDA_MPS_SM_PARTITION: '" + v + "' is not a partition name");
    env.sm_partition = v;
  }
  return env;
}

namespace {

// The v3 route of `pipe_dir` ("server" or "server/namespace"), or "-": its
// control socket is a link into the root pipe directory of a v3 daemon.
std::string RouteOf(const std::string& pipe_dir) {
  char target[4096];
  const ssize_t n = readlink(SocketPath(pipe_dir).c_str(), target, sizeof target - 1);
  if (n <= 0) return "-";
  target[n] = '\0';
  std::string root(target);
  const size_t slash = root.rfind('/');
  if (slash == std::string::npos) return "-";
  root.resize(slash);
  std::string dir = pipe_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!dir.starts_with(root + "/")) return "-";
  return dir.substr(root.size() + 1);
}

}  // namespace

StatusOr<MpsAttachment> ConnectClient(const ClientEnvironment& env, int device) {
  if (device < 0 || device >= kMaxDevices) return InvalidArgument("bad device");
  std::string request =
      "__client_connect " + std::to_string(getpid()) + " " + std::to_string(getuid()) + " " +
      std::to_string(device) + " " +
      (env.thread_percent > 0 ? FormatPercent(env.thread_percent) : "-") + " " +
      (env.pinned_bytes[device] > 0 ? std::to_string(env.pinned_bytes[device]) : "-") + " " +
      std::to_string(env.priority) + " " + RouteOf(env.pipe_dir) + " " +
      (env.sm_partition.empty() ? "-" : env.sm_partition);
  GS_ASSIGN_OR_RETURN(std::string reply, Request(env.pipe_dir, request));
  std::istringstream in(reply);
  std::string verdict;
  in >> verdict;
  if (verdict == "OK") {
    MpsAttachment a;
    in >> a.server_pid >> a.thread_percent >> a.pinned_limit_bytes >> a.priority;
    if (!in || a.server_pid <= 0) return Unavailable("garbled MPS daemon reply: " + reply);
    uint32_t sms = 0;
    if (in >> sms) a.sm_count = sms;  // in a static SM partition
    return a;
  }
  std::string code;
  in >> code;
  if (code == "max_clients") return ResourceExhausted(reply);
  return Unavailable("MPS daemon refused the client: " + reply);
}

}  // namespace gpuslice::sim::mps
