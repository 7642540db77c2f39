#include "sim/smi/smi.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string_view>

#include "common/quantity.h"
#include "sim/smi/smi_mig.h"
#include "sim/smi/smi_text.h"

namespace gpuslice::smi {

std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::vector<std::string> SplitCommas(std::string_view s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    std::string part(s.substr(start, comma == std::string_view::npos ? s.npos : comma - start));
    // The real tool tolerates spaces around field names.
    const size_t b = part.find_first_not_of(" \t");
    const size_t e = part.find_last_not_of(" \t");
    parts.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return parts;
}

SmiResult Fail(int code, std::string message) {
  SmiResult r;
  r.err = std::move(message);
  r.exit_code = code;
  return r;
}

int ExitCodeFor(nvmlReturn_t r) {
  switch (r) {
    case NVML_ERROR_NO_PERMISSION:
      return kExitNoPermission;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return kExitNotSupported;
    case NVML_ERROR_INVALID_ARGUMENT:
      return kExitInvalidArgument;
    default:
      return kExitQueryFailed;
  }
}

namespace {

constexpr unsigned long long kMiB = 1ull << 20;

// ---- one device's view ----

// A value in a query column: text plus the unit appended unless nounits.
struct Value {
  std::string text;
  bool has_unit = false;
};

Value NotAvailable() { return {"[N/A]", false}; }

Value Checked(nvmlReturn_t r, const NvmlApi& nvml, std::string text, bool has_unit = true) {
  if (r == NVML_SUCCESS) return {std::move(text), has_unit};
  if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_FUNCTION_NOT_FOUND) return NotAvailable();
  return {std::string("[") + nvml.ErrorString(r) + "]", false};
}

std::string StringOf(const NvmlApi& nvml, nvmlReturn_t (*fn)(nvmlDevice_t, char*, unsigned int),
                     nvmlDevice_t dev, nvmlReturn_t* r) {
  char buf[256] = {0};
  *r = fn == nullptr ? NVML_ERROR_FUNCTION_NOT_FOUND : fn(dev, buf, sizeof buf);
  (void)nvml;
  return buf;
}

// Memory info, preferring v2 (used excludes the driver's reservation, as the
// real tool shows it).
nvmlReturn_t Memory(const NvmlApi& nvml, nvmlDevice_t dev, unsigned long long* total,
                    unsigned long long* reserved, unsigned long long* used,
                    unsigned long long* free_bytes) {
  nvmlMemory_v2_t m2;
  memset(&m2, 0, sizeof m2);
  m2.version = nvmlMemory_v2;
  nvmlReturn_t r = nvml.Call(&NvmlApi::nvmlDeviceGetMemoryInfo_v2, dev, &m2);
  if (r == NVML_SUCCESS) {
    *total = m2.total;
    *reserved = m2.reserved;
    *used = m2.used;
    *free_bytes = m2.free;
    return r;
  }
  nvmlMemory_t m1;
  r = nvml.Call(&NvmlApi::nvmlDeviceGetMemoryInfo, dev, &m1);
  if (r == NVML_SUCCESS) {
    *total = m1.total;
    *reserved = 0;
    *used = m1.used;
    *free_bytes = m1.free;
  }
  return r;
}

const char* ComputeModeName(nvmlComputeMode_t mode) {
  switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT:
      return "Default";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
      return "Exclusive_Thread";
    case NVML_COMPUTEMODE_PROHIBITED:
      return "Prohibited";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
      return "Exclusive_Process";
    default:
      return "Unknown";
  }
}

const char* ComputeModeShort(nvmlComputeMode_t mode) {
  switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT:
      return "Default";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
      return "E. Thread";
    case NVML_COMPUTEMODE_PROHIBITED:
      return "Prohibited";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
      return "E. Process";
    default:
      return "Unknown";
  }
}

// ---- --query-gpu fields ----

struct Context {
  const NvmlApi& nvml;
  unsigned int count;
};

struct GpuField {
  const char* name;    // canonical: what the header shows
  const char* alias1;  // other accepted spellings (nullptr: none)
  const char* alias2;
  const char* unit;  // "MiB", "%", "W", "MHz" or nullptr
  std::function<Value(const Context&, const Gpu&)> get;
};

Value MemoryField(const Context& c, const Gpu& g, int which) {
  unsigned long long v[4] = {0, 0, 0, 0};
  nvmlReturn_t r = Memory(c.nvml, g.handle, &v[0], &v[1], &v[2], &v[3]);
  return Checked(r, c.nvml, Format("%llu", v[which] / kMiB));
}

Value MilliwattField(const Context& c, const Gpu& g,
                     nvmlReturn_t (*NvmlApi::*fn)(nvmlDevice_t, unsigned int*)) {
  unsigned int mw = 0;
  nvmlReturn_t r = c.nvml.Call(fn, g.handle, &mw);
  return Checked(r, c.nvml, Format("%.2f", mw / 1000.0));
}

