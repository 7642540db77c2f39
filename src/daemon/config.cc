#include "daemon/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <variant>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

// What ValidateConfig asks of one key's value alone (config_keys.inc).
struct Check {
  enum Kind { kAny, kNotEmpty, kRange, kOneOf, kParses } kind = kAny;
  int64_t min = 0, max = 0;                             // kRange
  const char* values = "";                              // kOneOf: space-separated
  Status (*parse)(const std::string& value) = nullptr;  // kParses
};
constexpr Check Any() { return {}; }
constexpr Check NotEmpty() { return {.kind = Check::kNotEmpty}; }
constexpr Check InRange(int64_t min, int64_t max) {
  return {.kind = Check::kRange, .min = min, .max = max};
}
constexpr Check OneOf(const char* values) { return {.kind = Check::kOneOf, .values = values}; }
constexpr Check Parses(Status (*parse)(const std::string&)) {
  return {.kind = Check::kParses, .parse = parse};
}

Status CheckMode(const std::string& text) { return ParseMode(text).status(); }

// Whether `path` is `dir` or lies under it, lexically (neither need exist).
bool Within(const std::string& path, const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
  const std::filesystem::path rest = p.lexically_relative(d);
  return !rest.empty() && *rest.begin() != "..";
}

// Containers of claims and slices mount the socket's whole directory
// (docs/kubelet.md "CDI specs"): none of the node's other state may be in it.
Status CheckSocketDirHoldsOnlyTheSocket(const DaemonConfig& c) {
  if (!c.dra && !c.device_plugin) return Status::Ok();
  const std::string socket_dir = std::filesystem::path(c.socket).parent_path().string();
  const std::pair<const char*, const std::string*> dirs[] = {{"mps_root", &c.mps_root},
                                                             {"shm_dir", &c.shm_dir},
                                                             {"state_dir", &c.state_dir},
                                                             {"cdi_dir", &c.cdi_dir}};
  for (const auto& [name, dir] : dirs) {
    if (dir->empty() || !Within(*dir, socket_dir)) continue;
    return InvalidArgument(
        std::string(name) + " \"" + *dir + "\" is inside the socket's directory \"" + socket_dir +
        "\", which every container of a claim or slice mounts: put it elsewhere");
  }
  return Status::Ok();
}
Status CheckHostPort(const std::string& text) {
  return text.empty() ? Status::Ok() : ParseHostPort(text).status();
}

// One entry of config_keys.inc.
struct Key {
  const char* name;
  std::variant<std::string DaemonConfig::*, int64_t DaemonConfig::*, bool DaemonConfig::*> member;
  const char* env;
  Check check;
  const char* value_name;
  const char* help;
  const char* docs_default;
  const char* docs;
};

