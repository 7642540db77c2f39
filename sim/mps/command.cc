#include "sim/mps/command.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

namespace gpuslice::sim::mps {
namespace {

std::vector<std::string_view> Split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

Status Bad(std::string_view what, std::string_view arg) {
  return InvalidArgument("Error: invalid " + std::string(what) + " '" + std::string(arg) + "'");
}

StatusOr<int32_t> Pid(std::string_view s) {
  int32_t pid = 0;
  if (!ParseInt(s, &pid) || pid <= 0) return Bad("PID", s);
  return pid;
}

StatusOr<int> Device(std::string_view s) {
  int dev = 0;
  if (!ParseInt(s, &dev) || dev < 0 || dev > 63) return Bad("device", s);
  return dev;
}

StatusOr<double> Percent(std::string_view s) {
  // from_chars for double is available in libstdc++ >= 11.
  double p = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p);
  if (ec != std::errc() || end != s.data() + s.size() || !(p > 0) || p > 100) {
    return InvalidArgument("Error: invalid active thread percentage '" + std::string(s) +
                           "' (a number in (0, 100])");
  }
  return p;
}

struct Spec {
  std::string_view name;
  CommandKind kind;
  size_t min_args, max_args;
  std::string_view usage;
};

constexpr Spec kSpecs[] = {
    {"get_server_list", CommandKind::kGetServerList, 0, 0, "get_server_list"},
    {"get_server_status", CommandKind::kGetServerStatus, 1, 1, "get_server_status <PID>"},
    {"start_server", CommandKind::kStartServer, 2, 2, "start_server -uid <uid>"},
    {"get_client_list", CommandKind::kGetClientList, 1, 1, "get_client_list <PID>"},
    {"get_device_client_list", CommandKind::kGetDeviceClientList, 0, 1,
     "get_device_client_list [<PID>]"},
    {"set_default_active_thread_percentage", CommandKind::kSetDefaultThreadPercent, 1, 1,
     "set_default_active_thread_percentage <percentage>"},
    {"get_default_active_thread_percentage", CommandKind::kGetDefaultThreadPercent, 0, 0,
     "get_default_active_thread_percentage"},
    {"set_active_thread_percentage", CommandKind::kSetThreadPercent, 2, 2,
     "set_active_thread_percentage <PID> <percentage>"},
    {"get_active_thread_percentage", CommandKind::kGetThreadPercent, 1, 1,
     "get_active_thread_percentage <PID>"},
    {"set_default_device_pinned_mem_limit", CommandKind::kSetDefaultPinnedLimit, 2, 2,
     "set_default_device_pinned_mem_limit <dev> <value>"},
    {"get_default_device_pinned_mem_limit", CommandKind::kGetDefaultPinnedLimit, 1, 1,
     "get_default_device_pinned_mem_limit <dev>"},
    {"set_device_pinned_mem_limit", CommandKind::kSetPinnedLimit, 3, 3,
     "set_device_pinned_mem_limit <PID> <dev> <value>"},
    {"get_device_pinned_mem_limit", CommandKind::kGetPinnedLimit, 2, 2,
     "get_device_pinned_mem_limit <PID> <dev>"},
    {"terminate_client", CommandKind::kTerminateClient, 2, 2,
     "terminate_client <server PID> <client PID>"},
    {"ps", CommandKind::kPs, 0, 2, "ps [-p <PID>]"},
    {"set_default_client_priority", CommandKind::kSetDefaultClientPriority, 1, 1,
     "set_default_client_priority <0|1>"},
    {"get_default_client_priority", CommandKind::kGetDefaultClientPriority, 0, 0,
     "get_default_client_priority"},
    {"quit", CommandKind::kQuit, 0, 0, "quit"},
    {"__client_connect", CommandKind::kClientConnect, 6, 8,
     "__client_connect <pid> <uid> <device> <percent|-> <bytes|-> <priority> [<route|->"
     " [<partition|->]]"},
};

}  // namespace

