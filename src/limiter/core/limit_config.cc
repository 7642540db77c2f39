#include "limiter/core/limit_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/quantity.h"
#include "common/str_cat.h"

namespace gpuslice::limiter {
namespace {

using Json = nlohmann::json;

// Longest message we return; longer ones (only absurd inputs) are cut.
constexpr size_t kMaxMessageChars = 1000;
// Longest rendering of a JSON value in a message.
constexpr size_t kMaxJsonChars = 40;

enum class Kind { kMemory, kCompute };

// Per-device candidate values of one kind: bytes, or percent 1..100.
using Candidates = std::vector<std::optional<uint64_t>>;

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool IsHex(char c) { return isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Quoted(std::string_view s) { return StrCat({"'", s, "'"}); }

// `s` with control characters escaped (so it is one line), cut to kMaxMessageChars.
std::string OneLine(std::string_view s) {
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
    if (out.size() >= kMaxMessageChars) {
      out += "...";
      break;
    }
  }
  return out;
}

// InvalidArgument("VAR: problem"), one line.
Status VarError(std::string_view var, std::string_view problem) {
  std::string m(var);
  m += ": ";
  m += problem;
  return InvalidArgument(OneLine(m));
}

std::string_view ZeroProblem(Kind kind) {
  return kind == Kind::kMemory ? "a memory limit of 0 bytes is not allowed (unset it for no limit)"
                               : "a compute limit of 0% is not allowed (expected 1-100; 100 "
                                 "or unset means no limit)";
}

// A byte quantity as ParseBytes reads it ("4GiB", "8G", "1073741824"); may be 0.
StatusOr<uint64_t> ParseMemoryText(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgument("empty value");
  if (s.front() == '-') return InvalidArgument("negative memory limit " + Quoted(s));
  return ParseBytes(s);
}

// A plain number of bytes: decimal digits only; may be 0.
StatusOr<uint64_t> ParseDigitBytes(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgument("empty value");
  if (s.front() == '-') return InvalidArgument("negative memory limit " + Quoted(s));
  if (!IsDigits(s)) {
    return InvalidArgument(Quoted(s) + " is not a number of bytes (expected decimal digits only)");
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return InvalidArgument("memory limit " + Quoted(s) + " is too large");
  }
  return v;
}

// An integer percentage 0..100 with an optional '%'; may be 0.
StatusOr<uint64_t> ParsePercentText(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgument("empty value");
  if (s.front() == '-') return InvalidArgument("negative percentage " + Quoted(s));
  if (s.find('.') != std::string_view::npos) {
    return InvalidArgument("fractional percentage " + Quoted(s) +
                           " (expected a whole number 1-100)");
  }
  GS_ASSIGN_OR_RETURN(uint32_t v, ParsePercent(s));
  return uint64_t{v};
}

// A JSON value, short, for messages: "boolean true", "number 1.5".
std::string DescribeJson(const Json& v) {
  std::string dump = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (dump.size() > kMaxJsonChars) dump = dump.substr(0, kMaxJsonChars) + "...";
  return std::string(v.type_name()) + " " + dump;
}

// One value of a JSON object; may be 0. `units`: memory strings may carry a
// unit (GPUSLICE_*) rather than being plain digits (TENSOR_FUSION_*).
StatusOr<uint64_t> ParseJsonValue(const Json& v, Kind kind, bool units) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (kind == Kind::kCompute) return ParsePercentText(s);
    return units ? ParseMemoryText(s) : ParseDigitBytes(s);
  }
  if (v.is_number_unsigned()) {
    auto n = v.get<uint64_t>();
    if (kind == Kind::kCompute && n > 100) {
      return InvalidArgument("percentage " + std::to_string(n) + " is above 100");
    }
    return n;
  }
  if (v.is_number_integer()) {
    return InvalidArgument(
        std::string(kind == Kind::kMemory ? "negative memory limit " : "negative percentage ") +
        v.dump());
  }
  if (v.is_number_float()) {
    return InvalidArgument(
        std::string(kind == Kind::kMemory ? "memory limit " : "fractional percentage ") + v.dump() +
        (kind == Kind::kMemory ? " is not an integer number of bytes"
                               : " (expected a whole number 1-100)"));
  }
  std::string expected;
  if (kind == Kind::kCompute) {
    expected = "an integer percent or a percent string";
  } else if (units) {
    expected = "a quantity string or a non-negative integer number of bytes";
  } else {
    expected = "an integer number of bytes or a string of digits";
  }
  return InvalidArgument("expected " + expected + ", got " + DescribeJson(v));
}

