#include "sim/core/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/quantity.h"

namespace gpuslice::sim {
namespace {

using nlohmann::json;

void CopyString(char* dst, size_t size, std::string_view src) {
  size_t n = std::min(size - 1, src.size());
  memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// A stable UUID-shaped id per device index, so a configuration names the same
// GPUs in every simulation.
void DeviceUuid(int index, char* out, size_t size) {
  uint64_t h = HashConfigText("gpuslice-sim-device-" + std::to_string(index));
  snprintf(out, size, "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
           static_cast<unsigned>((h >> 16) & 0xffff), 0x4000 | static_cast<unsigned>(h & 0x0fff),
           0x8000 | static_cast<unsigned>((h >> 48) & 0x3fff),
           static_cast<unsigned long long>((h * 0x9e3779b97f4a7c15ull) & 0xffffffffffffull));
}

DeviceInfo DefaultDevice(int index) {
  DeviceInfo d{};
  CopyString(d.name, sizeof d.name, "NVIDIA H100 80GB HBM3");
  DeviceUuid(index, d.uuid, sizeof d.uuid);
  d.pci_domain = 0;
  d.pci_bus = 0x18 + 0x10 * index;
  d.pci_device = 0;
  snprintf(d.pci_bus_id, sizeof d.pci_bus_id, "00000000:%02X:00.0", d.pci_bus);
  snprintf(d.serial, sizeof d.serial, "165232%07d", 1000 + index);
  d.pci_device_id = 0x233010DE;
  d.pci_subsystem_id = 0x16C110DE;
  d.sm_count = 132;
  d.max_threads_per_sm = 2048;
  d.max_threads_per_block = 1024;
  d.max_blocks_per_sm = 32;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.max_sm_clock_mhz = 1980;
  d.max_mem_clock_mhz = 2619;
  d.default_sm_clock_mhz = 1755;
  d.default_mem_clock_mhz = 2619;
  d.power_min_mw = 200'000;
  d.power_max_mw = 700'000;
  d.power_default_mw = 700'000;
  d.power_idle_mw = 70'000;
  d.power_busy_mw = 690'000;
  d.temperature_c = 34;
  d.memory_bus_width = 5120;
  d.total_bytes = 80ull << 30;
  return d;
}

// Reads a key of `obj` into `out` if present, checking its type and range.
// `where` names the object for error messages ("devices[1]").
class Reader {
 public:
  Reader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  Status Int(const char* key, int64_t min, int64_t max, int64_t* out) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return Status::Ok();
    if (!it->is_number_integer() &&
        !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>())) {
      return Error(key, "must be an integer");
    }
    double v = it->get<double>();
    if (v < static_cast<double>(min) || v > static_cast<double>(max)) {
      return Error(key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    *out = static_cast<int64_t>(v);
    return Status::Ok();
  }

  template <typename T>
  Status UInt(const char* key, int64_t min, int64_t max, T* out) {
    auto v = static_cast<int64_t>(*out);
    GS_RETURN_IF_ERROR(Int(key, min, max, &v));
    *out = static_cast<T>(v);
    return Status::Ok();
  }

  // Watts (number) into milliwatts.
  Status Watts(const char* key, uint32_t* out_mw) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return Status::Ok();
    if (!it->is_number() || it->get<double>() <= 0 || it->get<double>() > 10000) {
      return Error(key, "must be a power in watts between 0 and 10000");
    }
    *out_mw = static_cast<uint32_t>(std::lround(it->get<double>() * 1000));
    return Status::Ok();
  }

  Status Bytes(const char* key, uint64_t* out) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return Status::Ok();
    if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
      *out = it->get<uint64_t>();
      return Status::Ok();
    }
    if (!it->is_string()) return Error(key, "must be a byte quantity such as \"80GiB\"");
    auto v = ParseBytes(it->get<std::string>());
    if (!v.ok()) return Error(key, v.status().message());
    *out = *v;
    return Status::Ok();
  }

