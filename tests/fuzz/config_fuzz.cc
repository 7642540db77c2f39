// Fuzzes the JSON config files: gpusliced's --config file (ApplyConfigJson,
// ValidateConfig, and the value parsers ParseHostPort, ParseMode,
// ResolveGroup) and the simulator's GPUSLICE_SIM_CONFIG (ParseSimConfig).
// Every input goes to both; seeds of either kind are in corpus/config_fuzz.
//
// Properties beyond "no crash": no exception escapes, and a simulator config
// that parses has its counts within its arrays and NUL-terminated strings.
#include <cstring>
#include <nlohmann/json.hpp>

#include "daemon/config.h"
#include "fuzz_input.h"
#include "sim/core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  const std::string text(reinterpret_cast<const char*>(data), size);

  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded()) {
    daemon::DaemonConfig config;
    if (daemon::ApplyConfigJson(json, config).ok()) (void)daemon::ValidateConfig(config);
  }
  (void)daemon::ParseHostPort(text);
  (void)daemon::ParseMode(text);
  (void)daemon::ResolveGroup(text, [](const std::string& name) -> std::optional<gid_t> {
    if (name == "gpuslice") return 1234;
    return std::nullopt;
  });

  auto sim = sim::ParseSimConfig(text);
  if (sim.ok()) {
    if (sim->device_count > static_cast<uint32_t>(sim::kMaxDevices))
      fuzz::Fail("sim device_count", text);
    if (sim->params.function_count >
        sizeof(sim->params.functions) / sizeof(sim->params.functions[0])) {
      fuzz::Fail("sim function_count", text);
    }
    for (uint32_t d = 0; d < sim->device_count; ++d) {
      const auto& dev = sim->devices[d];
      if (memchr(dev.name, '\0', sizeof(dev.name)) == nullptr) fuzz::Fail("sim name", text);
      if (memchr(dev.uuid, '\0', sizeof(dev.uuid)) == nullptr) fuzz::Fail("sim uuid", text);
    }
  }
  return 0;
}