std::string NormalizeUuid(std::string_view s) {
  s = Trim(s);
  if (s.size() >= 4 && Lower(s.substr(0, 4)) == "gpu-") s.remove_prefix(4);
  return Lower(s);
}

std::string DeviceIndexList(std::span<const DeviceId> devices) {
  if (devices.empty()) return "none";
  std::string out;
  for (const DeviceId& d : devices) {
    if (!out.empty()) out += ", ";
    out += std::to_string(d.index);
  }
  return out;
}

std::string DeviceUuidList(std::span<const DeviceId> devices) {
  if (devices.empty()) return "none";
  std::string out;
  for (const DeviceId& d : devices) {
    if (!out.empty()) out += ", ";
    out += d.uuid.empty() ? "(unknown)" : d.uuid;
  }
  return out;
}

// The position in `devices` of the device a JSON key names.
StatusOr<size_t> ResolveKey(std::string_view raw_key, std::span<const DeviceId> devices) {
  std::string_view key = Trim(raw_key);
  if (key.empty()) return InvalidArgument("empty device key");
  if (IsDigits(key) || ((key.front() == '-' || key.front() == '+') && IsDigits(key.substr(1)))) {
    int index = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
    bool parsed = ec == std::errc() && end == key.data() + key.size() && key.front() != '+';
    for (size_t i = 0; parsed && i < devices.size(); ++i) {
      if (devices[i].index == index) return i;
    }
    return InvalidArgument("no device with index " + Quoted(key) +
                           " (devices: " + DeviceIndexList(devices) + ")");
  }
  std::string want = NormalizeUuid(key);
  for (size_t i = 0; !want.empty() && i < devices.size(); ++i) {
    if (!devices[i].uuid.empty() && NormalizeUuid(devices[i].uuid) == want) return i;
  }
  return InvalidArgument("no device with UUID " + Quoted(key) +
                         " (devices: " + DeviceUuidList(devices) + ")");
}

void LowerTo(std::optional<uint64_t>& slot, uint64_t v) {
  if (!slot || v < *slot) slot = v;
}

// "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
std::string JsonErrorText(const char* what) {
  std::string_view s(what);
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find("] ");
    if (close != std::string_view::npos) s.remove_prefix(close + 2);
  }
  return std::string(s);
}

// Applies a JSON object keyed by device index or UUID to `out` (smallest wins).
Status ApplyJsonObject(std::string_view var, std::string_view text, Kind kind, bool units,
                       std::span<const DeviceId> devices, Candidates& out) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    return VarError(var, "malformed JSON: " + JsonErrorText(e.what()));
  }
  if (!doc.is_object()) {
    return VarError(
        var, "expected a JSON object keyed by device index or UUID, got " + DescribeJson(doc));
  }
  for (const auto& [key, value] : doc.items()) {
    StatusOr<size_t> slot = ResolveKey(key, devices);
    if (!slot.ok()) return VarError(var, slot.status().message());
    StatusOr<uint64_t> v = ParseJsonValue(value, kind, units);
    if (!v.ok()) return VarError(var, "key " + Quoted(key) + ": " + v.status().message());
    if (*v == 0) return VarError(var, "key " + Quoted(key) + ": " + std::string(ZeroProblem(kind)));
    LowerTo(out[*slot], *v);
  }
  return Status::Ok();
}

// GPUSLICE_MEMORY_LIMIT / GPUSLICE_COMPUTE_LIMIT: one value for every device,
// or a JSON object.
Status ApplyGpusliceVar(const EnvLookup& env, std::string_view var, Kind kind,
                        std::span<const DeviceId> devices, Candidates& out) {
  const char* raw = env(var);
  if (raw == nullptr) return Status::Ok();
  std::string_view text = Trim(raw);
  if (text.empty()) return VarError(var, "empty value");
  // '[' too, so that a JSON array is reported as the wrong JSON shape.
  if (text.front() == '{' || text.front() == '[') {
    return ApplyJsonObject(var, text, kind, /*units=*/true, devices, out);
  }
  StatusOr<uint64_t> v = kind == Kind::kMemory ? ParseMemoryText(text) : ParsePercentText(text);
  if (!v.ok()) return VarError(var, v.status().message());
  if (*v == 0) return VarError(var, ZeroProblem(kind));
  for (auto& slot : out) LowerTo(slot, *v);
  return Status::Ok();
}

// TENSOR_FUSION_CUDA_MEM_LIMIT / TENSOR_FUSION_CUDA_UP_LIMIT: a JSON object.
Status ApplyTensorFusionVar(const EnvLookup& env, std::string_view var, Kind kind,
                            std::span<const DeviceId> devices, Candidates& out) {
  const char* raw = env(var);
  if (raw == nullptr) return Status::Ok();
  std::string_view text = Trim(raw);
  if (text.empty()) return VarError(var, "empty value");
  return ApplyJsonObject(var, text, kind, /*units=*/false, devices, out);
}