Value ClockField(const Context& c, const Gpu& g, bool max, nvmlClockType_t type) {
  unsigned int mhz = 0;
  nvmlReturn_t r = max ? c.nvml.Call(&NvmlApi::nvmlDeviceGetMaxClockInfo, g.handle, type, &mhz)
                       : c.nvml.Call(&NvmlApi::nvmlDeviceGetClockInfo, g.handle, type, &mhz);
  return Checked(r, c.nvml, Format("%u", mhz));
}

Value UtilField(const Context& c, const Gpu& g, bool memory) {
  nvmlUtilization_t u{0, 0};
  nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetUtilizationRates, g.handle, &u);
  return Checked(r, c.nvml, Format("%u", memory ? u.memory : u.gpu));
}

const std::vector<GpuField>& GpuFields() {
  static const auto* fields = new std::vector<GpuField>{
      {"timestamp", nullptr, nullptr, nullptr,
       [](const Context&, const Gpu&) -> Value {
         char buf[64];
         time_t now = time(nullptr);
         tm local;
         localtime_r(&now, &local);
         strftime(buf, sizeof buf, "%Y/%m/%d %H:%M:%S.000", &local);
         return {buf, false};
       }},
      {"driver_version", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu&) {
         char buf[96] = {0};
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlSystemGetDriverVersion, buf, 96u);
         return Checked(r, c.nvml, buf, false);
       }},
      {"count", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu&) -> Value {
         return {Format("%u", c.count), false};
       }},
      {"name", "gpu_name", nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetName, g.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"serial", "gpu_serial", nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetSerial, g.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"uuid", "gpu_uuid", nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetUUID, g.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"pci.bus_id", "gpu_bus_id", nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlPciInfo_t pci;
         memset(&pci, 0, sizeof pci);
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPciInfo_v3, g.handle, &pci);
         return Checked(r, c.nvml, pci.busId, false);
       }},
      {"index", nullptr, nullptr, nullptr,
       [](const Context&, const Gpu& g) -> Value {
         return {Format("%u", g.index), false};
       }},
      {"persistence_mode", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlEnableState_t m = NVML_FEATURE_DISABLED;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPersistenceMode, g.handle, &m);
         return Checked(r, c.nvml, m == NVML_FEATURE_ENABLED ? "Enabled" : "Disabled", false);
       }},
      {"pstate", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlPstates_t p = NVML_PSTATE_UNKNOWN;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPerformanceState, g.handle, &p);
         return Checked(r, c.nvml, Format("P%d", static_cast<int>(p)), false);
       }},
      {"fan.speed", nullptr, nullptr, "%",
       [](const Context& c, const Gpu& g) {
         unsigned int s = 0;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetFanSpeed, g.handle, &s);
         return Checked(r, c.nvml, Format("%u", s));
       }},
      {"memory.total", nullptr, nullptr, "MiB",
       [](const Context& c, const Gpu& g) { return MemoryField(c, g, 0); }},
      {"memory.reserved", nullptr, nullptr, "MiB",
       [](const Context& c, const Gpu& g) { return MemoryField(c, g, 1); }},
      {"memory.used", nullptr, nullptr, "MiB",
       [](const Context& c, const Gpu& g) { return MemoryField(c, g, 2); }},
      {"memory.free", nullptr, nullptr, "MiB",
       [](const Context& c, const Gpu& g) { return MemoryField(c, g, 3); }},
      {"compute_mode", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         nvmlComputeMode_t m = NVML_COMPUTEMODE_DEFAULT;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetComputeMode, g.handle, &m);
         return Checked(r, c.nvml, ComputeModeName(m), false);
       }},
      {"utilization.gpu", nullptr, nullptr, "%",
       [](const Context& c, const Gpu& g) { return UtilField(c, g, false); }},
      {"utilization.memory", nullptr, nullptr, "%",
       [](const Context& c, const Gpu& g) { return UtilField(c, g, true); }},
      {"temperature.gpu", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         unsigned int t = 0;
         nvmlReturn_t r =
             c.nvml.Call(&NvmlApi::nvmlDeviceGetTemperature, g.handle, NVML_TEMPERATURE_GPU, &t);
         return Checked(r, c.nvml, Format("%u", t), false);
       }},
      {"power.draw", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         return MilliwattField(c, g, &NvmlApi::nvmlDeviceGetPowerUsage);
       }},
      {"power.limit", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         return MilliwattField(c, g, &NvmlApi::nvmlDeviceGetPowerManagementLimit);
       }},
      {"enforced.power.limit", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         return MilliwattField(c, g, &NvmlApi::nvmlDeviceGetEnforcedPowerLimit);
       }},
      {"power.default_limit", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         return MilliwattField(c, g, &NvmlApi::nvmlDeviceGetPowerManagementDefaultLimit);
       }},
      {"power.min_limit", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         unsigned int lo = 0, hi = 0;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPowerManagementLimitConstraints,
                                      g.handle, &lo, &hi);
         return Checked(r, c.nvml, Format("%.2f", lo / 1000.0));
       }},
      {"power.max_limit", nullptr, nullptr, "W",
       [](const Context& c, const Gpu& g) {
         unsigned int lo = 0, hi = 0;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPowerManagementLimitConstraints,
                                      g.handle, &lo, &hi);
         return Checked(r, c.nvml, Format("%.2f", hi / 1000.0));
       }},
      {"clocks.current.graphics", "clocks.gr", nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, false, NVML_CLOCK_GRAPHICS); }},
      {"clocks.current.sm", "clocks.sm", nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, false, NVML_CLOCK_SM); }},
      {"clocks.current.memory", "clocks.mem", nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, false, NVML_CLOCK_MEM); }},
      {"clocks.max.graphics", "clocks.max.gr", nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, true, NVML_CLOCK_GRAPHICS); }},
      {"clocks.max.sm", nullptr, nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, true, NVML_CLOCK_SM); }},
      {"clocks.max.memory", "clocks.max.mem", nullptr, "MHz",
       [](const Context& c, const Gpu& g) { return ClockField(c, g, true, NVML_CLOCK_MEM); }},
      {"mig.mode.current", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         unsigned int cur = 0, pending = 0;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetMigMode, g.handle, &cur, &pending);
         return Checked(r, c.nvml, cur == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled", false);
       }},
      {"mig.mode.pending", nullptr, nullptr, nullptr,
       [](const Context& c, const Gpu& g) {
         unsigned int cur = 0, pending = 0;
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetMigMode, g.handle, &cur, &pending);
         return Checked(r, c.nvml, pending == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled",
                        false);
       }},
  };
  return *fields;
}

