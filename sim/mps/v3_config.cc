#include "sim/mps/v3_config.h"

#include <charconv>
#include <set>
#include <sstream>

#include "sim/mps/command.h"
#include "sim/mps/toml.h"

namespace gpuslice::sim::mps {
namespace {

Status Bad(const TomlValue& v, const std::string& where, const std::string& what) {
  return InvalidArgument("line " + std::to_string(v.line) + ": " + where + ": " + what);
}

// Every key of `t` is in `allowed`.
Status OnlyKeys(const TomlTable& t, const std::string& where,
                const std::set<std::string>& allowed) {
  for (const auto& [key, value] : t) {
    if (!allowed.contains(key)) return Bad(value, where, "unknown key '" + key + "'");
  }
  return Status::Ok();
}

// Server and namespace names become directories under the pipe directory.
Status CheckName(const TomlValue& v, const std::string& what, const std::string& name) {
  if (name.empty() || name.size() > 100 || name == "." || name == "..") {
    return Bad(v, what, "bad name '" + name + "'");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return Bad(v, what, "bad name '" + name + "' (letters, digits, _ - . only)");
  }
  return Status::Ok();
}

StatusOr<std::string> String(const TomlValue& v, const std::string& where) {
  if (!v.is_string()) return Bad(v, where, "expected a string");
  return v.str();
}

StatusOr<bool> Bool(const TomlValue& v, const std::string& where) {
  if (!v.is_bool()) return Bad(v, where, "expected true or false");
  return v.boolean();
}

StatusOr<const TomlTable*> Table(const TomlValue& v, const std::string& where) {
  if (!v.is_table()) return Bad(v, where, "expected a table");
  return &v.table();
}

// The keys a server and a namespace share.
Status ReadLimits(const TomlTable& t, const std::string& where, V3Limits* out) {
  if (auto it = t.find("pinned_memory_limit"); it != t.end()) {
    const std::string w = where + ".pinned_memory_limit";
    auto str = String(it->second, w);
    if (!str.ok()) return str.status();
    const std::string& s = *str;
    auto bytes = ParsePinnedLimit(s);
    if (!bytes.ok()) return Bad(it->second, w, "'" + s + "' is not a limit like 10G or 900M");
    out->pinned_bytes = *bytes;
  }
  if (auto it = t.find("active_thread_percentage"); it != t.end()) {
    const std::string w = where + ".active_thread_percentage";
    auto str = String(it->second, w);
    if (!str.ok()) return str.status();
    const std::string& s = *str;
    auto c = ParseCommand("set_default_active_thread_percentage " + s);
    if (s.empty() || !c.ok()) return Bad(it->second, w, "'" + s + "' is not a number in (0, 100]");
    out->thread_percent = c->percent;
  }
  if (auto it = t.find("client_priority"); it != t.end()) {
    const std::string w = where + ".client_priority";
    auto str = String(it->second, w);
    if (!str.ok()) return str.status();
    const std::string& s = *str;
    if (s.size() != 1 || (s[0] != '0' && s[0] != '1')) {
      return Bad(it->second, w, "'" + s + "' is not 0 or 1");
    }
    out->priority = s[0] == '1' ? 1 : 0;
  }
  return Status::Ok();
}

StatusOr<V3Device> ReadDevice(const TomlTable& t, const std::string& where, int line) {
  GS_RETURN_IF_ERROR(OnlyKeys(t, where, {"uuid", "sm_partitions"}));
  V3Device d;
  auto uuid = t.find("uuid");
  if (uuid == t.end())
    return InvalidArgument("line " + std::to_string(line) + ": " + where + ": missing uuid");
  GS_ASSIGN_OR_RETURN(d.uuid, String(uuid->second, where + ".uuid"));
  if (!d.uuid.starts_with("GPU-")) return Bad(uuid->second, where + ".uuid", "not a GPU UUID");
  if (auto it = t.find("sm_partitions"); it != t.end()) {
    const std::string w = where + ".sm_partitions";
    if (!it->second.is_table_array()) return Bad(it->second, w, "expected [[" + w + "]]");
    std::set<std::string> names;
    int remainders = 0;
    for (const TomlTable& p : it->second.table_array()) {
      GS_RETURN_IF_ERROR(OnlyKeys(p, w, {"name", "chunks", "include_remainder"}));
      V3SmPartition part;
      auto name = p.find("name");
      auto chunks = p.find("chunks");
      if (name == p.end() || chunks == p.end()) {
        return Bad(it->second, w, "a partition needs a name and chunks");
      }
      GS_ASSIGN_OR_RETURN(part.name, String(name->second, w + ".name"));
      GS_RETURN_IF_ERROR(CheckName(name->second, w + ".name", part.name));
      if (!names.insert(part.name).second) {
        return Bad(name->second, w, "partition '" + part.name + "' defined twice");
      }
      if (!chunks->second.is_int() || chunks->second.integer() <= 0 ||
          chunks->second.integer() > 1024) {
        return Bad(chunks->second, w + ".chunks", "expected an integer in [1, 1024]");
      }
      part.chunks = static_cast<uint32_t>(chunks->second.integer());
      if (auto r = p.find("include_remainder"); r != p.end()) {
        GS_ASSIGN_OR_RETURN(part.include_remainder, Bool(r->second, w + ".include_remainder"));
        if (part.include_remainder) ++remainders;
      }
      if (remainders > 1) return Bad(it->second, w, "only one partition may take the remainder");
      d.sm_partitions.push_back(std::move(part));
    }
  }
  return d;
}

StatusOr<V3Server> ReadServer(const std::string& name, const TomlValue& v) {
  const std::string where = "servers." + name;
  GS_RETURN_IF_ERROR(CheckName(v, where, name));
  GS_ASSIGN_OR_RETURN(const TomlTable* t, Table(v, where));
  GS_RETURN_IF_ERROR(
      OnlyKeys(*t, where,
               {"allowed_devices", "pinned_memory_limit", "active_thread_percentage",
                "client_priority", "uid", "locality_domains", "namespaces", "devices"}));
  V3Server s;
  s.name = name;
  GS_RETURN_IF_ERROR(ReadLimits(*t, where, &s.limits));
  if (auto it = t->find("allowed_devices"); it != t->end()) {
    GS_ASSIGN_OR_RETURN(std::string list, String(it->second, where + ".allowed_devices"));
    std::stringstream items(list);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (!item.starts_with("GPU-")) {
        return Bad(it->second, where + ".allowed_devices", "'" + item + "' is not a GPU UUID");
      }
      s.allowed_devices.push_back(item);
    }
    if (s.allowed_devices.empty()) return Bad(it->second, where + ".allowed_devices", "empty");
  }
  if (auto it = t->find("uid"); it != t->end()) {
    if (!it->second.is_int() || it->second.integer() < 0 || it->second.integer() > UINT32_MAX - 1) {
      return Bad(it->second, where + ".uid", "expected a user id");
    }
    s.uid = static_cast<uint32_t>(it->second.integer());
  }
  if (auto it = t->find("locality_domains"); it != t->end()) {
    GS_ASSIGN_OR_RETURN(s.locality_domains, Bool(it->second, where + ".locality_domains"));
  }
  if (auto it = t->find("namespaces"); it != t->end()) {
    GS_ASSIGN_OR_RETURN(const TomlTable* nss, Table(it->second, where + ".namespaces"));
    for (const auto& [ns_name, ns_value] : *nss) {
      std::string w = where;
      w += ".namespaces.";
      w += ns_name;
      GS_RETURN_IF_ERROR(CheckName(ns_value, w, ns_name));
      GS_ASSIGN_OR_RETURN(const TomlTable* ns, Table(ns_value, w));
      GS_RETURN_IF_ERROR(
          OnlyKeys(*ns, w, {"pinned_memory_limit", "active_thread_percentage", "client_priority"}));
      V3Limits limits;
      GS_RETURN_IF_ERROR(ReadLimits(*ns, w, &limits));
      s.namespaces[ns_name] = limits;
    }
  }
  if (auto it = t->find("devices"); it != t->end()) {
    const std::string w = where + ".devices";
    if (!it->second.is_table_array()) return Bad(it->second, w, "expected [[" + w + "]]");
    for (const TomlTable& d : it->second.table_array()) {
      GS_ASSIGN_OR_RETURN(V3Device device, ReadDevice(d, w, it->second.line));
      s.devices.push_back(std::move(device));
    }
  }
  return s;
}

}  // namespace

