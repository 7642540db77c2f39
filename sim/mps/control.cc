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

StatusOr<MpsControl::Server*> MpsControl::EnsureServer(uint32_t uid) {
  std::erase_if(servers_, [](const Server& s) { return s.state == ServerState::kFault; });
  for (Server& s : servers_) {
    if (s.uid == uid) return &s;
    return FailedPrecondition("Error: the MPS server of user " + std::to_string(s.uid) +
                              " (PID " + std::to_string(s.pid) +
                              ") is running; one user's server at a time");
  }
  auto pid = host_->StartServer(uid);
  if (!pid.ok()) {
    host_->Log("Failed to start server for user " + std::to_string(uid) + ": " +
               pid.status().message());
    return Unavailable("Error: cannot start an MPS server: " + pid.status().message());
  }
  host_->Log("Starting new server " + std::to_string(*pid) + " for user " + std::to_string(uid));
  Server s{*pid, uid, ServerState::kActive, default_thread_percent_, default_pinned_, 0, {}};
  servers_.push_back(std::move(s));
  return &servers_.back();
}

Reply MpsControl::ClientConnect(const Command& c) {
  const int ordinal = OrdinalOf(c.device);
  if (ordinal < 0) {
    return Error("ERROR bad_device device " + std::to_string(c.device) +
                 " is not visible to this MPS daemon");
  }
  auto server = EnsureServer(c.uid);
  if (!server.ok()) return Error("ERROR not_ready " + server.status().message());
  Server& s = **server;
  for (const Client& k : s.clients) {
    if (k.pid == c.pid && k.device == c.device) {  // another context of a connected client
      return {"OK " + std::to_string(s.pid) + " " + std::to_string(k.thread_percent) + " " +
                  std::to_string(k.pinned_bytes) + " " + std::to_string(k.priority) + "\n",
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
  const double percent = c.percent > 0 ? c.percent : s.thread_percent;
  k.thread_percent = std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(percent)), 1, 100);
  auto it = s.pinned.find(ordinal);
  k.pinned_bytes = c.bytes > 0 ? c.bytes : (it == s.pinned.end() ? 0 : it->second);
  k.priority = c.priority != 0 ? c.priority : default_priority_;
  s.clients.push_back(k);
  host_->Log("NEW CLIENT " + std::to_string(k.pid) + " from user " + std::to_string(c.uid) +
             " on device " + std::to_string(c.device) + ": server " + std::to_string(s.pid));
  return {"OK " + std::to_string(s.pid) + " " + std::to_string(k.thread_percent) + " " +
              std::to_string(k.pinned_bytes) + " " + std::to_string(k.priority) + "\n",
          false};
}

Reply MpsControl::Execute(const Command& c) {
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
      const auto n = std::erase_if(s->clients, [&](const Client& k) { return k.pid == c.client_pid; });
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
  }
  return Error("Error: unhandled command");
}

}  // namespace gpuslice::sim::mps
