#include "sim/nvml/nvml_model.h"

#include <algorithm>
#include <cmath>

namespace gpuslice::sim::nvml {

const UtilWindow* LatestWindow(const DeviceState& d) {
  if (d.windows_closed == 0) return nullptr;
  const UtilWindow& w = d.windows[(d.windows_closed - 1) % kUtilWindows];
  return w.end_ns > w.start_ns ? &w : nullptr;
}

uint32_t GpuUtilizationPercent(const DeviceState& d) {
  const UtilWindow* w = LatestWindow(d);
  return w == nullptr ? 0 : std::min<uint32_t>(w->gpu_percent, 100);
}

uint32_t MemoryUtilizationPercent(const DeviceState& d) {
  return (GpuUtilizationPercent(d) + 1) / 2;
}

uint32_t PowerUsageMw(const DeviceState& d) {
  const double limit = d.power_limit_mw;
  const double idle = std::min<double>(d.info.power_idle_mw, limit);
  const double busy = std::min<double>(d.info.power_busy_mw, limit);
  const double u = GpuUtilizationPercent(d) / 100.0;
  return static_cast<uint32_t>(std::lround(idle * (1.0 - u) + busy * u));
}

uint32_t TemperatureC(const DeviceState& d) {
  return d.info.temperature_c + GpuUtilizationPercent(d) / 4;
}

uint32_t CurrentSmClockMhz(const DeviceState& d) {
  if (d.locked_sm_max_mhz != 0) return std::min(d.locked_sm_max_mhz, d.info.max_sm_clock_mhz);
  return d.info.max_sm_clock_mhz;
}

uint32_t CurrentMemClockMhz(const DeviceState& d) {
  if (d.locked_mem_max_mhz != 0) {
    return std::min(d.locked_mem_max_mhz, d.info.max_mem_clock_mhz);
  }
  return d.info.max_mem_clock_mhz;
}

bool LockedRangeSupported(uint32_t min_mhz, uint32_t max_mhz, uint32_t max_supported_mhz) {
  return min_mhz >= kMinClockMhz && min_mhz <= max_mhz && max_mhz <= max_supported_mhz;
}

Bar1Info Bar1(const DeviceInfo& info) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  uint64_t total = 256 * kMiB;
  while (total < info.total_bytes && total < (uint64_t{1} << 62)) total <<= 1;
  return {total, kMiB};
}

uint64_t ToRealtimeUs(const SimState& s, int64_t monotonic_ns) {
  const int64_t ns = monotonic_ns + s.header.realtime_offset_ns;
  return ns <= 0 ? 0 : static_cast<uint64_t>(ns) / 1000;
}

namespace {

// SplitMix64's finalizer: a well-mixed 64-bit value of `x`.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<ProcessSample> WindowProcessUtilization(const SimState& s, int device,
                                                    uint64_t last_seen_us) {
  std::vector<ProcessSample> out;
  if (device < 0 || device >= static_cast<int>(s.device_count)) return out;
  const DeviceState& d = s.devices[device];
  const uint64_t kept = std::min<uint64_t>(d.windows_closed, kUtilWindows);
  for (uint64_t k = d.windows_closed - kept; k < d.windows_closed; ++k) {
    const UtilWindow& w = d.windows[k % kUtilWindows];
    if (w.end_ns <= w.start_ns) continue;  // cleared by a stats reset
    const uint64_t end_us = ToRealtimeUs(s, w.end_ns);
    if (end_us <= last_seen_us) continue;
    const uint32_t n = std::min<uint32_t>(w.process_count, kWindowProcesses);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; ++i) total += w.processes[i].sm_percent;
    if (total == 0 || w.gpu_percent == 0) continue;  // idle: no sample
    uint64_t draw = Mix(Mix(static_cast<uint64_t>(device)) ^ k) % total;
    uint32_t i = 0;
    while (draw >= w.processes[i].sm_percent) draw -= w.processes[i++].sm_percent;
    const uint32_t sm = std::min<uint32_t>(w.gpu_percent, 100);
    out.push_back({w.processes[i].pid, end_us, sm, (sm + 1) / 2});
  }
  return out;
}

std::vector<DeviceSample> GpuUtilizationSamples(const SimState& s, int device,
                                                uint64_t last_seen_us) {
  std::vector<DeviceSample> out;
  if (device < 0 || device >= static_cast<int>(s.device_count)) return out;
  const DeviceState& d = s.devices[device];
  const uint64_t kept = std::min<uint64_t>(d.windows_closed, kUtilWindows);
  for (uint64_t k = d.windows_closed - kept; k < d.windows_closed; ++k) {
    const UtilWindow& w = d.windows[k % kUtilWindows];
    if (w.end_ns <= w.start_ns) continue;  // cleared by a stats reset
    const uint64_t end_us = ToRealtimeUs(s, w.end_ns);
    if (end_us <= last_seen_us) continue;
    out.push_back({end_us, std::min<uint32_t>(w.gpu_percent, 100)});
  }
  return out;
}

