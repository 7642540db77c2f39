#include "sim/mps/control.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace gpuslice::sim::mps {
namespace {

Reply Error(std::string message) { return {std::move(message) + "\n", false}; }

std::string ServerNotFound(int32_t pid) {
  return "Error: no MPS server with PID " + std::to_string(pid);
}

const char* StateName(int state) {
  switch (state) {
    case 0:
      return "INITIALIZING";
    case 1:
      return "ACTIVE";
    default:
      return "FAULT";
  }
}

}  // namespace

MpsControl::MpsControl(MpsHost* host, std::vector<int> device_indices,
                       std::vector<std::string> device_uuids)
    : host_(host),
      device_indices_(std::move(device_indices)),
      device_uuids_(std::move(device_uuids)) {}

Reply MpsControl::Handle(std::string_view line) {
  auto command = ParseCommand(line);
  if (!command.ok()) return Error(command.status().message());
  Forget();
  return Execute(*command);
}

void MpsControl::Shutdown() {
  for (Server& s : servers_) {
    host_->Log("Stopping server " + std::to_string(s.pid));
    host_->StopServer(s.pid);
  }
  servers_.clear();
}

int MpsControl::OrdinalOf(int device_index) const {
  for (size_t i = 0; i < device_indices_.size(); ++i) {
    if (device_indices_[i] == device_index) return static_cast<int>(i);
  }
  return -1;
}

MpsControl::Server* MpsControl::FindServer(int32_t pid) {
  for (Server& s : servers_) {
    if (s.pid == pid) return &s;
  }
  return nullptr;
}

void MpsControl::Forget() {
  for (Server& s : servers_) {
    if (s.state != ServerState::kFault && !host_->Alive(s.pid)) {
      host_->Log("Server " + std::to_string(s.pid) + " exited unexpectedly");
      s.state = ServerState::kFault;
    }
    std::erase_if(s.clients, [&](const Client& c) {
      if (host_->Alive(c.pid)) return false;
      host_->Log("Client " + std::to_string(c.pid) + " disconnected");
      return true;
    });
  }
}

namespace {

Status OtherUser(uint32_t uid, int32_t pid) {
  return FailedPrecondition("Error: the MPS server of user " + std::to_string(uid) + " (PID " +
                            std::to_string(pid) + ") is running; one user's server at a time");
}

}  // namespace

StatusOr<MpsControl::Server*> MpsControl::EnsureServer(uint32_t uid) {
  std::erase_if(servers_, [](const Server& s) { return s.state == ServerState::kFault; });
  for (Server& s : servers_) {
    if (s.uid != uid) return OtherUser(s.uid, s.pid);
  }
  for (Server& s : servers_) {
    if (s.name.empty()) return &s;
  }
  auto pid = host_->StartServer(uid);
  if (!pid.ok()) {
    host_->Log("Failed to start server for user " + std::to_string(uid) + ": " +
               pid.status().message());
    return Unavailable("Error: cannot start an MPS server: " + pid.status().message());
  }
  host_->Log("Starting new server " + std::to_string(*pid) + " for user " + std::to_string(uid));
  Server s{"", *pid, uid, ServerState::kActive, default_thread_percent_, default_pinned_, 0, {}};
  servers_.push_back(std::move(s));
  return &servers_.back();
}