template <typename F>
const F* FindField(const std::vector<F>& fields, std::string_view name) {
  for (const F& f : fields) {
    if (name == f.name || (f.alias1 != nullptr && name == f.alias1) ||
        (f.alias2 != nullptr && name == f.alias2)) {
      return &f;
    }
  }
  return nullptr;
}

// Resolves every requested field name, or fails like the real tool.
template <typename F>
bool ResolveFields(const std::vector<F>& table, const std::string& list, std::vector<const F*>* out,
                   SmiResult* result) {
  for (const std::string& name : SplitCommas(list)) {
    const F* f = FindField(table, name);
    if (f == nullptr) {
      *result =
          Fail(kExitInvalidArgument, "Field \"" + name + "\" is not a valid field to query.\n\n");
      return false;
    }
    out->push_back(f);
  }
  return true;
}

template <typename F>
std::string HeaderLine(const std::vector<const F*>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ", ";
    line += fields[i]->name;
    if (fields[i]->unit != nullptr) line += std::string(" [") + fields[i]->unit + "]";
  }
  return line + "\n";
}

std::string ValueText(const Value& v, const char* unit, bool nounits) {
  if (!v.has_unit || unit == nullptr || nounits) return v.text;
  return v.text + " " + unit;
}

// ---- device selection ----

// Every GPU, or those -i names. On an unknown id fails like the real tool.
bool SelectGpus(const SmiOptions& o, const NvmlApi& nvml, unsigned int count,
                std::vector<Gpu>* gpus, SmiResult* result) {
  if (o.ids.empty()) {
    for (unsigned int i = 0; i < count; ++i) {
      Gpu g{i, nullptr};
      nvmlReturn_t r = nvml.Call(&NvmlApi::nvmlDeviceGetHandleByIndex_v2, i, &g.handle);
      if (r != NVML_SUCCESS) {
        *result = Fail(kExitQueryFailed, Format("Unable to determine the device handle for GPU%u: "
                                                "%s\n",
                                                i, nvml.ErrorString(r)));
        return false;
      }
      gpus->push_back(g);
    }
    return true;
  }
  for (const std::string& id : o.ids) {
    Gpu g;
    nvmlReturn_t r = NVML_ERROR_NOT_FOUND;
    if (id.find_first_not_of("0123456789") == std::string::npos) {
      const unsigned long index = id.size() <= 9 ? strtoul(id.c_str(), nullptr, 10) : count;
      if (index < count) {
        g.index = static_cast<unsigned int>(index);
        r = nvml.Call(&NvmlApi::nvmlDeviceGetHandleByIndex_v2, g.index, &g.handle);
      }
    } else {
      r = id.rfind("GPU-", 0) == 0
              ? nvml.Call(&NvmlApi::nvmlDeviceGetHandleByUUID, id.c_str(), &g.handle)
              : nvml.Call(&NvmlApi::nvmlDeviceGetHandleByPciBusId_v2, id.c_str(), &g.handle);
      if (r == NVML_SUCCESS) r = nvml.Call(&NvmlApi::nvmlDeviceGetIndex, g.handle, &g.index);
    }
    if (r != NVML_SUCCESS) {
      *result = Fail(kExitQueryFailed, "No devices were found\n");
      return false;
    }
    gpus->push_back(g);
  }
  return true;
}

// ---- running processes ----

struct App {
  Gpu gpu;
  unsigned int pid;
  unsigned long long used_bytes;
};

