#include "daemon/mps/mps_v3.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "daemon/mps/mps_manager.h"

namespace gpuslice::daemon::mps {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// "4G", "512M": how MPS takes a pinned memory limit. REQUIRES: whole MiB.
std::string Quantity(uint64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "G";
  return std::to_string(bytes / kMiB) + "M";
}

}  // namespace

std::string V3Config(const std::string& uuid,
                     const std::vector<std::pair<std::string, TenantSettings>>& tenants) {
  std::string out = "# Written by gpusliced for the MPS daemon of " + uuid +
                    "\nschema_version = \"1.0\"\n\n[servers." + kV3Server +
                    "]\nallowed_devices = \"" + uuid + "\"\n";
  for (const auto& [name, s] : tenants) {
    // Tenant names are [A-Za-z0-9._-]: a bare key needs quotes for '.'.
    out += "\n[servers." + std::string(kV3Server) + ".namespaces.\"" + name + "\"]\n";
    if (s.active_thread_percentage) {
      out += "active_thread_percentage = \"" + std::to_string(*s.active_thread_percentage) + "\"\n";
    }
    if (s.pinned_memory_limit) {
      out += "pinned_memory_limit = \"" + Quantity(*s.pinned_memory_limit) + "\"\n";
    }
    if (s.client_priority) {
      out += "client_priority = \"" + std::to_string(*s.client_priority) + "\"\n";
    }
  }
  return out;
}

std::string V3NamespaceCommand(std::string_view verb, const std::string& tenant,
                               const TenantSettings* settings) {
  std::string out =
      "namespace " + std::string(verb) + " --server=" + kV3Server + " --name=" + tenant;
  if (settings != nullptr) {
    if (settings->active_thread_percentage) {
      out += " --active-thread-percentage=" + std::to_string(*settings->active_thread_percentage);
    }
    if (settings->pinned_memory_limit) {
      out += " --pinned-memory-limit=" + Quantity(*settings->pinned_memory_limit);
    }
    if (settings->client_priority) {
      out += " --client-priority=" + std::to_string(*settings->client_priority);
    }
  }
  return out;
}

std::string V3SmPartitionCommand(std::string_view verb, const std::string& uuid,
                                 const std::string& tenant, uint32_t chunks) {
  std::string out = "sm_partition " + std::string(verb) + " --server=" + kV3Server +
                    " --device=" + uuid + " --name=" + tenant;
  if (chunks > 0) out += " --chunks=" + std::to_string(chunks);
  return out;
}

std::string V3SmPartitionInfoCommand() {
  return std::string("sm_partition info --server=") + kV3Server;
}

std::string V3SmPartitionListCommand() {
  return std::string("sm_partition list --server=") + kV3Server;
}

std::optional<V3DeviceSms> ParseV3SmPartitionInfo(std::string_view reply, std::string_view uuid) {
  std::istringstream in{std::string(reply)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string device;
    long long sms = -1, per_chunk = -1, free = -1;
    if (!(words >> device >> sms >> per_chunk >> free) || device != uuid) continue;
    if (sms <= 0 || per_chunk <= 0 || free < 0 || sms > 100000 || per_chunk > sms || free > sms) {
      return std::nullopt;
    }
    return V3DeviceSms{static_cast<uint32_t>(sms), static_cast<uint32_t>(per_chunk),
                       static_cast<uint32_t>(free)};
  }
  return std::nullopt;
}

std::optional<uint32_t> ParseV3SmPartitionSms(std::string_view reply, std::string_view uuid,
                                              std::string_view name) {
  std::istringstream in{std::string(reply)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string device, partition;
    long long sms = -1;
    if (!(words >> device >> partition >> sms) || device != uuid || partition != name) continue;
    if (sms <= 0 || sms > 100000) return std::nullopt;
    return static_cast<uint32_t>(sms);
  }
  return std::nullopt;
}

uint32_t V3PartitionChunks(const V3DeviceSms& device, uint32_t percent) {
  const uint64_t sms = uint64_t{device.sms} * percent / 100;
  return std::max<uint32_t>(1, static_cast<uint32_t>(sms / device.sms_per_chunk));
}

std::string V3TenantPipeDir(const std::string& pipe_dir, const std::string& tenant) {
  return pipe_dir + "/" + kV3Server + "/" + tenant;
}

}  // namespace gpuslice::daemon::mps