// Every key, in config_keys.inc's order.
constexpr Key kKeys[] = {
#define GS_CONFIG_KEY(type, name, default_value, env, check, value_name, help, docs_default, docs) \
  Key{#name, &DaemonConfig::name, env, check, value_name, help, docs_default, docs},
#include "daemon/config_keys.inc"
#undef GS_CONFIG_KEY
};

// Each check is of a type it can read, and only string keys take an
// environment variable.
constexpr bool ChecksFitTheirKeys() {
  for (const Key& key : kKeys) {
    const bool is_string = std::holds_alternative<std::string DaemonConfig::*>(key.member);
    const bool is_int = std::holds_alternative<int64_t DaemonConfig::*>(key.member);
    if (key.check.kind == Check::kRange && !is_int) return false;
    if (key.check.kind != Check::kRange && key.check.kind != Check::kAny && !is_string) {
      return false;
    }
    if (*key.env != '\0' && !is_string) return false;
  }
  return true;
}
static_assert(ChecksFitTheirKeys(), "config_keys.inc: a check or env on a key of another type");

std::string FlagOf(const Key& key) {
  std::string flag = std::string("--") + key.name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

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

Status CheckKey(const Key& key, const DaemonConfig& c) {
  const Check& check = key.check;
  if (check.kind == Check::kAny) return Status::Ok();
  if (check.kind == Check::kRange) {
    const int64_t value = c.*std::get<int64_t DaemonConfig::*>(key.member);
    if (value < check.min || value > check.max) {
      return InvalidArgument(std::string(key.name) + " must be in " + std::to_string(check.min) +
                             ".." + std::to_string(check.max) + ", not " + std::to_string(value));
    }
    return Status::Ok();
  }
  const std::string& value = c.*std::get<std::string DaemonConfig::*>(key.member);
  switch (check.kind) {
    case Check::kNotEmpty:
      if (value.empty()) return InvalidArgument(FlagOf(key) + " must not be empty");
      return Status::Ok();
    case Check::kOneOf: {
      const std::vector<std::string> allowed = Words(check.values);
      if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return Status::Ok();
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(std::string(key.name) + " \"" + value + "\" is not one of " + list);
    }
    case Check::kParses:
      return check.parse(value).WithContext(FlagOf(key));
    default:
      return Status::Ok();
  }
}

// The key's default as the docs show it (markdown).
std::string DocsDefault(const Key& key) {
  if (*key.docs_default != '\0') return key.docs_default;
  static const DaemonConfig* const kDefaults = new DaemonConfig();
  std::string text = std::visit(
      [&defaults = *kDefaults](auto member) -> std::string {
        const auto& value = defaults.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) {
          return value ? "on" : "off";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return value.empty() ? "none" : "`" + value + "`";
        } else {
          return std::to_string(value);
        }
      },
      key.member);
  if (*key.env != '\0') text += std::string(" (or `$") + key.env + "`)";
  return text;
}

// Markdown as plain text for --help: no backticks, no escapes.
std::string Plain(std::string text) {
  std::erase(text, '`');
  return text;
}

// `|` escaped for a cell of a markdown table.
std::string Cell(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

Status ApplyConfigJson(const json& j, DaemonConfig& c) {
  if (!j.is_object()) return InvalidArgument("the config must be a JSON object");
  for (const auto& item : j.items()) {
    const std::string& name = item.key();
    const json& value = item.value();
    const Key* key = std::find_if(std::begin(kKeys), std::end(kKeys),
                                  [&name](const Key& k) { return name == k.name; });
    if (key == std::end(kKeys)) return InvalidArgument("unknown config key \"" + name + "\"");
    GS_RETURN_IF_ERROR(
        std::visit([&](auto member) { return Take(value, name, c.*member); }, key->member));
  }
  return Status::Ok();
}

void ApplyConfigEnv(const std::function<const char*(const char*)>& getenv, DaemonConfig& config) {
  for (const Key& key : kKeys) {
    if (*key.env == '\0') continue;
    const char* value = getenv(key.env);
    if (value == nullptr || *value == '\0') continue;
    config.*std::get<std::string DaemonConfig::*>(key.member) = value;
  }
}

ConfigFlags::ConfigFlags(CLI::App& app) {
  for (size_t i = 0; i < std::size(kKeys); ++i) {
    const Key& key = kKeys[i];
    const std::string help = std::string(key.help) + " (default: " + Plain(DocsDefault(key)) + ")";
    CLI::Option* option = std::visit(
        [&](auto member) -> CLI::Option* {
          auto& value = values_.*member;
          if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
            return app.add_flag(FlagOf(key), value, help);
          } else {
            return app.add_option(FlagOf(key), value, help)->type_name(key.value_name);
          }
        },
        key.member);
    options_.emplace_back(option, i);
  }
}

void ConfigFlags::ApplyGiven(DaemonConfig& config) const {
  for (const auto& entry : options_) {
    if (entry.first->count() == 0) continue;
    std::visit([&](auto member) { config.*member = values_.*member; }, kKeys[entry.second].member);
  }
}

std::string ConfigDocsTable() {
  std::string table = "| Key | Flag | Default | Meaning |\n|---|---|---|---|\n";
  for (const Key& key : kKeys) {
    std::string flag = FlagOf(key);
    if (*key.value_name != '\0') flag += std::string(" ") + key.value_name;
    table += "| `" + std::string(key.name) + "` | `" + Cell(flag) + "` | " +
             Cell(DocsDefault(key)) + " | " + key.docs + " |\n";
  }
  return table;
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
  for (const Key& key : kKeys) GS_RETURN_IF_ERROR(CheckKey(key, c));
  if (!c.listen_tcp.empty() && c.token_file.empty()) {
    return InvalidArgument(
        "--listen-tcp needs --token-file (mutating calls over TCP need a "
        "bearer token)");
  }
  if (!c.kube_node.empty() && c.kube_api != "in-cluster" && !c.kube_api.starts_with("https://") &&
      !c.kube_api.starts_with("http://")) {
    return InvalidArgument("kube_api \"" + c.kube_api +
                           R"(" is neither "in-cluster" nor an http(s):// URL)");
  }
  return CheckSocketDirHoldsOnlyTheSocket(c);
}

}  // namespace gpuslice::daemon