nvmlReturn_t ComputeApps(const NvmlApi& nvml, const Gpu& g, std::vector<App>* apps) {
  std::vector<nvmlProcessInfo_t> infos(8);
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto n = static_cast<unsigned int>(infos.size());
    nvmlReturn_t r =
        nvml.Call(&NvmlApi::nvmlDeviceGetComputeRunningProcesses_v3, g.handle, &n, infos.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(n + 8);  // processes may start between the calls
      continue;
    }
    if (r != NVML_SUCCESS) return r;
    for (unsigned int i = 0; i < n && i < infos.size(); ++i) {
      apps->push_back({g, infos[i].pid, infos[i].usedGpuMemory});
    }
    return NVML_SUCCESS;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

std::string ProcessName(const NvmlApi& nvml, unsigned int pid) {
  char name[256] = {0};
  if (nvml.Call(&NvmlApi::nvmlSystemGetProcessName, pid, name, 256u) != NVML_SUCCESS) {
    return "[Not Found]";
  }
  return name;
}

struct AppField {
  const char* name;
  const char* alias1;
  const char* alias2;
  const char* unit;
  std::function<Value(const Context&, const App&)> get;
};

const std::vector<AppField>& AppFields() {
  static const auto* fields = new std::vector<AppField>{
      {"pid", nullptr, nullptr, nullptr,
       [](const Context&, const App& a) -> Value {
         return {Format("%u", a.pid), false};
       }},
      {"process_name", "name", nullptr, nullptr,
       [](const Context& c, const App& a) -> Value {
         return {ProcessName(c.nvml, a.pid), false};
       }},
      {"used_gpu_memory", "used_memory", nullptr, "MiB",
       [](const Context&, const App& a) -> Value {
         if (a.used_bytes == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
           return NotAvailable();
         }
         return {Format("%llu", a.used_bytes / kMiB), true};
       }},
      {"gpu_uuid", nullptr, nullptr, nullptr,
       [](const Context& c, const App& a) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetUUID, a.gpu.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"gpu_name", nullptr, nullptr, nullptr,
       [](const Context& c, const App& a) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetName, a.gpu.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"gpu_serial", nullptr, nullptr, nullptr,
       [](const Context& c, const App& a) {
         nvmlReturn_t r;
         std::string s = StringOf(c.nvml, c.nvml.nvmlDeviceGetSerial, a.gpu.handle, &r);
         return Checked(r, c.nvml, s, false);
       }},
      {"gpu_bus_id", nullptr, nullptr, nullptr,
       [](const Context& c, const App& a) {
         nvmlPciInfo_t pci;
         memset(&pci, 0, sizeof pci);
         nvmlReturn_t r = c.nvml.Call(&NvmlApi::nvmlDeviceGetPciInfo_v3, a.gpu.handle, &pci);
         return Checked(r, c.nvml, pci.busId, false);
       }},
  };
  return *fields;
}

// ---- the commands ----

SmiResult ListGpus(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult res;
  for (const Gpu& g : gpus) {
    nvmlReturn_t r1, r2;
    std::string name = StringOf(nvml, nvml.nvmlDeviceGetName, g.handle, &r1);
    std::string uuid = StringOf(nvml, nvml.nvmlDeviceGetUUID, g.handle, &r2);
    if (r1 != NVML_SUCCESS || r2 != NVML_SUCCESS) {
      return Fail(kExitQueryFailed, Format("Unable to query GPU %u: %s\n", g.index,
                                           nvml.ErrorString(r1 != NVML_SUCCESS ? r1 : r2)));
    }
    res.out += Format("GPU %u: %s (UUID: %s)\n", g.index, name.c_str(), uuid.c_str());
    res.out += MigDeviceLines(nvml, g);  // a GPU in MIG mode: its MIG devices
  }
  return res;
}

SmiResult QueryGpu(const SmiOptions& o, const NvmlApi& nvml, unsigned int count,
                   const std::vector<Gpu>& gpus) {
  SmiResult res;
  std::vector<const GpuField*> fields;
  if (!ResolveFields(GpuFields(), o.query_gpu, &fields, &res)) return res;
  if (!o.noheader) res.out += HeaderLine(fields);
  const Context ctx{nvml, count};
  for (const Gpu& g : gpus) {
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i > 0) line += ", ";
      line += ValueText(fields[i]->get(ctx, g), fields[i]->unit, o.nounits);
    }
    res.out += line + "\n";
  }
  return res;
}

SmiResult QueryApps(const SmiOptions& o, const NvmlApi& nvml, unsigned int count,
                    const std::vector<Gpu>& gpus) {
  SmiResult res;
  std::vector<const AppField*> fields;
  if (!ResolveFields(AppFields(), o.query_apps, &fields, &res)) return res;
  std::vector<App> apps;
  for (const Gpu& g : gpus) {
    nvmlReturn_t r = ComputeApps(nvml, g, &apps);
    if (r != NVML_SUCCESS) {
      return Fail(kExitQueryFailed, Format("Unable to list the processes of GPU %u: %s\n", g.index,
                                           nvml.ErrorString(r)));
    }
  }
  if (!o.noheader) res.out += HeaderLine(fields);
  const Context ctx{nvml, count};
  for (const App& a : apps) {
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i > 0) line += ", ";
      line += ValueText(fields[i]->get(ctx, a), fields[i]->unit, o.nounits);
    }
    res.out += line + "\n";
  }
  return res;
}