StatusOr<uint64_t> ParsePinnedLimit(std::string_view text) {
  if (text == "0") return uint64_t{0};
  if (text.size() < 2)
    return InvalidArgument("Error: invalid memory limit '" + std::string(text) +
                           "' (an integer followed by G or M, e.g. 10G or 900M)");
  const char unit = text.back();
  uint64_t n = 0;
  uint64_t scale = 0;
  if (unit == 'G' || unit == 'g') scale = uint64_t{1} << 30;
  if (unit == 'M' || unit == 'm') scale = uint64_t{1} << 20;
  if (scale == 0 || !ParseInt(text.substr(0, text.size() - 1), &n) || n > (uint64_t{1} << 33)) {
    return InvalidArgument("Error: invalid memory limit '" + std::string(text) +
                           "' (an integer followed by G or M, e.g. 10G or 900M)");
  }
  return n * scale;
}

std::string FormatPinnedLimit(uint64_t bytes) {
  if (bytes == 0) return "0";
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "G";
  return std::to_string(bytes >> 20) + "M";
}

std::string FormatPercent(double percent) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f", percent);
  return buf;
}

namespace {

// A server, namespace or partition name, or a route of them ("a/b").
bool IsName(std::string_view s, bool route) {
  if (s.empty() || s.size() > 130) return false;
  int slashes = 0;
  for (char c : s) {
    if (c == '/' && route) {
      ++slashes;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return slashes <= 1 && s.front() != '/' && s.back() != '/';
}

// MPS v3's module-verb commands: MODULE VERB [--key=value | --key value | --flag]...
StatusOr<Command> ParseV3(const std::vector<std::string_view>& words) {
  Command c;
  const std::string verb = std::string(words[0]) + " " + std::string(words[1]);
  std::map<std::string, std::string> options;
  for (size_t i = 2; i < words.size(); ++i) {
    const std::string_view w = words[i];
    if (!w.starts_with("--") || w.size() == 2) return Bad("argument", w);
    const size_t eq = w.find('=');
    std::string key(w.substr(2, eq == std::string_view::npos ? std::string_view::npos : eq - 2));
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(w.substr(eq + 1));
    } else if (key != "all") {
      if (i + 1 >= words.size()) return Bad("option without a value", w);
      value = std::string(words[++i]);
    }
    if (!options.emplace(std::move(key), std::move(value)).second) return Bad("repeated option", w);
  }
  auto allow = [&](std::initializer_list<std::string_view> keys) -> Status {
    for (const auto& [k, v] : options) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        std::string message = "Error: " + verb;
        message += ": unknown option --";
        message += k;
        return InvalidArgument(std::move(message));
      }
    }
    return Status::Ok();
  };
  auto name = [&](const char* key, std::string* out) -> Status {
    auto it = options.find(key);
    if (it == options.end()) return InvalidArgument("Error: " + verb + " needs --" + key);
    if (!IsName(it->second, false)) return Bad(std::string(key) + " name", it->second);
    *out = it->second;
    return Status::Ok();
  };
  if (verb == "server list") {
    c.kind = CommandKind::kV3ServerList;
    GS_RETURN_IF_ERROR(allow({}));
  } else if (verb == "client list") {
    c.kind = CommandKind::kV3ClientList;
    GS_RETURN_IF_ERROR(allow({"all"}));
    if (!options.contains("all")) return InvalidArgument("Error: usage: client list --all");
  } else if (verb == "namespace list" || verb == "sm_partition list") {
    c.kind =
        verb == "namespace list" ? CommandKind::kV3NamespaceList : CommandKind::kV3SmPartitionList;
    GS_RETURN_IF_ERROR(allow({"server"}));
    GS_RETURN_IF_ERROR(name("server", &c.server));
  } else if (verb == "sm_partition info") {
    c.kind = CommandKind::kV3SmPartitionInfo;
    GS_RETURN_IF_ERROR(allow({"server"}));
    GS_RETURN_IF_ERROR(name("server", &c.server));
  } else if (verb == "sm_partition create" || verb == "sm_partition delete") {
    const bool create = verb == "sm_partition create";
    c.kind = create ? CommandKind::kV3SmPartitionCreate : CommandKind::kV3SmPartitionDelete;
    GS_RETURN_IF_ERROR(create ? allow({"server", "device", "name", "chunks"})
                              : allow({"server", "device", "name"}));
    GS_RETURN_IF_ERROR(name("server", &c.server));
    GS_RETURN_IF_ERROR(name("device", &c.device_uuid));
    GS_RETURN_IF_ERROR(name("name", &c.partition));
    if (create) {
      auto it = options.find("chunks");
      if (it == options.end()) return InvalidArgument("Error: " + verb + " needs --chunks");
      const std::string& v = it->second;
      const bool digits =
          !v.empty() && v.size() <= 4 &&
          std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (!digits || std::stoul(v) == 0) return Bad("chunk count", v);
      c.chunks = static_cast<uint32_t>(std::stoul(v));
    }
  } else if (verb == "namespace delete") {
    c.kind = CommandKind::kV3NamespaceDelete;
    GS_RETURN_IF_ERROR(allow({"server", "name"}));
    GS_RETURN_IF_ERROR(name("server", &c.server));
    GS_RETURN_IF_ERROR(name("name", &c.ns));
  } else if (verb == "namespace create" || verb == "namespace set") {
    c.kind =
        verb == "namespace create" ? CommandKind::kV3NamespaceCreate : CommandKind::kV3NamespaceSet;
    GS_RETURN_IF_ERROR(allow(
        {"server", "name", "active-thread-percentage", "pinned-memory-limit", "client-priority"}));
    GS_RETURN_IF_ERROR(name("server", &c.server));
    GS_RETURN_IF_ERROR(name("name", &c.ns));
    if (auto it = options.find("active-thread-percentage"); it != options.end()) {
      GS_ASSIGN_OR_RETURN(c.ns_percent, Percent(it->second));
    }
    if (auto it = options.find("pinned-memory-limit"); it != options.end()) {
      GS_ASSIGN_OR_RETURN(c.ns_bytes, ParsePinnedLimit(it->second));
    }
    if (auto it = options.find("client-priority"); it != options.end()) {
      if (it->second != "0" && it->second != "1") return Bad("client priority", it->second);
      c.ns_priority = it->second == "1" ? 1 : 0;
    }
  } else {
    return InvalidArgument("Error: unsupported MPS v3 command '" + verb + "'");
  }
  return c;
}

}  // namespace