// One HAMi variable: 0 when unset or 0 (HAMi's "no limit").
StatusOr<uint64_t> ReadHamiVar(const EnvLookup& env, std::string_view var, Kind kind) {
  const char* raw = env(var);
  if (raw == nullptr) return uint64_t{0};
  StatusOr<uint64_t> v = kind == Kind::kMemory ? ParseMemoryText(raw) : ParsePercentText(raw);
  if (!v.ok()) return VarError(var, v.status().message());
  return *v;
}

// CUDA_DEVICE_MEMORY_LIMIT[_i] / CUDA_DEVICE_SM_LIMIT[_i], HAMi-core's rules:
// a non-zero _i replaces the plain variable for device i.
Status ApplyHamiVars(const EnvLookup& env, std::string_view base, Kind kind,
                     std::span<const DeviceId> devices, Candidates& out) {
  GS_ASSIGN_OR_RETURN(uint64_t all, ReadHamiVar(env, base, kind));
  for (size_t i = 0; i < devices.size(); ++i) {
    std::string name = std::string(base) + "_" + std::to_string(devices[i].index);
    GS_ASSIGN_OR_RETURN(uint64_t one, ReadHamiVar(env, name, kind));
    uint64_t v = one != 0 ? one : all;
    if (v != 0) LowerTo(out[i], v);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadGroup(const EnvLookup& env, std::string_view cgroup_text, int pid) {
  const char* raw = env(kEnvGroup);
  if (raw == nullptr) {
    std::string group = DefaultGroup(cgroup_text, pid);
    if (group.empty()) return Internal("out of memory choosing the default group");
    return group;
  }
  std::string_view group = Trim(raw);
  if (group.empty()) return VarError(kEnvGroup, "empty value");
  if (!ValidGroupId(group)) {
    return VarError(kEnvGroup, Quoted(group) +
                                   " is not a valid group id (expected 1-100 characters of "
                                   "A-Z a-z 0-9 . _ -, not starting with '.')");
  }
  return std::string(group);
}

StatusOr<std::optional<ScheduleRequest>> ParseScheduleImpl(const EnvLookup& env) {
  ScheduleRequest schedule;
  bool any = false;
  if (const char* raw = env(kEnvComputeRequest); raw != nullptr) {
    any = true;
    auto p = ParsePercentText(raw);
    if (!p.ok()) return VarError(kEnvComputeRequest, p.status().message());
    if (*p > 100) return VarError(kEnvComputeRequest, "percentage above 100");
    schedule.request_percent = static_cast<uint32_t>(*p);
  }
  if (const char* raw = env(kEnvPriority); raw != nullptr) {
    any = true;
    const std::string priority = Lower(Trim(raw));
    if (priority != "latency" && priority != "batch") {
      return VarError(kEnvPriority,
                      Quoted(Trim(raw)) + " is not a priority (expected latency or batch)");
    }
    schedule.priority = priority;
  }
  if (const char* raw = env(kEnvWeight); raw != nullptr) {
    any = true;
    const std::string_view text = Trim(raw);
    uint32_t weight = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), weight);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || weight < 1 ||
        weight > 1000) {
      return VarError(kEnvWeight, Quoted(text) + " is not a weight (expected an integer 1-1000)");
    }
    schedule.weight = weight;
  }
  if (!any) return std::optional<ScheduleRequest>();
  return std::optional<ScheduleRequest>(schedule);
}