// Pads or cuts `s` to exactly `width` columns.
std::string Cell(std::string s, size_t width) {
  s.resize(width, ' ');
  return s;
}

SmiResult Table(const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult res;
  const std::string rule89(89, '-');
  const std::string gpu_rule =
      "+" + std::string(41, '-') + "+" + std::string(24, '-') + "+" + std::string(22, '-') + "+\n";

  char date[64];
  time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  strftime(date, sizeof date, "%a %b %e %H:%M:%S %Y", &local);
  res.out += std::string(date) + "       \n";

  char driver[96] = "N/A";
  if (nvml.Call(&NvmlApi::nvmlSystemGetDriverVersion, driver, 96u) != NVML_SUCCESS) {
    snprintf(driver, sizeof driver, "N/A");
  }
  int cuda = 0;
  std::string cuda_text = "N/A";
  if (nvml.Call(&NvmlApi::nvmlSystemGetCudaDriverVersion_v2, &cuda) == NVML_SUCCESS) {
    cuda_text = Format("%d.%d", cuda / 1000, cuda % 1000 / 10);
  }
  res.out += "+" + rule89 + "+\n";
  res.out += "|" +
             Cell(Format(" NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %s", driver, driver,
                         cuda_text.c_str()),
                  89) +
             "|\n";
  res.out += gpu_rule;
  res.out +=
      "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile "
      "Uncorr. ECC |\n";
  res.out +=
      "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  "
      "Compute M. |\n";
  res.out +=
      "|                                         |                        |          "
      "     MIG M. |\n";
  res.out +=
      "|" + std::string(41, '=') + "+" + std::string(24, '=') + "+" + std::string(22, '=') + "|\n";

  for (const Gpu& g : gpus) {
    nvmlReturn_t r;
    std::string name = StringOf(nvml, nvml.nvmlDeviceGetName, g.handle, &r);
    if (r != NVML_SUCCESS) name = "N/A";
    nvmlEnableState_t pers = NVML_FEATURE_DISABLED;
    const char* pers_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetPersistenceMode, g.handle, &pers) == NVML_SUCCESS) {
      pers_text = pers == NVML_FEATURE_ENABLED ? "On" : "Off";
    }
    nvmlPciInfo_t pci;
    memset(&pci, 0, sizeof pci);
    std::string bus = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetPciInfo_v3, g.handle, &pci) == NVML_SUCCESS) {
      bus = pci.busId;
    }
    nvmlEnableState_t disp = NVML_FEATURE_DISABLED;
    const char* disp_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetDisplayActive, g.handle, &disp) == NVML_SUCCESS) {
      disp_text = disp == NVML_FEATURE_ENABLED ? "On" : "Off";
    }
    unsigned long long ecc = 0;
    std::string ecc_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetTotalEccErrors, g.handle,
                  NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS) {
      ecc_text = Format("%llu", ecc);
    }
    res.out += "|" + Format("%4u  %-25.25s %7s  ", g.index, name.c_str(), pers_text) + "|" +
               Format("%19s %3s ", bus.c_str(), disp_text) + "|" +
               Format("%21s ", ecc_text.c_str()) + "|\n";

    unsigned int fan = 0, temp = 0, power = 0, cap = 0;
    std::string fan_text = "N/A", temp_text = "N/A", perf_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetFanSpeed, g.handle, &fan) == NVML_SUCCESS) {
      fan_text = Format("%u%%", fan);
    }
    if (nvml.Call(&NvmlApi::nvmlDeviceGetTemperature, g.handle, NVML_TEMPERATURE_GPU, &temp) ==
        NVML_SUCCESS) {
      temp_text = Format("%uC", temp);
    }
    nvmlPstates_t pstate = NVML_PSTATE_UNKNOWN;
    if (nvml.Call(&NvmlApi::nvmlDeviceGetPerformanceState, g.handle, &pstate) == NVML_SUCCESS &&
        pstate != NVML_PSTATE_UNKNOWN) {
      perf_text = Format("P%d", static_cast<int>(pstate));
    }
    std::string power_text = "N/A", cap_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetPowerUsage, g.handle, &power) == NVML_SUCCESS) {
      power_text = Format("%uW", (power + 500) / 1000);
    }
    if (nvml.Call(&NvmlApi::nvmlDeviceGetPowerManagementLimit, g.handle, &cap) == NVML_SUCCESS) {
      cap_text = Format("%uW", (cap + 500) / 1000);
    }
    unsigned long long total = 0, reserved = 0, used = 0, free_bytes = 0;
    std::string mem_text = "N/A";
    if (Memory(nvml, g.handle, &total, &reserved, &used, &free_bytes) == NVML_SUCCESS) {
      mem_text = Format("%8lluMiB / %6lluMiB", used / kMiB, total / kMiB);
    }
    nvmlUtilization_t util{0, 0};
    std::string util_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetUtilizationRates, g.handle, &util) == NVML_SUCCESS) {
      util_text = Format("%u%%", util.gpu);
    }
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
    const char* mode_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetComputeMode, g.handle, &mode) == NVML_SUCCESS) {
      mode_text = ComputeModeShort(mode);
    }
    res.out +=
        "|" +
        Format(" %-3s  %4s %5s %23s ", fan_text.c_str(), temp_text.c_str(), perf_text.c_str(),
               (power_text + " / " + Format("%5s", cap_text.c_str())).c_str()) +
        "|" + Format("%23s ", mem_text.c_str()) + "|" +
        Format("%8s %12s ", util_text.c_str(), mode_text) + "|\n";

    unsigned int mig = 0, mig_pending = 0;
    std::string mig_text = "N/A";
    if (nvml.Call(&NvmlApi::nvmlDeviceGetMigMode, g.handle, &mig, &mig_pending) == NVML_SUCCESS) {
      mig_text = mig == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled";
    }
    res.out += "|" + std::string(41, ' ') + "|" + std::string(24, ' ') + "|" +
               Format("%21s ", mig_text.c_str()) + "|\n";
    res.out += gpu_rule;
  }

  res.out += "\n+" + rule89 + "+\n";
  res.out += "|" + Cell(" Processes:", 89) + "|\n";
  res.out += "|" +
             Cell(
                 "  GPU   GI   CI              PID   Type   Process name"
                 "                        GPU Memory",
                 89) +
             "|\n";
  res.out += "|" +
             Cell(
                 "        ID   ID                                          "
                 "                     Usage",
                 89) +
             "|\n";
  res.out += "|" + std::string(89, '=') + "|\n";
  std::vector<App> apps;
  for (const Gpu& g : gpus) {
    if (ComputeApps(nvml, g, &apps) != NVML_SUCCESS) continue;
  }
  if (apps.empty()) {
    res.out += "|" + Cell("  No running processes found", 89) + "|\n";
  }
  for (const App& a : apps) {
    std::string mem = a.used_bytes == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)
                          ? "N/A"
                          : Format("%lluMiB", a.used_bytes / kMiB);
    res.out += "|" +
               Cell(Format(" %4u   N/A  N/A  %14u%7s   %-36.36s %9s ", a.gpu.index, a.pid, "C",
                           ProcessName(nvml, a.pid).c_str(), mem.c_str()),
                    89) +
               "|\n";
  }
  res.out += "+" + rule89 + "+\n";
  return res;
}