  Status String(const char* key, char* out, size_t size) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return Status::Ok();
    if (!it->is_string()) return Error(key, "must be a string");
    const auto& s = it->get_ref<const std::string&>();
    if (s.empty() || s.size() >= size) {
      return Error(key, "must be 1 to " + std::to_string(size - 1) + " characters");
    }
    CopyString(out, size, s);
    return Status::Ok();
  }

  void Skip(const char* key) { seen_.insert(key); }

  // Every key must have been read: a typo is an error, not a silent default.
  Status NoUnknownKeys() const {
    for (const auto& [key, value] : obj_.items()) {
      if (!seen_.count(key)) return Error(key.c_str(), "is not a known key");
    }
    return Status::Ok();
  }

  Status Error(const char* key, const std::string& what) const {
    return InvalidArgument("simulator config: " + where_ + (where_.empty() ? "" : ".") + key + " " +
                           what);
  }

 private:
  const json& obj_;
  std::string where_;
  std::set<std::string> seen_;
};

Status ReadDevice(const json& j, int index, DeviceInfo* d) {
  std::string where = "devices[" + std::to_string(index) + "]";
  if (!j.is_object()) return InvalidArgument("simulator config: " + where + " must be an object");
  Reader r(j, where);
  GS_RETURN_IF_ERROR(r.String("name", d->name, sizeof d->name));
  GS_RETURN_IF_ERROR(r.String("uuid", d->uuid, sizeof d->uuid));
  if (strncmp(d->uuid, "GPU-", 4) != 0) return r.Error("uuid", "must start with \"GPU-\"");
  GS_RETURN_IF_ERROR(r.Bytes("memory", &d->total_bytes));
  if (d->total_bytes < (64ull << 20)) return r.Error("memory", "must be at least 64MiB");
  GS_RETURN_IF_ERROR(r.UInt("sms", 1, 1024, &d->sm_count));
  GS_RETURN_IF_ERROR(r.UInt("threads_per_sm", 32, 4096, &d->max_threads_per_sm));
  GS_RETURN_IF_ERROR(r.UInt("max_sm_clock_mhz", 100, 5000, &d->max_sm_clock_mhz));
  GS_RETURN_IF_ERROR(r.UInt("max_mem_clock_mhz", 100, 20000, &d->max_mem_clock_mhz));
  d->default_sm_clock_mhz = std::min(d->default_sm_clock_mhz, d->max_sm_clock_mhz);
  d->default_mem_clock_mhz = std::min(d->default_mem_clock_mhz, d->max_mem_clock_mhz);
  GS_RETURN_IF_ERROR(r.Watts("power_min_w", &d->power_min_mw));
  GS_RETURN_IF_ERROR(r.Watts("power_max_w", &d->power_max_mw));
  GS_RETURN_IF_ERROR(r.Watts("power_limit_w", &d->power_default_mw));
  GS_RETURN_IF_ERROR(r.Watts("idle_power_w", &d->power_idle_mw));
  GS_RETURN_IF_ERROR(r.Watts("busy_power_w", &d->power_busy_mw));
  if (d->power_min_mw > d->power_default_mw || d->power_default_mw > d->power_max_mw) {
    return r.Error("power_limit_w", "must lie within power_min_w..power_max_w");
  }
  r.Skip("cc");
  if (auto it = j.find("cc"); it != j.end()) {
    unsigned major = 0, minor = 0;
    if (!it->is_string() || sscanf(it->get<std::string>().c_str(), "%u.%u", &major, &minor) != 2 ||
        major == 0 || major > 20 || minor > 9) {
      return r.Error("cc", "must be a compute capability such as \"9.0\"");
    }
    d->cc_major = major;
    d->cc_minor = minor;
  }
  r.Skip("mig");
  if (auto it = j.find("mig"); it != j.end()) {
    if (!it->is_boolean()) return r.Error("mig", "must be true or false");
    d->mig_enabled = it->get<bool>() ? 1 : 0;
  }
  return r.NoUnknownKeys();
}

}  // namespace

