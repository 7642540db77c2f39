// gpusliced's configuration: defaults, then an optional JSON file
// (--config), then the environment (GPUSLICE_SOCKET, GPUSLICE_SHM_DIR), then
// flags; a later source wins. Every key is one entry of config_keys.inc, from
// which come the DaemonConfig field and its default, the JSON key, the flag
// and its help, the environment variable, the key's own check and its row of
// docs/daemon.md's table. Parsing and validation are pure functions
// (unit-tested).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gpuslice/paths.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace gpuslice::daemon {

// One field per key of config_keys.inc, initialised to the key's default.
struct DaemonConfig {
#define GS_CONFIG_KEY(type, name, default_value, ...) type name = default_value;
#include "daemon/config_keys.inc"
#undef GS_CONFIG_KEY
};

// Applies the keys of a JSON object (the names of DaemonConfig's fields) to
// `config`. kInvalidArgument naming the key for an unknown key or a wrong type.
Status ApplyConfigJson(const nlohmann::json& json, DaemonConfig& config);
// Reads and applies a config file; errors name the file.
Status ApplyConfigFile(const std::string& path, DaemonConfig& config);
// Sets each key that has an environment variable (config_keys.inc) which
// `getenv` finds set and not empty.
void ApplyConfigEnv(const std::function<const char*(const char*)>& getenv, DaemonConfig& config);
// Each key's own check (a range, one of a few values, a format: mode is
// octal, listen_tcp is HOST:PORT, ...), then the checks across keys.
// kInvalidArgument naming the key (or its flag) for the first that fails.
Status ValidateConfig(const DaemonConfig& config);

// A flag per key on `app` (--name with '-' for '_', bool keys as switches),
// with its help and default; after app.parse(), ApplyGiven copies the value
// of each flag given on the command line, so that flags win over the file and
// the environment. REQUIRES: this outlives app.parse() (the flags write into it).
class ConfigFlags {
 public:
  explicit ConfigFlags(CLI::App& app);
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  void ApplyGiven(DaemonConfig& config) const;

 private:
  DaemonConfig values_;
  std::vector<std::pair<const CLI::Option*, size_t>> options_;  // the flag, its key's index
};

// The table of keys in docs/daemon.md (markdown: key, flag, default, meaning),
// one row per key in config_keys.inc's order.
std::string ConfigDocsTable();

struct HostPort {
  std::string host;
  uint16_t port;
};
StatusOr<HostPort> ParseHostPort(const std::string& text);
StatusOr<mode_t> ParseMode(const std::string& text);
// A group name or number; `lookup` maps names to gids (getgrnam_r in production).
StatusOr<gid_t> ResolveGroup(const std::string& text,
                             const std::function<std::optional<gid_t>(const std::string&)>& lookup);

}  // namespace gpuslice::daemon