// "--name=value" or "--name value": sets *value and advances *i.
bool OptionValue(const std::vector<std::string>& args, size_t* i, std::string_view name,
                 std::string* value, bool* missing) {
  const std::string& a = args[*i];
  if (a == name) {
    if (*i + 1 >= args.size()) {
      *missing = true;
      return true;
    }
    *value = args[++*i];
    return true;
  }
  if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
    *value = a.substr(name.size() + 1);
    return true;
  }
  return false;
}

}  // namespace

std::string SmiHelp() {
  return "NVIDIA System Management Interface -- v580.65.06 (gpuslice simulator)\n"
         "\n"
         "NVSMI provides monitoring information for the simulated Tesla-class GPUs of a\n"
         "gpuslice simulation, through NVML.\n"
         "\n"
         "Usage: nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n"
         "\n"
         "    -h,   --help                Print usage information and exit.\n"
         "\n"
         "  LIST OPTIONS:\n"
         "\n"
         "    -L,   --list-gpus           Display a list of GPUs connected to the system.\n"
         "\n"
         "  SUMMARY OPTIONS:\n"
         "\n"
         "    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id;\n"
         "                                a comma-separated list selects several).\n"
         "\n"
         "  DEVICE MODIFICATION OPTIONS:\n"
         "\n"
         "    -mig, --multi-instance-gpu= Enable (1) or disable (0) MIG mode (root; the GPU\n"
         "                                must be idle, else the change stays pending).\n"
         "\n"
         "  SELECTIVE QUERY OPTIONS:\n"
         "\n"
         "    --query-gpu=                Information about GPU.\n"
         "                                Call --help-query-gpu for more info.\n"
         "    --query-compute-apps=       List of currently active compute processes.\n"
         "                                Fields: pid, process_name, used_memory, gpu_uuid,\n"
         "                                gpu_name, gpu_serial, gpu_bus_id.\n"
         "    --format=                   Comma separated list of format options:\n"
         "                                  csv - comma separated values (MANDATORY)\n"
         "                                  noheader - skip the first line with column headers\n"
         "                                  nounits - don't print units for numerical values\n"
         "\n"
         "  --query-gpu fields: index, uuid, name, serial, pci.bus_id, driver_version, count,\n"
         "  persistence_mode, compute_mode, pstate, fan.speed, memory.total, memory.reserved,\n"
         "  memory.used, memory.free, utilization.gpu, utilization.memory, temperature.gpu,\n"
         "  power.draw, power.limit, enforced.power.limit, power.default_limit,\n"
         "  power.min_limit, power.max_limit, clocks.gr, clocks.sm, clocks.mem,\n"
         "  clocks.max.gr, clocks.max.sm, clocks.max.mem, mig.mode.current, mig.mode.pending,\n"
         "  timestamp.\n";
}