StatusOr<Command> ParseCommand(std::string_view line) {
  std::vector<std::string_view> words = Split(line);
  if (words.empty()) return InvalidArgument("Error: empty command");
  if (words.size() >= 2 && (words[0] == "server" || words[0] == "namespace" ||
                            words[0] == "client" || words[0] == "sm_partition")) {
    return ParseV3(words);
  }
  const Spec* spec = nullptr;
  for (const Spec& s : kSpecs) {
    if (s.name == words[0]) spec = &s;
  }
  if (spec == nullptr) {
    return InvalidArgument("Error: unrecognized command '" + std::string(words[0]) + "'");
  }
  const size_t n = words.size() - 1;
  if (n < spec->min_args || n > spec->max_args) {
    return InvalidArgument("Error: usage: " + std::string(spec->usage));
  }
  Command c;
  c.kind = spec->kind;
  auto arg = [&](size_t i) { return words[i + 1]; };
  switch (c.kind) {
    case CommandKind::kGetServerStatus:
    case CommandKind::kGetClientList:
    case CommandKind::kGetThreadPercent: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      break;
    }
    case CommandKind::kGetDeviceClientList:
      if (n == 1) {
        GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      }
      break;
    case CommandKind::kStartServer:
      if (arg(0) != "-uid" || !ParseInt(arg(1), &c.uid)) {
        return InvalidArgument("Error: usage: " + std::string(spec->usage));
      }
      break;
    case CommandKind::kSetDefaultThreadPercent: {
      GS_ASSIGN_OR_RETURN(c.percent, Percent(arg(0)));
      break;
    }
    case CommandKind::kSetThreadPercent: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      GS_ASSIGN_OR_RETURN(c.percent, Percent(arg(1)));
      break;
    }
    case CommandKind::kSetDefaultPinnedLimit: {
      GS_ASSIGN_OR_RETURN(c.device, Device(arg(0)));
      GS_ASSIGN_OR_RETURN(c.bytes, ParsePinnedLimit(arg(1)));
      break;
    }
    case CommandKind::kGetDefaultPinnedLimit: {
      GS_ASSIGN_OR_RETURN(c.device, Device(arg(0)));
      break;
    }
    case CommandKind::kSetPinnedLimit: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      GS_ASSIGN_OR_RETURN(c.device, Device(arg(1)));
      GS_ASSIGN_OR_RETURN(c.bytes, ParsePinnedLimit(arg(2)));
      break;
    }
    case CommandKind::kGetPinnedLimit: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      GS_ASSIGN_OR_RETURN(c.device, Device(arg(1)));
      break;
    }
    case CommandKind::kTerminateClient: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      GS_ASSIGN_OR_RETURN(c.client_pid, Pid(arg(1)));
      break;
    }
    case CommandKind::kPs:
      if (n == 1 || (n == 2 && arg(0) != "-p")) {
        return InvalidArgument("Error: usage: " + std::string(spec->usage));
      }
      if (n == 2) {
        GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(1)));
      }
      break;
    case CommandKind::kSetDefaultClientPriority:
      if (arg(0) != "0" && arg(0) != "1") return Bad("client priority (0 or 1)", arg(0));
      c.priority = arg(0) == "1" ? 1 : 0;
      break;
    case CommandKind::kClientConnect: {
      GS_ASSIGN_OR_RETURN(c.pid, Pid(arg(0)));
      if (!ParseInt(arg(1), &c.uid)) return Bad("uid", arg(1));
      GS_ASSIGN_OR_RETURN(c.device, Device(arg(2)));
      if (arg(3) != "-") {
        GS_ASSIGN_OR_RETURN(c.percent, Percent(arg(3)));
      }
      if (arg(4) != "-" && !ParseInt(arg(4), &c.bytes)) return Bad("byte count", arg(4));
      if (!ParseInt(arg(5), &c.priority) || c.priority > 1) return Bad("priority", arg(5));
      if (n >= 7 && arg(6) != "-") {
        if (!IsName(arg(6), true)) return Bad("route", arg(6));
        c.route = std::string(arg(6));
      }
      if (n >= 8 && arg(7) != "-") {
        if (!IsName(arg(7), false)) return Bad("SM partition", arg(7));
        c.partition = std::string(arg(7));
      }
      break;
    }
    case CommandKind::kGetServerList:
    case CommandKind::kV3ServerList:
    case CommandKind::kV3NamespaceList:
    case CommandKind::kV3ClientList:
    case CommandKind::kV3SmPartitionList:
    case CommandKind::kV3NamespaceCreate:
    case CommandKind::kV3NamespaceSet:
    case CommandKind::kV3NamespaceDelete:
    case CommandKind::kV3SmPartitionCreate:
    case CommandKind::kV3SmPartitionDelete:
    case CommandKind::kV3SmPartitionInfo:
    case CommandKind::kGetDefaultThreadPercent:
    case CommandKind::kGetDefaultClientPriority:
    case CommandKind::kQuit:
      break;
  }
  return c;
}

}  // namespace gpuslice::sim::mps
