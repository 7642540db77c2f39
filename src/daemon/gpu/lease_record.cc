#include "daemon/gpu/lease_record.h"

#include <fstream>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>

namespace gpuslice::daemon {
namespace {

using json = nlohmann::json;

json RangeRecord(const std::optional<ClockRange>& r) {
  if (!r) return {{"locked", nullptr}};
  return {{"locked", {{"min_mhz", r->min_mhz}, {"max_mhz", r->max_mhz}}}};
}

json ValueRecord(const SettingValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, PowerLimit>) {
          return {{"milliwatts", v.milliwatts}};
        } else if constexpr (std::is_same_v<T, GpuClocks> || std::is_same_v<T, MemoryClocks>) {
          return RangeRecord(v.locked);
        } else if constexpr (std::is_same_v<T, Persistence>) {
          return {{"enabled", v.enabled}};
        } else {
          return {{"mode", ComputeModeName(v.mode)}};
        }
      },
      value);
}

// The member `key` of object `j`; kInvalidArgument naming `where` if absent.
StatusOr<const json*> Member(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(where + ": missing \"" + key + "\"");
  return &*it;
}

StatusOr<uint32_t> Uint32(const json& j, const char* key, const std::string& where) {
  GS_ASSIGN_OR_RETURN(const json* v, Member(j, key, where));
  const bool in_range = v->is_number_integer() &&
                        (v->is_number_unsigned() || v->get<int64_t>() >= 0) &&
                        v->get<uint64_t>() <= std::numeric_limits<uint32_t>::max();
  if (!in_range) {
    return InvalidArgument(where + ": \"" + key + "\" must be an unsigned 32-bit integer");
  }
  return static_cast<uint32_t>(v->get<uint64_t>());
}

StatusOr<std::optional<ClockRange>> ParseRange(const json& j, const std::string& where) {
  GS_ASSIGN_OR_RETURN(const json* locked, Member(j, "locked", where));
  if (locked->is_null()) return std::optional<ClockRange>();
  if (!locked->is_object())
    return InvalidArgument(where + ": \"locked\" must be null or an object");
  GS_ASSIGN_OR_RETURN(uint32_t min_mhz, Uint32(*locked, "min_mhz", where));
  GS_ASSIGN_OR_RETURN(uint32_t max_mhz, Uint32(*locked, "max_mhz", where));
  if (min_mhz > max_mhz) return InvalidArgument(where + ": min_mhz is above max_mhz");
  return std::optional<ClockRange>(ClockRange{min_mhz, max_mhz});
}

StatusOr<SettingValue> ParseValue(SettingKind kind, const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + " must be an object");
  switch (kind) {
    case SettingKind::kPowerLimit: {
      GS_ASSIGN_OR_RETURN(uint32_t mw, Uint32(j, "milliwatts", where));
      return SettingValue(PowerLimit{mw});
    }
    case SettingKind::kGpuClocks: {
      GS_ASSIGN_OR_RETURN(auto range, ParseRange(j, where));
      return SettingValue(GpuClocks{range});
    }
    case SettingKind::kMemoryClocks: {
      GS_ASSIGN_OR_RETURN(auto range, ParseRange(j, where));
      return SettingValue(MemoryClocks{range});
    }
    case SettingKind::kPersistence: {
      GS_ASSIGN_OR_RETURN(const json* enabled, Member(j, "enabled", where));
      if (!enabled->is_boolean()) return InvalidArgument(where + ": \"enabled\" must be a boolean");
      return SettingValue(Persistence{enabled->get<bool>()});
    }
    case SettingKind::kComputeMode: {
      GS_ASSIGN_OR_RETURN(const json* mode, Member(j, "mode", where));
      if (!mode->is_string()) return InvalidArgument(where + ": \"mode\" must be a string");
      auto parsed = ParseComputeMode(mode->get<std::string>());
      if (!parsed.ok()) return InvalidArgument(where + ": " + parsed.status().message());
      return SettingValue(ComputeModeSetting{*parsed});
    }
  }
  return InvalidArgument(where + ": unknown setting");
}

StatusOr<std::string> String(const json& j, const char* key, const std::string& where) {
  GS_ASSIGN_OR_RETURN(const json* v, Member(j, key, where));
  if (!v->is_string() || v->get<std::string>().empty()) {
    return InvalidArgument(where + ": \"" + key + "\" must be a non-empty string");
  }
  return v->get<std::string>();
}