Status MpsControl::EnableV3(V3Setup setup) {
  auto ordinal_of = [&](const std::string& uuid) {
    for (size_t i = 0; i < device_uuids_.size(); ++i) {
      // CUDA_VISIBLE_DEVICES takes a UUID's first characters too.
      if (device_uuids_[i] == uuid || (uuid.size() >= 8 && device_uuids_[i].starts_with(uuid))) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  if (setup.device_sms.size() != device_uuids_.size()) {
    return InvalidArgument("the SM count of every device is needed");
  }
  if (setup.sms_per_chunk == 0) return InvalidArgument("sms_per_chunk must be positive");
  for (V3Server& server : setup.config.servers) {
    for (std::string& uuid : server.allowed_devices) {
      const int o = ordinal_of(uuid);
      if (o < 0) {
        return InvalidArgument("servers." + server.name + ".allowed_devices: " + uuid +
                               " is not a device of this daemon");
      }
      uuid = device_uuids_[static_cast<size_t>(o)];
    }
    for (V3Device& device : server.devices) {
      const int o = ordinal_of(device.uuid);
      if (o < 0) {
        return InvalidArgument("servers." + server.name + ".devices: " + device.uuid +
                               " is not a device of this daemon");
      }
      device.uuid = device_uuids_[static_cast<size_t>(o)];
      if (!server.allowed_devices.empty() &&
          std::find(server.allowed_devices.begin(), server.allowed_devices.end(), device.uuid) ==
              server.allowed_devices.end()) {
        return InvalidArgument("servers." + server.name + ".devices: " + device.uuid +
                               " is not in its allowed_devices");
      }
      uint64_t sms = 0;
      for (const V3SmPartition& p : device.sm_partitions) {
        sms += uint64_t{p.chunks} * setup.sms_per_chunk;
      }
      if (sms > setup.device_sms[static_cast<size_t>(o)]) {
        return InvalidArgument("servers." + server.name + ".devices." + device.uuid +
                               ": the SM partitions need " + std::to_string(sms) + " SMs of " +
                               std::to_string(setup.device_sms[static_cast<size_t>(o)]));
      }
    }
  }
  v3_ = true;
  v3_setup_ = std::move(setup);
  host_->Log("MPS v3 (protocol 3): " + std::to_string(v3_setup_.config.servers.size()) +
             " configured servers");
  return Status::Ok();
}

V3Server* MpsControl::MutableServer(std::string_view name) {
  for (V3Server& s : v3_setup_.config.servers) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const V3Server* MpsControl::ConfiguredServer(std::string_view name) const {
  for (const V3Server& s : v3_setup_.config.servers) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

StatusOr<MpsControl::Server*> MpsControl::EnsureNamedServer(const V3Server& config,
                                                            uint32_t client_uid) {
  std::erase_if(servers_, [](const Server& s) { return s.state == ServerState::kFault; });
  const uint32_t uid = config.uid.value_or(client_uid);
  for (Server& s : servers_) {
    if (s.uid != uid) return OtherUser(s.uid, s.pid);
  }
  for (Server& s : servers_) {
    if (s.name == config.name) return &s;
  }
  auto pid = host_->StartServer(uid);
  if (!pid.ok()) {
    host_->Log("Failed to start server " + config.name + ": " + pid.status().message());
    return Unavailable("Error: cannot start MPS server " + config.name + ": " +
                       pid.status().message());
  }
  host_->Log("Starting server " + config.name + " (" + std::to_string(*pid) + ") for user " +
             std::to_string(uid));
  Server s{config.name,
           *pid,
           uid,
           ServerState::kActive,
           config.limits.thread_percent.value_or(default_thread_percent_),
           default_pinned_,
           0,
           {}};
  if (config.limits.pinned_bytes) {
    for (size_t i = 0; i < device_uuids_.size(); ++i) {
      s.pinned[static_cast<int>(i)] = *config.limits.pinned_bytes;
    }
  }
  servers_.push_back(std::move(s));
  return &servers_.back();
}

uint32_t MpsControl::PartitionSms(const V3Server& config, int ordinal,
                                  std::string_view partition) const {
  const std::string& uuid = device_uuids_[static_cast<size_t>(ordinal)];
  const uint32_t total = v3_setup_.device_sms[static_cast<size_t>(ordinal)];
  for (const V3Device& d : config.devices) {
    if (d.uuid != uuid) continue;
    uint32_t used = 0;
    for (const V3SmPartition& p : d.sm_partitions) used += p.chunks * v3_setup_.sms_per_chunk;
    for (const V3SmPartition& p : d.sm_partitions) {
      if (p.name != partition) continue;
      return p.chunks * v3_setup_.sms_per_chunk + (p.include_remainder ? total - used : 0);
    }
  }
  return 0;
}

uint32_t MpsControl::FreeChunks(const V3Server& config, int ordinal) const {
  const std::string& uuid = device_uuids_[static_cast<size_t>(ordinal)];
  const uint32_t per_chunk = std::max<uint32_t>(v3_setup_.sms_per_chunk, 1);
  uint32_t used = 0;
  for (const V3Device& d : config.devices) {
    if (d.uuid != uuid) continue;
    for (const V3SmPartition& p : d.sm_partitions) {
      if (p.include_remainder) return 0;
      used += p.chunks * per_chunk;
    }
  }
  const uint32_t total = v3_setup_.device_sms[static_cast<size_t>(ordinal)];
  return used >= total ? 0 : (total - used) / per_chunk;
}

Reply MpsControl::ClientConnect(const Command& c) {
  const int ordinal = OrdinalOf(c.device);
  if (ordinal < 0) {
    return Error("ERROR bad_device device " + std::to_string(c.device) +
                 " is not visible to this MPS daemon");
  }
  // MPS v3: which server and namespace (see the header).
  const V3Server* config = nullptr;
  std::string ns = "default";
  if (v3_) {
    if (!c.route.empty()) {
      const size_t slash = c.route.find('/');
      config = ConfiguredServer(c.route.substr(0, slash));
      if (slash != std::string::npos) ns = c.route.substr(slash + 1);
      if (config == nullptr) {
        return Error("ERROR bad_route no MPS server named " + c.route.substr(0, slash));
      }
      if (ns != "default" && !config->namespaces.contains(ns)) {
        return Error("ERROR bad_route server " + config->name + " has no namespace " + ns);
      }
    } else {
      for (const V3Server& v : v3_setup_.config.servers) {
        if (v.uid == c.uid) {
          config = &v;
          break;
        }
      }
    }
  } else if (!c.route.empty() || !c.partition.empty()) {
    return Error("ERROR bad_route this MPS daemon speaks protocol 2 (no servers by name)");
  }
  if (config == nullptr && !c.partition.empty()) {
    return Error("ERROR bad_partition SM partitions belong to a named server");
  }
  if (config != nullptr && !config->allowed_devices.empty() &&
      std::find(config->allowed_devices.begin(), config->allowed_devices.end(),
                device_uuids_[static_cast<size_t>(ordinal)]) == config->allowed_devices.end()) {
    return Error("ERROR bad_device device " + std::to_string(c.device) +
                 " is not allowed for MPS server " + config->name);
  }
  uint32_t partition_sms = 0;
  if (!c.partition.empty()) {
    partition_sms = PartitionSms(*config, ordinal, c.partition);
    if (partition_sms == 0) {
      return Error("ERROR bad_partition server " + config->name + " has no SM partition " +
                   c.partition + " on device " + std::to_string(c.device));
    }
  }
  auto server = config != nullptr ? EnsureNamedServer(*config, c.uid) : EnsureServer(c.uid);
  if (!server.ok()) return Error("ERROR not_ready " + server.status().message());
  Server& s = **server;
  for (const Client& k : s.clients) {
    if (k.pid == c.pid && k.device == c.device) {  // another context of a connected client
      return {"OK " + std::to_string(s.pid) + " " + std::to_string(k.thread_percent) + " " +
                  std::to_string(k.pinned_bytes) + " " + std::to_string(k.priority) +
                  (k.sm_count > 0 ? " " + std::to_string(k.sm_count) : "") + "\n",
              false};
    }
  }
  const auto on_device = std::count_if(s.clients.begin(), s.clients.end(),
                                       [&](const Client& k) { return k.device == c.device; });
  if (on_device >= 48) {
    return Error("ERROR max_clients device " + std::to_string(c.device) +
                 " already has 48 MPS clients");
  }
  Client k{};
  k.pid = c.pid;
  k.device = c.device;
  k.id = s.next_client_id++;
  double percent = c.percent > 0 ? c.percent : s.thread_percent;
  auto it = s.pinned.find(ordinal);
  k.pinned_bytes = c.bytes > 0 ? c.bytes : (it == s.pinned.end() ? 0 : it->second);
  k.priority = c.priority != 0 ? c.priority : default_priority_;
  k.ns = ns;
  if (config != nullptr) {
    if (config->limits.priority && c.priority == 0) k.priority = *config->limits.priority;
    // The namespace caps what the client asks for.
    if (auto n = config->namespaces.find(ns); n != config->namespaces.end()) {
      const V3Limits& cap = n->second;
      if (cap.thread_percent) percent = std::min(percent, *cap.thread_percent);
      if (cap.pinned_bytes && *cap.pinned_bytes > 0) {
        k.pinned_bytes =
            k.pinned_bytes == 0 ? *cap.pinned_bytes : std::min(k.pinned_bytes, *cap.pinned_bytes);
      }
      if (cap.priority && c.priority == 0) k.priority = *cap.priority;
    }
  }
  k.thread_percent = std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(percent)), 1, 100);
  if (partition_sms > 0) {
    // A static partition's client runs on the partition's SMs: exactly
    // those, fewer only where its thread percentage gives it fewer.
    const uint32_t total = v3_setup_.device_sms[static_cast<size_t>(ordinal)];
    const uint32_t by_percent =
        k.thread_percent >= 100
            ? total
            : std::max<uint32_t>(1,
                                 static_cast<uint32_t>(uint64_t{total} * k.thread_percent / 100));
    k.sm_count = std::min(partition_sms, by_percent);
    k.thread_percent = std::clamp<uint32_t>(
        static_cast<uint32_t>(std::lround(100.0 * k.sm_count / total)), 1, 100);
  }
  s.clients.push_back(k);
  host_->Log("NEW CLIENT " + std::to_string(k.pid) + " from user " + std::to_string(c.uid) +
             " on device " + std::to_string(c.device) + ": server " + std::to_string(s.pid) +
             (s.name.empty() ? "" : " (" + s.name + "/" + k.ns + ")"));
  return {"OK " + std::to_string(s.pid) + " " + std::to_string(k.thread_percent) + " " +
              std::to_string(k.pinned_bytes) + " " + std::to_string(k.priority) +
              (k.sm_count > 0 ? " " + std::to_string(k.sm_count) : "") + "\n",
          false};
}

Reply MpsControl::ExecuteV3(const Command& c) {
  if (!v3_) {
    return Error("Error: this MPS control daemon speaks protocol 2; MPS v3 commands need -p 3");
  }
  std::string out;
  const V3Server* config = nullptr;
  if (!c.server.empty()) {
    config = ConfiguredServer(c.server);
    if (config == nullptr) return Error("Error: no MPS server named " + c.server);
  }
  auto limit = [](const std::optional<uint64_t>& b) {
    return b ? FormatPinnedLimit(*b) : std::string("-");
  };
  auto pct = [](const std::optional<double>& p) { return p ? FormatPercent(*p) : "-"; };
  auto prio = [](const std::optional<uint32_t>& p) { return p ? std::to_string(*p) : "-"; };
  switch (c.kind) {
    case CommandKind::kV3ServerList:
      for (const V3Server& v : v3_setup_.config.servers) {
        std::string pid = "-", state = "STOPPED";
        for (const Server& s : servers_) {
          if (s.name != v.name) continue;
          pid = std::to_string(s.pid);
          state = StateName(static_cast<int>(s.state));
        }
        out += v.name;
        out += ' ';
        out += pid;
        out += ' ';
        out += state;
        out += '\n';
      }
      return {out, false};
    case CommandKind::kV3NamespaceList: {
      const auto d = config->namespaces.find("default");
      const V3Limits own = d == config->namespaces.end() ? config->limits : d->second;
      out += "default " + pct(own.thread_percent) + " " + limit(own.pinned_bytes) + " " +
             prio(own.priority) + "\n";
      for (const auto& [name, l] : config->namespaces) {
        if (name == "default") continue;
        out += name + " " + pct(l.thread_percent) + " " + limit(l.pinned_bytes) + " " +
               prio(l.priority) + "\n";
      }
      return {out, false};
    }
    case CommandKind::kV3SmPartitionList:
      for (const V3Device& d : config->devices) {
        for (size_t i = 0; i < device_uuids_.size(); ++i) {
          if (device_uuids_[i] != d.uuid) continue;
          for (const V3SmPartition& p : d.sm_partitions) {
            out += d.uuid + " " + p.name + " " +
                   std::to_string(PartitionSms(*config, static_cast<int>(i), p.name)) + "\n";
          }
        }
      }
      return {out, false};
    case CommandKind::kV3SmPartitionInfo:
      for (size_t i = 0; i < device_uuids_.size(); ++i) {
        const std::string& uuid = device_uuids_[i];
        if (!config->allowed_devices.empty() &&
            std::find(config->allowed_devices.begin(), config->allowed_devices.end(), uuid) ==
                config->allowed_devices.end()) {
          continue;
        }
        out += uuid + " " + std::to_string(v3_setup_.device_sms[i]) + " " +
               std::to_string(v3_setup_.sms_per_chunk) + " " +
               std::to_string(FreeChunks(*config, static_cast<int>(i))) + "\n";
      }
      return {out, false};
    case CommandKind::kV3SmPartitionCreate:
    case CommandKind::kV3SmPartitionDelete: {
      const auto it = std::find(device_uuids_.begin(), device_uuids_.end(), c.device_uuid);
      if (it == device_uuids_.end()) {
        return Error("Error: " + c.device_uuid + " is not a device of this MPS daemon");
      }
      const int ordinal = static_cast<int>(it - device_uuids_.begin());
      V3Server* server = MutableServer(c.server);
      if (!server->allowed_devices.empty() &&
          std::find(server->allowed_devices.begin(), server->allowed_devices.end(),
                    c.device_uuid) == server->allowed_devices.end()) {
        return Error("Error: " + c.device_uuid + " is not allowed for MPS server " + c.server);
      }
      auto device = std::find_if(server->devices.begin(), server->devices.end(),
                                 [&](const V3Device& d) { return d.uuid == c.device_uuid; });
      auto named = [&](const V3SmPartition& p) { return p.name == c.partition; };
      const bool exists =
          device != server->devices.end() &&
          std::any_of(device->sm_partitions.begin(), device->sm_partitions.end(), named);
      if (c.kind == CommandKind::kV3SmPartitionDelete) {
        if (!exists) {
          return Error("Error: server " + c.server + " has no SM partition " + c.partition +
                       " on " + c.device_uuid);
        }
        std::erase_if(device->sm_partitions, named);
        host_->Log("Deleted SM partition " + c.partition + " of server " + c.server);
        return {"", false};
      }
      if (exists) {
        return Error("Error: SM partition " + c.partition + " of server " + c.server + " on " +
                     c.device_uuid + " exists");
      }
      const uint32_t free = FreeChunks(*server, ordinal);
      if (c.chunks > free) {
        return Error("Error: " + std::to_string(c.chunks) + " chunks asked, " +
                     std::to_string(free) + " free on " + c.device_uuid);
      }
      if (device == server->devices.end()) {
        server->devices.push_back(V3Device{c.device_uuid, {}});
        device = std::prev(server->devices.end());
      }
      device->sm_partitions.push_back(V3SmPartition{c.partition, c.chunks, false});
      host_->Log("Created SM partition " + c.partition + " of server " + c.server + ": " +
                 std::to_string(c.chunks * v3_setup_.sms_per_chunk) + " SMs");
      return {"", false};
    }
    case CommandKind::kV3NamespaceCreate:
    case CommandKind::kV3NamespaceSet: {
      V3Server* server = MutableServer(c.server);
      const bool exists = server->namespaces.contains(c.ns);
      if (c.kind == CommandKind::kV3NamespaceCreate && (exists || c.ns == "default")) {
        return Error("Error: namespace " + c.ns + " of server " + c.server + " exists");
      }
      if (c.kind == CommandKind::kV3NamespaceSet && !exists) {
        return Error("Error: server " + c.server + " has no namespace " + c.ns);
      }
      if (c.kind == CommandKind::kV3NamespaceCreate) {
        if (Status r = host_->AddRoute(c.server, c.ns); !r.ok()) {
          return Error("Error: cannot create namespace " + c.ns + ": " + r.message());
        }
      }
      V3Limits& l = server->namespaces[c.ns];
      if (c.ns_percent) l.thread_percent = c.ns_percent;
      if (c.ns_bytes) l.pinned_bytes = c.ns_bytes;
      if (c.ns_priority) l.priority = c.ns_priority;
      host_->Log(std::string(c.kind == CommandKind::kV3NamespaceCreate ? "Created" : "Changed") +
                 " namespace " + c.ns + " of server " + c.server);
      return {"", false};
    }
    case CommandKind::kV3NamespaceDelete: {
      V3Server* server = MutableServer(c.server);
      if (c.ns == "default" || server->namespaces.erase(c.ns) == 0) {
        return Error("Error: server " + c.server + " has no namespace " + c.ns + " to delete");
      }
      host_->RemoveRoute(c.server, c.ns);
      host_->Log("Deleted namespace " + c.ns + " of server " + c.server);
      return {"", false};
    }
    case CommandKind::kV3ClientList:
      for (const Server& s : servers_) {
        for (const Client& k : s.clients) {
          const int ordinal = OrdinalOf(k.device);
          out += std::to_string(k.pid) + " " + (s.name.empty() ? "-" : s.name) + " " + k.ns + " " +
                 (ordinal < 0 ? "?" : device_uuids_[static_cast<size_t>(ordinal)]) + " " +
                 std::to_string(k.thread_percent) + " " + std::to_string(k.pinned_bytes) + "\n";
        }
      }
      return {out, false};
    default:
      return Error("Error: unhandled command");
  }
}

Reply MpsControl::Execute(const Command& c) {
  if (IsV3(c.kind)) return ExecuteV3(c);
  std::string out;
  switch (c.kind) {
    case CommandKind::kGetServerList:
      for (const Server& s : servers_) out += std::to_string(s.pid) + "\n";
      return {out, false};
    case CommandKind::kGetServerStatus: {
      Server* s = FindServer(c.pid);
      if (s == nullptr) return Error(ServerNotFound(c.pid));
      return {std::string(StateName(static_cast<int>(s->state))) + "\n", false};
    }
    case CommandKind::kStartServer: {
      auto s = EnsureServer(c.uid);
      if (!s.ok()) return Error(s.status().message());
      return {"", false};
    }
    case CommandKind::kGetClientList: {
      Server* s = FindServer(c.pid);
      if (s == nullptr) return Error(ServerNotFound(c.pid));
      for (const Client& k : s->clients) {
        if (std::none_of(s->clients.begin(), s->clients.end(),
                         [&](const Client& o) { return &o < &k && o.pid == k.pid; })) {
          out += std::to_string(k.pid) + "\n";
        }
      }
      return {out, false};
    }
    case CommandKind::kGetDeviceClientList: {
      if (c.pid != 0 && FindServer(c.pid) == nullptr) return Error(ServerNotFound(c.pid));
      for (size_t i = 0; i < device_indices_.size(); ++i) {
        std::string lines;
        for (const Server& s : servers_) {
          if (c.pid != 0 && s.pid != c.pid) continue;
          for (const Client& k : s.clients) {
            if (k.device == device_indices_[i]) lines += "  " + std::to_string(k.pid) + "\n";
          }
        }
        if (!lines.empty()) out += device_uuids_[i] + "\n" + lines;
      }
      return {out, false};
    }
    case CommandKind::kSetDefaultThreadPercent:
      default_thread_percent_ = c.percent;
      host_->Log("Default active thread percentage set to " + FormatPercent(c.percent));
      return {"", false};
    case CommandKind::kGetDefaultThreadPercent:
      return {FormatPercent(default_thread_percent_) + "\n", false};
    case CommandKind::kSetThreadPercent: {
      Server* s = FindServer(c.pid);
      if (s == nullptr) return Error(ServerNotFound(c.pid));
      s->thread_percent = c.percent;
      host_->Log("Active thread percentage of server " + std::to_string(c.pid) + " set to " +
                 FormatPercent(c.percent));
      return {"", false};
    }
    case CommandKind::kGetThreadPercent: {
      Server* s = FindServer(c.pid);
      if (s == nullptr) return Error(ServerNotFound(c.pid));
      return {FormatPercent(s->thread_percent) + "\n", false};
    }
    case CommandKind::kSetDefaultPinnedLimit:
    case CommandKind::kGetDefaultPinnedLimit:
    case CommandKind::kSetPinnedLimit:
    case CommandKind::kGetPinnedLimit: {
      if (c.device >= static_cast<int>(device_indices_.size())) {
        return Error("Error: invalid device " + std::to_string(c.device) + " (this daemon has " +
                     std::to_string(device_indices_.size()) + ")");
      }
      std::map<int, uint64_t>* limits = &default_pinned_;
      if (c.kind == CommandKind::kSetPinnedLimit || c.kind == CommandKind::kGetPinnedLimit) {
        Server* s = FindServer(c.pid);
        if (s == nullptr) return Error(ServerNotFound(c.pid));
        limits = &s->pinned;
      }
      if (c.kind == CommandKind::kSetDefaultPinnedLimit || c.kind == CommandKind::kSetPinnedLimit) {
        (*limits)[c.device] = c.bytes;
        host_->Log("Device pinned memory limit for device " + std::to_string(c.device) +
                   " set to " + FormatPinnedLimit(c.bytes));
        return {"", false};
      }
      auto it = limits->find(c.device);
      return {FormatPinnedLimit(it == limits->end() ? 0 : it->second) + "\n", false};
    }
    case CommandKind::kTerminateClient: {
      Server* s = FindServer(c.pid);
      if (s == nullptr) return Error(ServerNotFound(c.pid));
      const auto n =
          std::erase_if(s->clients, [&](const Client& k) { return k.pid == c.client_pid; });
      if (n == 0) {
        return Error("Error: no client with PID " + std::to_string(c.client_pid) +
                     " on MPS server " + std::to_string(c.pid));
      }
      host_->TerminateClient(c.pid, c.client_pid);
      host_->Log("Terminated client " + std::to_string(c.client_pid) + " of server " +
                 std::to_string(c.pid));
      return {"", false};
    }
    case CommandKind::kPs: {
      char row[256];
      snprintf(row, sizeof row, "%-7s %-5s %-7s %-17s %-12s %s\n", "PID", "ID", "SERVER", "DEVICE",
               "NAMESPACE", "COMMAND");
      out = row;
      for (const Server& s : servers_) {
        for (const Client& k : s.clients) {
          if (c.pid != 0 && k.pid != c.pid) continue;
          const int ordinal = OrdinalOf(k.device);
          const std::string uuid =
              ordinal < 0 ? "?" : device_uuids_[static_cast<size_t>(ordinal)].substr(0, 17);
          snprintf(row, sizeof row, "%-7d %-5u %-7d %-17s %-12llu %s\n", k.pid, k.id, s.pid,
                   uuid.c_str(), static_cast<unsigned long long>(host_->PidNamespace(k.pid)),
                   host_->CommandName(k.pid).c_str());
          out += row;
        }
      }
      return {out, false};
    }
    case CommandKind::kSetDefaultClientPriority:
      default_priority_ = c.priority;
      return {"", false};
    case CommandKind::kGetDefaultClientPriority:
      return {std::to_string(default_priority_) + "\n", false};
    case CommandKind::kQuit:
      host_->Log("Quit requested");
      Shutdown();
      return {"", true};
    case CommandKind::kClientConnect:
      return ClientConnect(c);
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
      return ExecuteV3(c);
  }
  return Error("Error: unhandled command");
}

}  // namespace gpuslice::sim::mps