StatusOr<LimitConfig> ParseLimitConfigImpl(const EnvLookup& env, std::span<const DeviceId> devices,
                                           std::string_view cgroup_text, int pid) {
  LimitConfig config;
  GS_ASSIGN_OR_RETURN(config.group, ReadGroup(env, cgroup_text, pid));

  Candidates memory(devices.size());
  GS_RETURN_IF_ERROR(ApplyGpusliceVar(env, kEnvMemoryLimit, Kind::kMemory, devices, memory));
  GS_RETURN_IF_ERROR(
      ApplyTensorFusionVar(env, kEnvTensorFusionMemLimit, Kind::kMemory, devices, memory));
  GS_RETURN_IF_ERROR(ApplyHamiVars(env, kEnvHamiMemoryLimit, Kind::kMemory, devices, memory));

  Candidates compute(devices.size());
  GS_RETURN_IF_ERROR(ApplyGpusliceVar(env, kEnvComputeLimit, Kind::kCompute, devices, compute));
  GS_RETURN_IF_ERROR(
      ApplyTensorFusionVar(env, kEnvTensorFusionUpLimit, Kind::kCompute, devices, compute));
  GS_RETURN_IF_ERROR(ApplyHamiVars(env, kEnvHamiSmLimit, Kind::kCompute, devices, compute));

  config.devices.resize(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    config.devices[i].memory_bytes = memory[i];
    if (compute[i] && *compute[i] < 100) {
      config.devices[i].compute_percent = static_cast<uint32_t>(*compute[i]);
    }
  }
  GS_ASSIGN_OR_RETURN(config.schedule, ParseScheduleImpl(env));
  if (config.schedule && config.schedule->request_percent) {
    const uint32_t request = *config.schedule->request_percent;
    for (size_t i = 0; i < devices.size(); ++i) {
      const uint32_t limit = config.devices[i].compute_percent.value_or(100);
      if (request > limit) {
        return VarError(kEnvComputeRequest, "a request of " + std::to_string(request) +
                                                "% is above the compute limit of device " +
                                                std::to_string(devices[i].index) + " (" +
                                                std::to_string(limit) + "%)");
      }
    }
  }
  return config;
}

// The pod UID `s` spells, lower-case, or "" if it is not one: 32 hex digits,
// or 8-4-4-4-12 hex digits with dashes.
std::string PodUid(std::string_view s) {
  bool dashed = s.size() == 36;
  if (!dashed && s.size() != 32) return {};
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash_here = dashed && (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash_here ? s[i] != '-' : !IsHex(s[i])) return {};
  }
  return Lower(s);
}

// The pod UID in one cgroup path, or "".
std::string PodUidInPath(std::string_view path) {
  bool in_kubepods = false;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.find("kubepods") != std::string_view::npos) {
      in_kubepods = true;
      // systemd driver: kubepods-pod<uid>.slice, kubepods-<qos>-pod<uid>.slice,
      // with '_' for '-' in the UID.
      constexpr std::string_view kSlice = ".slice";
      if (part.ends_with(kSlice)) {
        std::string_view body = part.substr(0, part.size() - kSlice.size());
        size_t pod = body.rfind("-pod");
        if (pod != std::string_view::npos) {
          std::string uid(body.substr(pod + 4));
          std::replace(uid.begin(), uid.end(), '_', '-');
          std::string found = PodUid(uid);
          if (!found.empty()) return found;
        }
      }
      continue;
    }
    // cgroupfs driver: .../kubepods[/<qos>]/pod<uid>/<container>.
    if (in_kubepods && part.starts_with("pod")) {
      std::string found = PodUid(part.substr(3));
      if (!found.empty()) return found;
    }
  }
  return {};
}

}  // namespace

StatusOr<LimitConfig> ParseLimitConfig(const EnvLookup& env, std::span<const DeviceId> devices,
                                       std::string_view cgroup_text, int pid) {
  try {
    return ParseLimitConfigImpl(env, devices, cgroup_text, pid);
  } catch (const std::bad_alloc&) {
    return Internal("out of memory reading the limiter configuration");
  } catch (const std::exception& e) {
    return Internal(OneLine(std::string("reading the limiter configuration: ") + e.what()));
  } catch (...) {
    return Internal("unknown exception reading the limiter configuration");
  }
}

StatusOr<std::optional<ScheduleRequest>> ParseScheduleRequest(const EnvLookup& env) {
  try {
    return ParseScheduleImpl(env);
  } catch (const std::exception& e) {
    return Internal(OneLine(std::string("reading the schedule: ") + e.what()));
  }
}

std::string DefaultGroup(std::string_view cgroup_text, int pid) noexcept {
  try {
    // Lines of /proc/self/cgroup: "hierarchy-id:controllers:path".
    while (!cgroup_text.empty()) {
      size_t nl = cgroup_text.find('\n');
      std::string_view line = cgroup_text.substr(0, nl);
      cgroup_text = nl == std::string_view::npos ? std::string_view() : cgroup_text.substr(nl + 1);
      size_t first = line.find(':');
      if (first == std::string_view::npos) continue;
      size_t second = line.find(':', first + 1);
      if (second == std::string_view::npos) continue;
      std::string uid = PodUidInPath(Trim(line.substr(second + 1)));
      if (!uid.empty()) return "pod-" + uid;
    }
    return "pid-" + std::to_string(pid);
  } catch (...) {
    return {};
  }
}

bool ValidGroupId(std::string_view group) noexcept {
  if (group.empty() || group.size() > 100 || group.front() == '.') return false;
  return std::all_of(group.begin(), group.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace gpuslice::limiter
