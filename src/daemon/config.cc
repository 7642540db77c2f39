#include "daemon/config.h"

#include <fstream>
#include <sstream>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

template <typename T>
Status Take(const json& value, const std::string& key, T& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return InvalidArgument("config key \"" + key + "\" must be a string");
    field = value.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return InvalidArgument("config key \"" + key + "\" must be a boolean");
    field = value.get<bool>();
  } else {
    if (!value.is_number_integer()) {
      return InvalidArgument("config key \"" + key + "\" must be an integer");
    }
    field = value.get<T>();
  }
  return Status::Ok();
}

}  // namespace

Status ApplyConfigJson(const json& j, DaemonConfig& c) {
  if (!j.is_object()) return InvalidArgument("the config must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    Status s;
#define GS_CONFIG_KEY(name)       \
  if (key == #name) {             \
    s = Take(value, key, c.name); \
    if (!s.ok()) return s;        \
    continue;                     \
  }
    GS_CONFIG_KEY(socket)
    GS_CONFIG_KEY(socket_mode)
    GS_CONFIG_KEY(socket_group)
    GS_CONFIG_KEY(admin_group)
    GS_CONFIG_KEY(listen_tcp)
    GS_CONFIG_KEY(token_file)
    GS_CONFIG_KEY(log_level)
    GS_CONFIG_KEY(nvml_library)
    GS_CONFIG_KEY(mps_root)
    GS_CONFIG_KEY(mps_control)
    GS_CONFIG_KEY(cgroup_root)
    GS_CONFIG_KEY(state_dir)
    GS_CONFIG_KEY(shm_dir)
    GS_CONFIG_KEY(group_gc_grace_s)
    GS_CONFIG_KEY(poll_interval_ms)
    GS_CONFIG_KEY(default_lease_s)
    GS_CONFIG_KEY(max_connections)
    GS_CONFIG_KEY(max_body_bytes)
    GS_CONFIG_KEY(header_timeout_ms)
    GS_CONFIG_KEY(body_timeout_ms)
    GS_CONFIG_KEY(idle_timeout_ms)
    GS_CONFIG_KEY(sse_keepalive_ms)
    GS_CONFIG_KEY(io_threads)
    GS_CONFIG_KEY(worker_threads)
    GS_CONFIG_KEY(memory_backstop)
    GS_CONFIG_KEY(compute_backstop)
    GS_CONFIG_KEY(compute_backstop_tolerance)
    GS_CONFIG_KEY(compute_backstop_over_ms)
    GS_CONFIG_KEY(compute_backstop_unregistered_percent)
    GS_CONFIG_KEY(kube_node)
    GS_CONFIG_KEY(kube_api)
    GS_CONFIG_KEY(kube_ca)
    GS_CONFIG_KEY(kube_token_file)
    GS_CONFIG_KEY(kube_resource_slices)
    GS_CONFIG_KEY(dra)
    GS_CONFIG_KEY(device_plugin)
    GS_CONFIG_KEY(kubelet_dir)
    GS_CONFIG_KEY(cdi_dir)
    GS_CONFIG_KEY(dra_claims_dir)
    GS_CONFIG_KEY(limiter_library)
    GS_CONFIG_KEY(ld_so_preload)
    GS_CONFIG_KEY(vgpu_per_gpu)
    GS_CONFIG_KEY(gpu_memory_unit_mib)
#undef GS_CONFIG_KEY
    return InvalidArgument("unknown config key \"" + key + "\"");
  }
  return Status::Ok();
}

Status ApplyConfigFile(const std::string& path, DaemonConfig& config) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read the config file " + path);
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("the config file " + path + " is not valid JSON");
  return ApplyConfigJson(j, config).WithContext(path);
}

StatusOr<HostPort> ParseHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return InvalidArgument("\"" + text + "\" is not HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) == 0 || std::stoi(port) > 65535) {
    return InvalidArgument("\"" + text + "\": the port must be 1-65535");
  }
  return HostPort{host, static_cast<uint16_t>(std::stoi(port))};
}

StatusOr<mode_t> ParseMode(const std::string& text) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) {
    return InvalidArgument("socket mode \"" + text + "\" is not an octal mode like 0660");
  }
  return static_cast<mode_t>(std::stoul(text, nullptr, 8));
}