namespace {

constexpr char kMemoryLimitsUsage[] =
    "Usage: nvidia-smi memory-limits [-i ID] -c CGROUP [--hard-limit SIZE [--soft-limit SIZE] | "
    "--clear]\n"
    "  -c, --cgroup       full sysfs path of a cgroup v2 directory\n"
    "  --hard-limit SIZE  allocations beyond fail (bytes, or e.g. 2GiB)\n"
    "  --soft-limit SIZE  guaranteed memory (default 0)\n"
    "  --clear            remove the cgroup's limits\n"
    "Without --hard-limit or --clear: show the cgroup's limits and usage.\n";

bool ParseMemoryLimitsArgs(const std::vector<std::string>& args, SmiOptions* o, SmiResult* result) {
  auto bad = [&](std::string message) {
    *result = Fail(kExitInvalidArgument, std::move(message) + kMemoryLimitsUsage);
    return false;
  };
  auto size = [&](const std::string& v, unsigned long long* out) {
    StatusOr<uint64_t> b = ParseBytes(v);
    if (!b.ok()) return false;
    *out = *b;
    return true;
  };
  o->memory_limits = true;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string value;
    bool missing = false;
    if (a == "-h" || a == "--help") {
      o->help = true;
    } else if (OptionValue(args, &i, "-i", &value, &missing) ||
               OptionValue(args, &i, "--id", &value, &missing)) {
      if (missing || value.empty()) return bad("Option -i needs a GPU id.\n");
      for (std::string& id : SplitCommas(value)) {
        if (id.empty()) return bad("Option -i needs a GPU id.\n");
        o->ids.push_back(std::move(id));
      }
    } else if (OptionValue(args, &i, "-c", &value, &missing) ||
               OptionValue(args, &i, "--cgroup", &value, &missing)) {
      if (missing || value.empty()) return bad("Option -c needs a cgroup path.\n");
      o->cgroup = value;
    } else if (OptionValue(args, &i, "--hard-limit", &value, &missing)) {
      if (missing || !size(value, &o->hard_bytes) || o->hard_bytes == 0) {
        return bad("Invalid hard limit \"" + value + "\".\n");
      }
      o->set_hard = true;
    } else if (OptionValue(args, &i, "--soft-limit", &value, &missing)) {
      if (missing || !size(value, &o->soft_bytes)) {
        return bad("Invalid soft limit \"" + value + "\".\n");
      }
      o->set_soft = true;
    } else if (a == "--clear") {
      o->clear = true;
    } else {
      return bad("Unknown option \"" + a + "\".\n");
    }
  }
  if (o->help) return true;
  if (o->cgroup.empty()) return bad("Option -c (cgroup path) is required.\n");
  if (o->clear && (o->set_hard || o->set_soft)) {
    return bad("--clear cannot be combined with --hard-limit or --soft-limit.\n");
  }
  if (o->set_soft && !o->set_hard) return bad("--soft-limit needs --hard-limit.\n");
  if (o->set_hard && o->soft_bytes > o->hard_bytes) {
    return bad("The soft limit must not exceed the hard limit.\n");
  }
  return true;
}

std::string MiB(unsigned long long bytes) { return Format("%llu MiB", bytes >> 20); }

SmiResult RunMemoryLimits(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus) {
  SmiResult out;
  for (const Gpu& g : gpus) {
    nvmlReturn_t r = NVML_SUCCESS;
    if (o.set_hard || o.clear) {
      nvmlSetMemoryLimits_v1_t set{};
      set.nameSpace = o.cgroup.c_str();
      set.softLimit = o.clear ? 0 : o.soft_bytes;
      set.hardLimit = o.clear ? NVML_DEVICE_MEMORY_LIMIT_MAX : o.hard_bytes;
      r = nvml.Call(&NvmlApi::nvmlDeviceSetMemoryLimits_v1, g.handle, &set);
      if (r != NVML_SUCCESS) {
        return Fail(ExitCodeFor(r), Format("Failed to %s memory limits of %s on GPU %u: %s\n",
                                           o.clear ? "clear" : "set", o.cgroup.c_str(), g.index,
                                           nvml.ErrorString(r)));
      }
      out.out +=
          o.clear
              ? Format("Cleared memory limits of %s on GPU %u.\n", o.cgroup.c_str(), g.index)
              : Format("Set memory limits of %s on GPU %u: soft %s, hard %s.\n", o.cgroup.c_str(),
                       g.index, MiB(o.soft_bytes).c_str(), MiB(o.hard_bytes).c_str());
      continue;
    }
    nvmlGetMemoryLimits_v1_t get{};
    get.nameSpace = o.cgroup.c_str();
    r = nvml.Call(&NvmlApi::nvmlDeviceGetMemoryLimits_v1, g.handle, &get);
    if (r != NVML_SUCCESS) {
      return Fail(ExitCodeFor(r), Format("Failed to get memory limits of %s on GPU %u: %s\n",
                                         o.cgroup.c_str(), g.index, nvml.ErrorString(r)));
    }
    const bool none = get.softLimit == 0 && get.hardLimit == NVML_DEVICE_MEMORY_LIMIT_MAX;
    out.out +=
        Format("GPU %u\n    Cgroup                            : %s\n", g.index, o.cgroup.c_str());
    out.out += Format("    Soft Limit                        : %s\n",
                      none ? "None" : MiB(get.softLimit).c_str());
    out.out += Format("    Hard Limit                        : %s\n",
                      none ? "None" : MiB(get.hardLimit).c_str());
    out.out += Format("    Current Used                      : %s\n", MiB(get.currentUsed).c_str());
  }
  return out;
}

}  // namespace

