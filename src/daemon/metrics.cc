#include "daemon/metrics.h"

#include <charconv>
#include <functional>
#include <vector>

namespace gpuslice::daemon {
namespace {

struct Family {
  const char* name;
  const char* type;  // gauge | counter
  const char* help;
  std::function<double(const GpuInfo&)> value;
};

// The shortest text that reads back as `v`.
std::string Number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetrics(const Snapshot& snapshot) {
  static const std::vector<Family> kFamilies = {
      {"gpuslice_gpu_memory_total_bytes", "gauge", "Total GPU memory.",
       [](const GpuInfo& g) { return static_cast<double>(g.memory_total_bytes); }},
      {"gpuslice_gpu_memory_used_bytes", "gauge", "GPU memory in use.",
       [](const GpuInfo& g) { return static_cast<double>(g.memory_used_bytes); }},
      {"gpuslice_gpu_memory_free_bytes", "gauge", "Free GPU memory.",
       [](const GpuInfo& g) { return static_cast<double>(g.memory_free_bytes); }},
      {"gpuslice_gpu_utilization_ratio", "gauge",
       "Fraction of the last sample period a kernel was running (0-1).",
       [](const GpuInfo& g) { return g.utilization_gpu_percent / 100.0; }},
      {"gpuslice_gpu_memory_utilization_ratio", "gauge",
       "Fraction of the last sample period device memory was read or written (0-1).",
       [](const GpuInfo& g) { return g.utilization_memory_percent / 100.0; }},
      {"gpuslice_gpu_power_watts", "gauge", "Instant power draw.",
       [](const GpuInfo& g) { return g.power_draw_mw / 1000.0; }},
      {"gpuslice_gpu_power_limit_watts", "gauge", "Current power limit.",
       [](const GpuInfo& g) { return g.power_limit_mw / 1000.0; }},
      {"gpuslice_gpu_energy_joules_total", "counter", "Energy consumed since the driver loaded.",
       [](const GpuInfo& g) { return static_cast<double>(g.energy_mj) / 1000.0; }},
      {"gpuslice_gpu_sm_clock_hertz", "gauge", "Current SM clock.",
       [](const GpuInfo& g) { return g.sm_clock_mhz * 1e6; }},
      {"gpuslice_gpu_memory_clock_hertz", "gauge", "Current memory clock.",
       [](const GpuInfo& g) { return g.memory_clock_mhz * 1e6; }},
      {"gpuslice_gpu_clocks_locked", "gauge", "1 if the daemon locked the GPU clocks.",
       [](const GpuInfo& g) { return g.locked_gpu_clocks ? 1.0 : 0.0; }},
      {"gpuslice_gpu_persistence_mode", "gauge", "1 if persistence mode is on.",
       [](const GpuInfo& g) { return g.persistence ? 1.0 : 0.0; }},
      {"gpuslice_gpu_xid_errors_total", "counter",
       "XID errors NVML reported since the daemon started.",
       [](const GpuInfo& g) { return static_cast<double>(g.xid_errors); }},
      {"gpuslice_gpu_healthy", "gauge", "0 once a critical XID was reported, else 1.",
       [](const GpuInfo& g) { return g.critical_xid == 0 ? 1.0 : 0.0; }},
      {"gpuslice_gpu_compute_mode", "gauge",
       "NVML compute mode (0 default, 2 prohibited, 3 exclusive process).",
       [](const GpuInfo& g) { return static_cast<double>(static_cast<uint32_t>(g.compute_mode)); }},
  };
  std::string out;
  out.reserve(256 + snapshot.gpus.size() * kFamilies.size() * 96);
  std::vector<std::string> labels;
  for (const GpuInfo& g : snapshot.gpus) {
    labels.push_back("{gpu=\"" + std::to_string(g.index) + "\",uuid=\"" + EscapeLabelValue(g.uuid) +
                     "\"}");
  }
  for (const Family& f : kFamilies) {
    out += std::string("# HELP ") + f.name + " " + f.help + "\n";
    out += std::string("# TYPE ") + f.name + " " + f.type + "\n";
    for (size_t i = 0; i < snapshot.gpus.size(); ++i) {
      out += f.name + labels[i] + " " + Number(f.value(snapshot.gpus[i])) + "\n";
    }
  }
  // How each GPU was read (gpu_monitor.h): a GPU whose reads fail keeps its
  // last values above, so these say whether to trust them.
  out +=
      "# HELP gpuslice_gpu_up 1 if the last sample read the GPU, 0 if its read failed "
      "(e.g. NVML_ERROR_GPU_IS_LOST; its other values are then its last good ones).\n";
  out += "# TYPE gpuslice_gpu_up gauge\n";
  for (size_t i = 0; i < snapshot.gpus.size() && i < snapshot.reads.size(); ++i) {
    out += "gpuslice_gpu_up" + labels[i] + (snapshot.reads[i].failed ? " 0\n" : " 1\n");
  }
  out += "# HELP gpuslice_gpu_read_failures_total Samples whose read of the GPU failed.\n";
  out += "# TYPE gpuslice_gpu_read_failures_total counter\n";
  for (size_t i = 0; i < snapshot.gpus.size() && i < snapshot.reads.size(); ++i) {
    out += "gpuslice_gpu_read_failures_total" + labels[i] + " " +
           std::to_string(snapshot.reads[i].failures) + "\n";
  }
  out += "# HELP gpuslice_gpu_info Static GPU identity (value 1).\n";
  out += "# TYPE gpuslice_gpu_info gauge\n";
  for (const GpuInfo& g : snapshot.gpus) {
    out += "gpuslice_gpu_info{gpu=\"" + std::to_string(g.index) + "\",uuid=\"" +
           EscapeLabelValue(g.uuid) + "\",name=\"" + EscapeLabelValue(g.name) + "\",mps=\"" +
           EscapeLabelValue(g.mps) + "\"} 1\n";
  }
  return out;
}

}  // namespace gpuslice::daemon
