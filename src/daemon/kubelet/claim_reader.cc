#include "daemon/kubelet/claim_reader.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace gpuslice::daemon::kubelet {

using nlohmann::json;

StatusOr<long double> ParseKubeQuantity(std::string_view text) {
  const std::string original(text);
  auto bad = [&](const std::string& why) {
    return InvalidArgument("quantity \"" + original + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  if (text.front() == '+') text.remove_prefix(1);
  if (!text.empty() && text.front() == '-') return bad("negative");
  size_t i = 0;
  bool digits = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) != 0)) {
    ++i;
    digits = true;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) != 0)) {
      ++i;
      digits = true;
    }
  }
  if (!digits) return bad("no number");
  long double value = std::strtold(std::string(text.substr(0, i)).c_str(), nullptr);
  std::string_view suffix = text.substr(i);
  // A decimal exponent ("4e9", "1E3"): 'e' or 'E' followed by an integer.
  if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E') &&
      (std::isdigit(static_cast<unsigned char>(suffix[1])) != 0 || suffix[1] == '-' ||
       suffix[1] == '+')) {
    const std::string exp(suffix.substr(1));
    char* end = nullptr;
    const long e = std::strtol(exp.c_str(), &end, 10);
    if (end == nullptr || *end != '\0') return bad("bad exponent");
    return value * std::pow(10.0L, static_cast<long double>(e));
  }
  struct Unit {
    const char* name;
    long double factor;
  };
  static constexpr Unit kUnits[] = {{"", 1.0L},
                                    {"Ki", 1024.0L},
                                    {"Mi", 1048576.0L},
                                    {"Gi", 1073741824.0L},
                                    {"Ti", 1099511627776.0L},
                                    {"Pi", 1125899906842624.0L},
                                    {"Ei", 1152921504606846976.0L},
                                    {"n", 1e-9L},
                                    {"u", 1e-6L},
                                    {"m", 1e-3L},
                                    {"k", 1e3L},
                                    {"M", 1e6L},
                                    {"G", 1e9L},
                                    {"T", 1e12L},
                                    {"P", 1e15L},
                                    {"E", 1e18L}};
  for (const Unit& u : kUnits) {
    if (suffix == u.name) return value * u.factor;
  }
  return bad("unknown suffix \"" + std::string(suffix) + "\"");
}

namespace {

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

StatusOr<long double> QuantityOf(const json& value) {
  if (value.is_number()) return value.get<long double>();
  if (value.is_string()) return ParseKubeQuantity(value.get<std::string>());
  return InvalidArgument("quantity " + value.dump() + " is neither a string nor a number");
}

}  // namespace

StatusOr<Tier> SliceConfigTier(const json& parameters, const std::string& where) {
  const std::string what = where + ": opaque config of " + kDriverName;
  if (!parameters.is_object()) {
    return InvalidArgument(what + ": parameters must be an object, not " + parameters.dump());
  }
  for (const auto& [key, value] : parameters.items()) {
    if (key != "apiVersion" && key != "kind" && key != "tier") {
      std::string message = what;
      message += ": unknown field \"";
      message += key;
      message += R"(" (a SliceConfig has apiVersion, kind, tier))";
      return InvalidArgument(message);
    }
  }
  if (Str(parameters, "apiVersion") != kSliceConfigApiVersion ||
      Str(parameters, "kind") != kSliceConfigKind) {
    return InvalidArgument(what + ": " + parameters.value("apiVersion", json("")).dump() + " " +
                           parameters.value("kind", json("")).dump() + " is not " +
                           kSliceConfigApiVersion + " " + kSliceConfigKind);
  }
  const json tier = parameters.value("tier", json("shared"));
  if (tier.is_string()) {
    // A claim's devices name no MIG instance yet (docs/mig.md "Not yet").
    if (auto parsed = ParseTier(tier.get<std::string>()); parsed.ok() && *parsed != Tier::kMig) {
      return *parsed;
    }
  }
  return InvalidArgument(what + ": tier " + tier.dump() + R"( is neither "shared" nor "mps")");
}

