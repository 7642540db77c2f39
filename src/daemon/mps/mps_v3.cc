#include "daemon/mps/mps_v3.h"

#include <cstdint>

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

std::string V3TenantPipeDir(const std::string& pipe_dir, const std::string& tenant) {
  return pipe_dir + "/" + kV3Server + "/" + tenant;
}

}  // namespace gpuslice::daemon::mps