StatusOr<V3Config> ParseV3Config(std::string_view text) {
  GS_ASSIGN_OR_RETURN(TomlTable root, ParseToml(text));
  V3Config config;
  for (const auto& [key, value] : root) {
    if (key != "schema_version" && key != "servers" && key != "features") {
      return Bad(value, "top level", "unknown key '" + key + "'");
    }
  }
  auto version = root.find("schema_version");
  if (version == root.end()) return InvalidArgument("schema_version is missing");
  GS_ASSIGN_OR_RETURN(config.schema_version, String(version->second, "schema_version"));
  if (config.schema_version != "1.0") {
    return Bad(version->second, "schema_version", "'" + config.schema_version + "' is not 1.0");
  }
  if (auto it = root.find("servers"); it != root.end()) {
    GS_ASSIGN_OR_RETURN(const TomlTable* servers, Table(it->second, "servers"));
    for (const auto& [name, value] : *servers) {
      GS_ASSIGN_OR_RETURN(V3Server s, ReadServer(name, value));
      config.servers.push_back(std::move(s));
    }
  }
  if (auto it = root.find("features"); it != root.end()) {
    GS_ASSIGN_OR_RETURN(const TomlTable* features, Table(it->second, "features"));
    GS_RETURN_IF_ERROR(OnlyKeys(*features, "features", {"memacct", "context-share"}));
    if (auto m = features->find("memacct"); m != features->end()) {
      GS_ASSIGN_OR_RETURN(const TomlTable* t, Table(m->second, "features.memacct"));
      GS_RETURN_IF_ERROR(OnlyKeys(*t, "features.memacct", {"enabled", "audit_log"}));
      if (auto e = t->find("enabled"); e != t->end()) {
        GS_ASSIGN_OR_RETURN(config.memacct, Bool(e->second, "features.memacct.enabled"));
      }
      if (auto e = t->find("audit_log"); e != t->end()) {
        GS_ASSIGN_OR_RETURN(config.memacct_audit_log,
                            Bool(e->second, "features.memacct.audit_log"));
      }
    }
    if (auto c = features->find("context-share"); c != features->end()) {
      GS_ASSIGN_OR_RETURN(const TomlTable* t, Table(c->second, "features.context-share"));
      GS_RETURN_IF_ERROR(OnlyKeys(*t, "features.context-share", {"enabled", "default_socket"}));
      if (auto e = t->find("enabled"); e != t->end()) {
        GS_ASSIGN_OR_RETURN(config.context_share,
                            Bool(e->second, "features.context-share.enabled"));
      }
      if (auto e = t->find("default_socket"); e != t->end()) {
        GS_ASSIGN_OR_RETURN(config.context_share_default_socket,
                            String(e->second, "features.context-share.default_socket"));
        if (config.context_share_default_socket != "on" &&
            config.context_share_default_socket != "off") {
          return Bad(e->second, "features.context-share.default_socket", "expected on or off");
        }
      }
    }
  }
  return config;
}

}  // namespace gpuslice::sim::mps