std::vector<ProcessSample> ProcessUtilization(const SimState& s, int device,
                                              uint64_t last_seen_us) {
  if (s.params.process_util == kProcessUtilWindow) {
    return WindowProcessUtilization(s, device, last_seen_us);
  }
  std::vector<ProcessSample> out;
  if (device < 0 || device >= static_cast<int>(s.device_count)) return out;
  const DeviceState& d = s.devices[device];
  const uint64_t kept = std::min<uint64_t>(d.windows_closed, kUtilWindows);

  struct Acc {
    int32_t pid;
    uint64_t timestamp_us;
    double busy_pct_ns;  // sum of sm_percent x window length
  };
  std::vector<Acc> acc;
  double total_ns = 0;
  for (uint64_t k = d.windows_closed - kept; k < d.windows_closed; ++k) {
    const UtilWindow& w = d.windows[k % kUtilWindows];
    if (w.end_ns <= w.start_ns) continue;  // cleared by a stats reset
    const uint64_t end_us = ToRealtimeUs(s, w.end_ns);
    if (end_us <= last_seen_us) continue;
    const auto len = static_cast<double>(w.end_ns - w.start_ns);
    total_ns += len;
    const uint32_t n = std::min<uint32_t>(w.process_count, kWindowProcesses);
    for (uint32_t i = 0; i < n; ++i) {
      const auto& p = w.processes[i];
      auto it = std::find_if(acc.begin(), acc.end(), [&](const Acc& a) { return a.pid == p.pid; });
      if (it == acc.end()) it = acc.insert(acc.end(), Acc{p.pid, 0, 0});
      it->timestamp_us = std::max(it->timestamp_us, end_us);
      it->busy_pct_ns += static_cast<double>(p.sm_percent) * len;
    }
  }
  for (const Acc& a : acc) {
    const uint32_t sm =
        total_ns > 0 ? static_cast<uint32_t>(std::lround(a.busy_pct_ns / total_ns)) : 0;
    out.push_back({a.pid, a.timestamp_us, std::min<uint32_t>(sm, 100), (sm + 1) / 2});
  }
  return out;
}

namespace {

bool IsLiveMpsClient(const ContextRecord& c, int device) {
  return c.status == kContextActive && c.device == device && (c.flags & kContextMpsClient) != 0;
}

void Add(std::vector<RunningProcess>& out, int32_t pid, uint64_t bytes) {
  for (RunningProcess& r : out) {
    if (r.pid == pid) {
      r.used_bytes += bytes;
      return;
    }
  }
  out.push_back({pid, bytes});
}

}  // namespace

std::vector<RunningProcess> RunningComputeProcesses(const SimState& s, int device) {
  std::vector<RunningProcess> out;
  if (device < 0 || device >= static_cast<int>(s.device_count)) return out;
  uint64_t mps_bytes[kMaxProcesses] = {};  // per process slot: its MPS clients' memory
  bool any_mps = false;
  for (const ContextRecord& c : s.contexts) {
    if (IsLiveMpsClient(c, device) && c.process_slot >= 0) {
      mps_bytes[c.process_slot] += c.reservation_bytes + c.allocated_bytes;
      any_mps = true;
    }
  }
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessRecord& p = s.processes[i];
    if (p.status != kProcessAlive) continue;
    const uint64_t total = p.devices[device].memory_bytes;
    const uint64_t bytes = total - std::min(total, mps_bytes[i]);
    if (bytes == 0) continue;
    Add(out, p.pid, bytes);
  }
  if (!any_mps) return out;
  for (const ContextRecord& c : s.contexts) {
    if (IsLiveMpsClient(c, device) && c.mps_server_pid > 0) {
      Add(out, c.mps_server_pid, c.reservation_bytes + c.allocated_bytes);
    }
  }
  return out;
}

std::vector<RunningProcess> MpsClientProcesses(const SimState& s, int device) {
  std::vector<RunningProcess> out;
  if (device < 0 || device >= static_cast<int>(s.device_count)) return out;
  for (const ContextRecord& c : s.contexts) {
    if (IsLiveMpsClient(c, device) && c.process_slot >= 0 &&
        s.processes[c.process_slot].status == kProcessAlive) {
      Add(out, s.processes[c.process_slot].pid, c.reservation_bytes + c.allocated_bytes);
    }
  }
  return out;
}

}  // namespace gpuslice::sim::nvml