std::string MemoryLimitsHelp() { return kMemoryLimitsUsage; }

bool ParseSmiArgs(const std::vector<std::string>& args, SmiOptions* o, SmiResult* result) {
  auto bad = [&](std::string message) {
    *result = Fail(kExitInvalidArgument, std::move(message));
    return false;
  };
  if (!args.empty() && args[0] == "memory-limits") return ParseMemoryLimitsArgs(args, o, result);
  if (!args.empty() && args[0] == "mig") return ParseMigArgs(args, o, result);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string value;
    bool missing = false;
    if (a == "-h" || a == "--help") {
      o->help = true;
    } else if (a == "-L" || a == "--list-gpus") {
      o->list = true;
    } else if (OptionValue(args, &i, "-i", &value, &missing) ||
               OptionValue(args, &i, "--id", &value, &missing)) {
      if (missing || value.empty()) return bad(kBadCombination);
      for (std::string& id : SplitCommas(value)) {
        if (id.empty()) return bad(kBadCombination);
        o->ids.push_back(std::move(id));
      }
    } else if (OptionValue(args, &i, "-mig", &value, &missing) ||
               OptionValue(args, &i, "--multi-instance-gpu", &value, &missing)) {
      if (missing || (value != "0" && value != "1")) {
        return bad("\"" + value + "\" is not a MIG mode: 0 (disable) or 1 (enable).\n" +
                   std::string(kBadCombination));
      }
      o->mig_mode = value == "1" ? 1 : 0;
    } else if (OptionValue(args, &i, "--query-gpu", &value, &missing)) {
      if (missing || value.empty()) return bad(kBadCombination);
      o->query_gpu = value;
    } else if (OptionValue(args, &i, "--query-compute-apps", &value, &missing)) {
      if (missing || value.empty()) return bad(kBadCombination);
      o->query_apps = value;
    } else if (OptionValue(args, &i, "--format", &value, &missing)) {
      if (missing) return bad(kBadCombination);
      o->format_given = true;
      for (const std::string& f : SplitCommas(value)) {
        if (f == "csv") {
          o->csv = true;
        } else if (f == "noheader") {
          o->noheader = true;
        } else if (f == "nounits") {
          o->nounits = true;
        } else {
          return bad("\"" + f + "\" is not a valid format option.\n");
        }
      }
    } else {
      return bad(kBadCombination);
    }
  }
  const bool query = !o->query_gpu.empty() || !o->query_apps.empty();
  if (o->help) return true;
  if (query && (o->list || (!o->query_gpu.empty() && !o->query_apps.empty()))) {
    return bad(kBadCombination);
  }
  if (query && !o->csv) {
    return bad("Option \"--format=csv\" is required with --query-gpu and --query-compute-apps.\n" +
               std::string(kBadCombination));
  }
  if (!query && o->format_given) return bad(kBadCombination);
  if (o->mig_mode >= 0 && (query || o->list)) return bad(kBadCombination);
  return true;
}

SmiResult RunSmi(const SmiOptions& o, const NvmlApi& nvml) {
  if (o.help) {
    SmiResult r;
    r.out = o.memory_limits ? MemoryLimitsHelp() : o.mig ? MigHelp() : SmiHelp();
    return r;
  }
  unsigned int count = 0;
  nvmlReturn_t r = nvml.Call(&NvmlApi::nvmlDeviceGetCount_v2, &count);
  if (r != NVML_SUCCESS) {
    return Fail(kExitQueryFailed,
                Format("Unable to determine the device count: %s\n", nvml.ErrorString(r)));
  }
  SmiResult failed;
  std::vector<Gpu> gpus;
  if (!SelectGpus(o, nvml, count, &gpus, &failed)) return failed;
  if (o.memory_limits) return RunMemoryLimits(o, nvml, gpus);
  if (o.mig) return RunMig(o, nvml, gpus);
  if (o.mig_mode >= 0) {
    if (gpus.empty()) return Fail(kExitQueryFailed, "No devices were found\n");
    return RunMigMode(o, nvml, gpus);
  }
  if (!o.query_gpu.empty()) {
    // Field errors come first, even with no GPUs, as in the real tool.
    std::vector<const GpuField*> fields;
    if (!ResolveFields(GpuFields(), o.query_gpu, &fields, &failed)) return failed;
    return QueryGpu(o, nvml, count, gpus);
  }
  if (!o.query_apps.empty()) return QueryApps(o, nvml, count, gpus);
  if (gpus.empty()) return Fail(kExitQueryFailed, "No devices were found\n");
  if (o.list) return ListGpus(nvml, gpus);
  return Table(nvml, gpus);
}

}  // namespace gpuslice::smi
