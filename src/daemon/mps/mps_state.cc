#include "daemon/mps/mps_state.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace gpuslice::daemon::mps {
namespace {

using json = nlohmann::json;

json SettingsToJson(const TenantSettings& s) {
  json j = json::object();
  if (s.active_thread_percentage) j["active_thread_percentage"] = *s.active_thread_percentage;
  if (s.pinned_memory_limit) j["pinned_memory_limit"] = *s.pinned_memory_limit;
  if (s.client_priority) j["client_priority"] = *s.client_priority;
  if (s.sm_partition_percent) j["sm_partition_percent"] = *s.sm_partition_percent;
  return j;
}

TenantSettings SettingsFromJson(const json& j) {
  TenantSettings s;
  if (j.contains("active_thread_percentage")) {
    s.active_thread_percentage = j.at("active_thread_percentage").get<uint32_t>();
  }
  if (j.contains("pinned_memory_limit")) {
    s.pinned_memory_limit = j.at("pinned_memory_limit").get<uint64_t>();
  }
  if (j.contains("client_priority")) s.client_priority = j.at("client_priority").get<int>();
  if (j.contains("sm_partition_percent")) {
    s.sm_partition_percent = j.at("sm_partition_percent").get<uint32_t>();
  }
  return s;
}

}  // namespace

StatusOr<MpsState> MpsState::Parse(std::string_view text) {
  MpsState out;
  try {
    const json state = json::parse(text);
    if (state.at("version").get<int>() != kVersion) {
      return InvalidArgument("unknown version " + state.at("version").dump());
    }
    for (const json& t : state.at("tenants")) {
      TenantRecord tenant;
      tenant.name = t.at("name").get<std::string>();
      tenant.tier = t.at("tier").get<std::string>() == "mps" ? Tier::kMps : Tier::kShared;
      tenant.reason = t.value("reason", "");
      for (const json& g : t.at("gpus")) {
        tenant.gpus.push_back({g.at("index").get<int>(), g.at("uuid").get<std::string>()});
      }
      tenant.settings = SettingsFromJson(t.value("settings", json::object()));
      out.tenants.push_back(std::move(tenant));
    }
    for (const json& g : state.at("gpus")) {
      GpuRecord gpu;
      gpu.index = g.at("index").get<int>();
      gpu.uuid = g.at("uuid").get<std::string>();
      gpu.control_pid = g.at("control_pid").get<pid_t>();
      auto mode = ParseComputeMode(g.at("previous_compute_mode").get<std::string>());
      if (!mode.ok()) return mode.status().WithContext("GPU " + gpu.uuid);
      gpu.previous_mode = *mode;
      gpu.restarts = g.value("restarts", 0);
      gpu.protocol = g.value("protocol", 2);
      for (const json& t : g.at("tenants")) gpu.tenants.push_back(t.get<std::string>());
      out.gpus.push_back(std::move(gpu));
    }
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("corrupt: ") + e.what());
  }
  return out;
}

std::string MpsState::Serialise() const {
  json state = {{"version", kVersion}, {"tenants", json::array()}, {"gpus", json::array()}};
  for (const TenantRecord& tenant : tenants) {
    json gpu_list = json::array();
    for (const GpuRef& ref : tenant.gpus) {
      gpu_list.push_back({{"index", ref.index}, {"uuid", ref.uuid}});
    }
    state["tenants"].push_back({{"name", tenant.name},
                                {"tier", TierName(tenant.tier)},
                                {"reason", tenant.reason},
                                {"gpus", gpu_list},
                                {"settings", SettingsToJson(tenant.settings)}});
  }
  for (const GpuRecord& gpu : gpus) {
    state["gpus"].push_back({{"index", gpu.index},
                             {"uuid", gpu.uuid},
                             {"control_pid", gpu.control_pid},
                             {"previous_compute_mode", ComputeModeName(gpu.previous_mode)},
                             {"restarts", gpu.restarts},
                             {"protocol", gpu.protocol},
                             {"tenants", gpu.tenants}});
  }
  return state.dump(2) + "\n";
}

}  // namespace gpuslice::daemon::mps