StatusOr<gid_t> ResolveGroup(
    const std::string& text,
    const std::function<std::optional<gid_t>(const std::string&)>& lookup) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
      text.size() < 10) {
    return static_cast<gid_t>(std::stoul(text));
  }
  if (auto gid = lookup(text)) return *gid;
  return InvalidArgument("unknown group \"" + text + "\"");
}

Status ValidateConfig(const DaemonConfig& c) {
  if (c.socket.empty()) return InvalidArgument("--socket must not be empty");
  if (c.state_dir.empty()) return InvalidArgument("--state-dir must not be empty");
  GS_RETURN_IF_ERROR(ParseMode(c.socket_mode).status());
  if (!c.listen_tcp.empty()) {
    GS_RETURN_IF_ERROR(ParseHostPort(c.listen_tcp).status().WithContext("--listen-tcp"));
    if (c.token_file.empty()) {
      return InvalidArgument(
          "--listen-tcp needs --token-file (mutating calls over TCP need a "
          "bearer token)");
    }
  }
  struct Range {
    const char* name;
    int64_t value, min, max;
  };
  for (const Range& r : {Range{"poll_interval_ms", c.poll_interval_ms, 10, 3'600'000},
                         Range{"default_lease_s", c.default_lease_s, 1, 366LL * 24 * 3600},
                         Range{"group_gc_grace_s", c.group_gc_grace_s, 0, 366LL * 24 * 3600},
                         Range{"max_connections", c.max_connections, 1, 1'000'000},
                         Range{"max_body_bytes", c.max_body_bytes, 64, 64 << 20},
                         Range{"header_timeout_ms", c.header_timeout_ms, 10, 3'600'000},
                         Range{"body_timeout_ms", c.body_timeout_ms, 10, 3'600'000},
                         Range{"idle_timeout_ms", c.idle_timeout_ms, 10, 86'400'000},
                         Range{"sse_keepalive_ms", c.sse_keepalive_ms, 10, 3'600'000},
                         Range{"io_threads", c.io_threads, 1, 64},
                         Range{"worker_threads", c.worker_threads, 1, 256}}) {
    if (r.value < r.min || r.value > r.max) {
      return InvalidArgument(std::string(r.name) + " must be in " + std::to_string(r.min) + ".." +
                             std::to_string(r.max) + ", not " + std::to_string(r.value));
    }
  }
  static const char* kLevels[] = {"off", "error", "warn", "info", "debug", "trace"};
  if (std::find(std::begin(kLevels), std::end(kLevels), c.log_level) == std::end(kLevels)) {
    return InvalidArgument("log level \"" + c.log_level +
                           "\" is not one of off, error, warn, info, debug, trace");
  }
  if (c.memory_backstop != "off" && c.memory_backstop != "report" && c.memory_backstop != "kill") {
    return InvalidArgument("memory_backstop \"" + c.memory_backstop +
                           "\" is not one of off, report, kill");
  }
  if (c.compute_backstop != "off" && c.compute_backstop != "report" &&
      c.compute_backstop != "throttle") {
    return InvalidArgument("compute_backstop \"" + c.compute_backstop +
                           "\" is not one of off, report, throttle");
  }
  for (const Range& r :
       {Range{"compute_backstop_tolerance", c.compute_backstop_tolerance, 0, 100},
        Range{"compute_backstop_over_ms", c.compute_backstop_over_ms, 0, 3'600'000},
        Range{"compute_backstop_unregistered_percent", c.compute_backstop_unregistered_percent, 1,
              100},
        Range{"vgpu_per_gpu", c.vgpu_per_gpu, 1, 1000},
        Range{"gpu_memory_unit_mib", c.gpu_memory_unit_mib, 1, 1 << 20}}) {
    if (r.value < r.min || r.value > r.max) {
      return InvalidArgument(std::string(r.name) + " must be in " + std::to_string(r.min) + ".." +
                             std::to_string(r.max) + ", not " + std::to_string(r.value));
    }
  }
  if (c.kube_resource_slices != "on" && c.kube_resource_slices != "off") {
    return InvalidArgument("kube_resource_slices \"" + c.kube_resource_slices +
                           "\" is not one of on, off");
  }
  if (!c.kube_node.empty() && c.kube_api != "in-cluster" && !c.kube_api.starts_with("https://") &&
      !c.kube_api.starts_with("http://")) {
    return InvalidArgument("kube_api \"" + c.kube_api +
                           R"(" is neither "in-cluster" nor an http(s):// URL)");
  }
  return Status::Ok();
}

}  // namespace gpuslice::daemon
