#include "daemon/kube/claims.h"

#include <cmath>
#include <limits>

namespace gpuslice::daemon::kube {

StatusOr<uint64_t> ParseKubeQuantity(std::string_view text) {
  const std::string s(text);
  auto bad = [&s] { return InvalidArgument("\"" + s + "\" is not a Kubernetes quantity"); };
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) != 0 || s[i] == '.')) ++i;
  if (i == 0) return bad();
  const std::string number = s.substr(0, i);
  if (number.find('.') != number.rfind('.') || number == ".") return bad();
  const std::string suffix = s.substr(i);
  long double scale = 1;
  static const std::pair<const char*, long double> kSuffixes[] = {{"Ki", 1024.0L},
                                                                  {"Mi", 1048576.0L},
                                                                  {"Gi", 1073741824.0L},
                                                                  {"Ti", 1099511627776.0L},
                                                                  {"Pi", 1125899906842624.0L},
                                                                  {"Ei", 1152921504606846976.0L},
                                                                  {"m", 1e-3L},
                                                                  {"k", 1e3L},
                                                                  {"M", 1e6L},
                                                                  {"G", 1e9L},
                                                                  {"T", 1e12L},
                                                                  {"P", 1e15L},
                                                                  {"E", 1e18L},
                                                                  {"", 1.0L}};
  bool found = false;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) {
      scale = factor;
      found = true;
      break;
    }
  }
  if (!found) {
    if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E')) return bad();
    int exp = 0;
    for (size_t k = 1; k < suffix.size(); ++k) {
      if (std::isdigit(static_cast<unsigned char>(suffix[k])) == 0 || exp > 100) return bad();
      exp = exp * 10 + (suffix[k] - '0');
    }
    scale = std::pow(10.0L, exp);
  }
  const long double value = std::ceil(std::stold(number) * scale - 1e-9L);
  if (value > static_cast<long double>(std::numeric_limits<int64_t>::max())) return bad();
  return static_cast<uint64_t>(value);
}

StatusOr<ClaimAllocation> ParseClaimAllocation(const nlohmann::json& claim,
                                               std::string_view driver) {
  if (!claim.is_object() || !claim.contains("metadata") || !claim["metadata"].is_object()) {
    return InvalidArgument("a ResourceClaim needs metadata");
  }
  ClaimAllocation a;
  const nlohmann::json& m = claim["metadata"];
  a.uid = m.value("uid", "");
  a.ns = m.value("namespace", "");
  a.name = m.value("name", "");
  auto status = claim.find("status");
  if (status == claim.end() || !status->is_object()) return a;
  if (auto reserved = status->find("reservedFor");
      reserved != status->end() && reserved->is_array()) {
    for (const nlohmann::json& r : *reserved) {
      if (r.is_object() && r.value("resource", "") == "pods") {
        a.reserved_for_pods.push_back(r.value("uid", ""));
      }
    }
  }
  auto alloc = status->find("allocation");
  if (alloc == status->end() || !alloc->is_object()) return a;
  a.allocated = true;
  const nlohmann::json* results = nullptr;
  if (auto d = alloc->find("devices"); d != alloc->end() && d->is_object()) {
    if (auto r = d->find("results"); r != d->end()) results = &*r;
  }
  if (results == nullptr) return a;
  if (!results->is_array())
    return InvalidArgument("status.allocation.devices.results is not a list");
  for (size_t i = 0; i < results->size(); ++i) {
    const nlohmann::json& r = (*results)[i];
    const std::string where = "status.allocation.devices.results[" + std::to_string(i) + "]";
    if (!r.is_object()) return InvalidArgument(where + " is not an object");
    if (r.value("driver", "") != driver) continue;
    ClaimDevice d;
    d.request = r.value("request", "");
    d.driver = r.value("driver", "");
    d.pool = r.value("pool", "");
    d.device = r.value("device", "");
    d.share_id = r.value("shareID", "");
    if (auto c = r.find("consumedCapacity"); c != r.end() && c->is_object()) {
      for (const auto& [key, value] : c->items()) {
        if (key != "memory" && key != "cores") continue;
        std::string field = where;
        field += ".consumedCapacity.";
        field += key;
        if (!value.is_string() && !value.is_number_unsigned()) {
          return InvalidArgument(field + " is not a quantity");
        }
        auto q = value.is_string() ? ParseKubeQuantity(value.get<std::string>())
                                   : StatusOr<uint64_t>(value.get<uint64_t>());
        if (!q.ok()) return q.status().WithContext(field);
        if (key == "memory") {
          d.memory_bytes = *q;
        } else {
          if (*q > 100) {
            return InvalidArgument(where + ".consumedCapacity.cores is above 100");
          }
          d.cores_percent = static_cast<uint32_t>(*q);
        }
      }
    }
    a.devices.push_back(std::move(d));
  }
  return a;
}

StatusOr<ClaimAllocation> ApiClaimReader::Read(const std::string& ns, const std::string& name) {
  GS_ASSIGN_OR_RETURN(nlohmann::json claim,
                      client_.Get(std::string("/apis/resource.k8s.io/v1/namespaces/") + ns +
                                  "/resourceclaims/" + name));
  return ParseClaimAllocation(claim, driver_);
}

}  // namespace gpuslice::daemon::kube