StatusOr<LeaseEntry> ParseLease(SettingKind kind, const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + " must be an object");
  LeaseEntry lease;
  GS_ASSIGN_OR_RETURN(lease.holder, String(j, "holder", where));
  GS_ASSIGN_OR_RETURN(const json* value, Member(j, "value", where));
  GS_ASSIGN_OR_RETURN(lease.value, ParseValue(kind, *value, where + ".value"));
  GS_ASSIGN_OR_RETURN(const json* expires, Member(j, "expires_at_ns", where));
  if (!expires->is_null()) {
    if (!expires->is_number_integer()) {
      return InvalidArgument(where + ": \"expires_at_ns\" must be an integer or null");
    }
    lease.expires_at_ns = expires->get<int64_t>();
  }
  for (auto [key, field] : {std::pair{"lease_ns", &lease.lease_ns},
                            std::pair{"expires_mono_ns", &lease.expires_mono_ns}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return InvalidArgument(where + ": \"" + key + "\" must be a non-negative integer");
    }
    *field = it->get<int64_t>();
  }
  if (auto it = j.find("boot_id"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument(where + ": \"boot_id\" must be a string");
    lease.boot_id = it->get<std::string>();
  }
  if (lease.expires_mono_ns.has_value() != !lease.boot_id.empty()) {
    return InvalidArgument(where + R"(: "expires_mono_ns" and "boot_id" go together)");
  }
  if (auto it = j.find("kept"); it != j.end()) {
    if (!it->is_boolean()) return InvalidArgument(where + ": \"kept\" must be a boolean");
    lease.kept = it->get<bool>();
  }
  return lease;
}

StatusOr<LeaseStackRecord> ParseStack(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + " must be an object");
  LeaseStackRecord stack;
  GS_ASSIGN_OR_RETURN(stack.gpu_uuid, String(j, "gpu_uuid", where));
  GS_ASSIGN_OR_RETURN(stack.gpu_index, Uint32(j, "gpu_index", where));
  GS_ASSIGN_OR_RETURN(std::string setting, String(j, "setting", where));
  auto kind = ParseSettingName(setting);
  if (!kind.ok()) return InvalidArgument(where + ": " + kind.status().message());
  stack.kind = *kind;
  GS_ASSIGN_OR_RETURN(const json* baseline, Member(j, "baseline", where));
  GS_ASSIGN_OR_RETURN(stack.baseline, ParseValue(stack.kind, *baseline, where + ".baseline"));
  GS_ASSIGN_OR_RETURN(const json* leases, Member(j, "leases", where));
  if (!leases->is_array()) return InvalidArgument(where + ": \"leases\" must be an array");
  std::set<std::string> holders;
  for (size_t i = 0; i < leases->size(); ++i) {
    const std::string at = where + ".leases[" + std::to_string(i) + "]";
    GS_ASSIGN_OR_RETURN(LeaseEntry lease, ParseLease(stack.kind, (*leases)[i], at));
    if (!holders.insert(lease.holder).second) {
      return InvalidArgument(at + ": holder \"" + lease.holder + "\" holds two leases");
    }
    stack.leases.push_back(std::move(lease));
  }
  return stack;
}

}  // namespace

json LeaseRecordsJson(const std::vector<LeaseStackRecord>& stacks) {
  json list = json::array();
  for (const LeaseStackRecord& s : stacks) {
    json leases = json::array();
    for (const LeaseEntry& l : s.leases) {
      json lease = {{"holder", l.holder},
                    {"value", ValueRecord(l.value)},
                    {"expires_at_ns", l.expires_at_ns ? json(*l.expires_at_ns) : json()}};
      if (l.lease_ns) lease["lease_ns"] = *l.lease_ns;
      if (l.expires_mono_ns && !l.boot_id.empty()) {
        lease["boot_id"] = l.boot_id;
        lease["expires_mono_ns"] = *l.expires_mono_ns;
      }
      if (l.kept) lease["kept"] = true;
      leases.push_back(std::move(lease));
    }
    list.push_back({{"gpu_uuid", s.gpu_uuid},
                    {"gpu_index", s.gpu_index},
                    {"setting", SettingName(s.kind)},
                    {"baseline", ValueRecord(s.baseline)},
                    {"leases", std::move(leases)}});
  }
  return {{"stacks", std::move(list)}};
}

StatusOr<std::vector<LeaseStackRecord>> ParseLeaseRecords(const json& data) {
  if (!data.is_object()) return InvalidArgument("the lease record must be an object");
  GS_ASSIGN_OR_RETURN(const json* stacks, Member(data, "stacks", "the lease record"));
  if (!stacks->is_array()) return InvalidArgument("the lease record: \"stacks\" must be an array");
  std::vector<LeaseStackRecord> out;
  std::set<std::pair<std::string, int>> seen;
  for (size_t i = 0; i < stacks->size(); ++i) {
    const std::string where = "stacks[" + std::to_string(i) + "]";
    GS_ASSIGN_OR_RETURN(LeaseStackRecord stack, ParseStack((*stacks)[i], where));
    if (!seen.emplace(stack.gpu_uuid, static_cast<int>(stack.kind)).second) {
      return InvalidArgument(where + ": a second " + std::string(SettingName(stack.kind)) +
                             " stack for GPU " + stack.gpu_uuid);
    }
    out.push_back(std::move(stack));
  }
  return out;
}

std::string ReadBootId(const std::string& path) {
  std::ifstream in(path);
  std::string id;
  if (!std::getline(in, id)) return "";
  return id;
}

}  // namespace gpuslice::daemon