StatusOr<ClaimInfo> ClaimInfoFromResourceClaim(const json& claim, const ClaimRef& ref,
                                               std::string_view driver) {
  const std::string where = "claim " + ref.claim_namespace + "/" + ref.name;
  if (!claim.is_object()) return InvalidArgument(where + ": not an object");
  const json meta = claim.value("metadata", json::object());
  const std::string uid = Str(meta, "uid");
  if (!ref.uid.empty() && uid != ref.uid) {
    return FailedPrecondition(where + " has uid \"" + uid + "\", not \"" + ref.uid +
                              "\" (the claim was replaced)");
  }
  const json status = claim.value("status", json::object());
  const json allocation = status.value("allocation", json());
  if (!allocation.is_object()) return FailedPrecondition(where + " is not allocated");
  ClaimInfo info;
  const json results = allocation.value("devices", json::object()).value("results", json::array());
  for (const json& r : results) {
    if (Str(r, "driver") != driver) continue;
    ClaimDevice d;
    d.request = Str(r, "request");
    d.pool = Str(r, "pool");
    d.device = Str(r, "device");
    if (d.device.empty()) return InvalidArgument(where + ": a result names no device");
    const json consumed = r.value("consumedCapacity", json::object());
    if (auto m = consumed.find(kMemoryCapacity); m != consumed.end()) {
      auto q = QuantityOf(*m);
      if (!q.ok()) return q.status().WithContext(where + " memory");
      d.memory_bytes = static_cast<uint64_t>(std::ceil(*q));
    }
    if (auto c = consumed.find(kCoresCapacity); c != consumed.end()) {
      auto q = QuantityOf(*c);
      if (!q.ok()) return q.status().WithContext(where + " cores");
      if (*q > 100.0L) return InvalidArgument(where + ": cores above 100");
      d.cores_percent = static_cast<uint32_t>(std::llround(*q));
    }
    info.devices.push_back(std::move(d));
  }
  // Opaque configurations of this driver (the scheduler copied the class's
  // then the claim's into the allocation; a later one wins).
  std::set<std::string> requests;
  for (const ClaimDevice& d : info.devices) requests.insert(d.request);
  const json configs = allocation.value("devices", json::object()).value("config", json::array());
  for (const json& c : configs.is_array() ? configs : json::array()) {
    const json opaque = c.value("opaque", json());
    if (!opaque.is_object() || Str(opaque, "driver") != driver) continue;
    const json applies = c.value("requests", json::array());
    bool ours = !applies.is_array() || applies.empty();
    for (const json& r : applies.is_array() ? applies : json::array()) {
      // "request" or "request/subrequest".
      std::string name = r.is_string() ? r.get<std::string>() : "";
      if (requests.contains(name) || requests.contains(name.substr(0, name.find('/')))) {
        ours = true;
      }
      for (const std::string& q : requests) ours = ours || q.starts_with(name + "/");
    }
    if (!ours) continue;
    GS_ASSIGN_OR_RETURN(info.tier, SliceConfigTier(opaque.value("parameters", json()), where));
  }
  for (const json& consumer : status.value("reservedFor", json::array())) {
    if (Str(consumer, "resource") == "pods" && !Str(consumer, "uid").empty()) {
      info.pod_uids.push_back(Str(consumer, "uid"));
    }
  }
  return info;
}

StatusOr<ClaimInfo> ApiClaimReader::Read(const ClaimRef& ref) {
  const std::string path =
      "/apis/resource.k8s.io/v1/namespaces/" + ref.claim_namespace + "/resourceclaims/" + ref.name;
  auto claim = get_(path);
  if (!claim.ok()) return claim.status();
  return ClaimInfoFromResourceClaim(*claim, ref);
}

StatusOr<ClaimInfo> FileClaimReader::Read(const ClaimRef& ref) {
  const std::string path = dir_ + "/" + ref.claim_namespace + "/" + ref.name + ".json";
  std::ifstream in(path);
  if (!in) return NotFound("no claim file " + path);
  std::stringstream text;
  text << in.rdbuf();
  json claim = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded()) return InvalidArgument(path + " is not JSON");
  return ClaimInfoFromResourceClaim(claim, ref);
}

std::string DeviceNameOf(std::string_view uuid) {
  if (uuid.starts_with("GPU-") || uuid.starts_with("gpu-")) uuid.remove_prefix(4);
  std::string name = "gpu-";
  for (char c : uuid) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

StatusOr<std::string> ResolveDevice(std::string_view device, const std::vector<NodeGpu>& gpus) {
  for (const NodeGpu& g : gpus) {
    if (device == DeviceNameOf(g.uuid) || device == "gpu-" + std::to_string(g.index) ||
        device == "gpu" + std::to_string(g.index))
      return g.uuid;
  }
  return NotFound("no GPU of this node is published as device \"" + std::string(device) + "\"");
}

}  // namespace gpuslice::daemon::kubelet