int DriverMajorVersion(std::string_view version) {
  // <major>.<minor>[.<patch>], every part digits.
  int major = -1;
  size_t parts = 0;
  size_t i = 0;
  while (i <= version.size()) {
    size_t end = version.find('.', i);
    if (end == std::string_view::npos) end = version.size();
    std::string_view part = version.substr(i, end - i);
    if (part.empty() || part.size() > 6 ||
        part.find_first_not_of("0123456789") != std::string_view::npos) {
      return -1;
    }
    if (parts == 0) major = std::stoi(std::string(part));
    ++parts;
    i = end + 1;
  }
  return parts >= 2 && parts <= 3 ? major : -1;
}

bool HasCgroupMemoryLimits(std::string_view driver_version) {
  return DriverMajorVersion(driver_version) >= kMemoryLimitsDriverMajor;
}

uint64_t HashConfigText(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

SimConfig DefaultSimConfig() {
  SimConfig c{};
  SimParams& p = c.params;
  // The H100 as measured (docs/sim.md "Defaults"): time slice, context
  // switch and NVML window from gpuslice-gpu-calibrate, the window
  // attribution from NVML's raw samples.
  p.timeslice_ns = 2090'000;
  p.switch_ns = 152'000;
  p.sample_ns = 200'000'000;
  p.process_util = kProcessUtilWindow;
  p.launch_ns = 3'000;
  p.wave_ns = 10'000;
  p.context_bytes = 300ull << 20;
  p.granularity = 2ull << 20;
  p.pool_block_granules = kDefaultPoolBlock / p.granularity;
  p.max_pending = 1024;
  CopyString(p.driver_version, sizeof p.driver_version, kDefaultDriverVersion);
  c.device_count = 1;
  for (int i = 0; i < kMaxDevices; ++i) c.devices[i] = DefaultDevice(i);
  return c;
}

StatusOr<SimConfig> ParseSimConfig(std::string_view text) {
  SimConfig c = DefaultSimConfig();
  if (Trim(text).empty()) return c;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("simulator config: not valid JSON");
  if (!j.is_object()) return InvalidArgument("simulator config: must be a JSON object");

  Reader r(j, "");
  SimParams& p = c.params;
  int64_t us = p.timeslice_ns / 1000;
  GS_RETURN_IF_ERROR(r.Int("timeslice_us", 10, 1'000'000, &us));
  p.timeslice_ns = us * 1000;
  us = p.switch_ns / 1000;
  GS_RETURN_IF_ERROR(r.Int("switch_us", 0, 100'000, &us));
  p.switch_ns = us * 1000;
  us = p.sample_ns / 1000;
  GS_RETURN_IF_ERROR(r.Int("sample_us", 1000, 10'000'000, &us));
  p.sample_ns = us * 1000;
  GS_RETURN_IF_ERROR(r.Int("launch_ns", 1, 1'000'000'000, &p.launch_ns));
  GS_RETURN_IF_ERROR(r.Int("wave_ns", 1, 1'000'000'000, &p.wave_ns));
  GS_RETURN_IF_ERROR(r.UInt("max_pending", 1, kQueueCapacity, &p.max_pending));
  GS_RETURN_IF_ERROR(r.Bytes("context_bytes", &p.context_bytes));
  GS_RETURN_IF_ERROR(r.Bytes("granularity", &p.granularity));
  if (p.granularity == 0 || (p.granularity & (p.granularity - 1)) != 0) {
    return r.Error("granularity", "must be a power of two");
  }
  // Default 32 MiB (a power of two: a multiple of any smaller granularity).
  uint64_t pool_block = std::max<uint64_t>(kDefaultPoolBlock, p.granularity);
  GS_RETURN_IF_ERROR(r.Bytes("pool_block", &pool_block));
  if (pool_block == 0 || pool_block % p.granularity != 0 ||
      pool_block / p.granularity > UINT32_MAX) {
    return r.Error("pool_block", "must be a positive multiple of the granularity");
  }
  p.pool_block_granules = static_cast<uint32_t>(pool_block / p.granularity);
  GS_RETURN_IF_ERROR(r.String("driver_version", p.driver_version, sizeof p.driver_version));
  r.Skip("soft_limit_eviction");
  if (auto it = j.find("soft_limit_eviction"); it != j.end()) {
    if (!it->is_boolean()) return r.Error("soft_limit_eviction", "must be true or false");
    p.soft_limit_eviction = it->get<bool>() ? 1 : 0;
  }
  r.Skip("process_util");
  if (auto it = j.find("process_util"); it != j.end()) {
    const std::string mode = it->is_string() ? it->get<std::string>() : "";
    if (mode == "split") {
      p.process_util = kProcessUtilSplit;
    } else if (mode == "window") {
      p.process_util = kProcessUtilWindow;
    } else {
      return r.Error("process_util", R"(must be "split" or "window")");
    }
  }
  if (DriverMajorVersion(p.driver_version) < 0) {
    return r.Error("driver_version", R"(must be a version such as "615.10" or "580.65.06")");
  }

  r.Skip("functions");
  if (auto it = j.find("functions"); it != j.end()) {
    if (!it->is_object()) return r.Error("functions", "must be an object of name: {wave_ns}");
    for (const auto& [name, fn] : it->items()) {
      if (p.function_count == kMaxFunctions) {
        return r.Error("functions", "has more than " + std::to_string(kMaxFunctions) + " entries");
      }
      FunctionCost& f = p.functions[p.function_count++];
      if (name.empty() || name.size() >= sizeof f.name) {
        return r.Error("functions", "has a name that is empty or too long");
      }
      CopyString(f.name, sizeof f.name, name);
      f.wave_ns = p.wave_ns;
      if (!fn.is_object()) return r.Error("functions", "entry '" + name + "' must be an object");
      Reader fr(fn, "functions." + name);
      GS_RETURN_IF_ERROR(fr.Int("wave_ns", 1, 1'000'000'000, &f.wave_ns));
      GS_RETURN_IF_ERROR(fr.NoUnknownKeys());
    }
  }

  r.Skip("devices");
  int64_t count = c.device_count;
  GS_RETURN_IF_ERROR(r.Int("device_count", 1, kMaxDevices, &count));
  c.device_count = static_cast<uint32_t>(count);
  if (auto it = j.find("devices"); it != j.end()) {
    if (!it->is_array() || it->empty() || it->size() > kMaxDevices) {
      return r.Error("devices",
                     "must be an array of 1 to " + std::to_string(kMaxDevices) + " device objects");
    }
    if (j.contains("device_count") && static_cast<size_t>(count) != it->size()) {
      return r.Error("device_count", "disagrees with the length of devices");
    }
    c.device_count = static_cast<uint32_t>(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      GS_RETURN_IF_ERROR(ReadDevice((*it)[i], static_cast<int>(i), &c.devices[i]));
    }
  }
  for (uint32_t i = 0; i < c.device_count; ++i) {
    if (p.context_bytes >= c.devices[i].total_bytes) {
      return r.Error("context_bytes", "must be smaller than every device's memory");
    }
    for (uint32_t k = 0; k < i; ++k) {
      if (strcmp(c.devices[i].uuid, c.devices[k].uuid) == 0) {
        return r.Error("devices", "has two devices with uuid " + std::string(c.devices[i].uuid));
      }
    }
  }
  GS_RETURN_IF_ERROR(r.NoUnknownKeys());
  return c;
}

StatusOr<std::string> LoadSimConfigText(std::string_view value) {
  std::string_view v = Trim(value);
  if (v.empty() || v.front() == '{') return std::string(v);
  std::ifstream in{std::string(v)};
  if (!in) {
    return NotFound("simulator config file '" + std::string(v) +
                    "' cannot be read: " + strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpuslice::sim
