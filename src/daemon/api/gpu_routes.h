// The GPU part of the API (docs/api.md): listing, settings with leases,
// energy, health, metrics. Registered on an ApiRouter by AddGpuRoutes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/api.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/gpu_monitor.h"

namespace gpuslice::daemon {

struct GpuRoutesOptions {
  int64_t default_lease_s = 3600;           // when a PUT names no lease_s
  int64_t max_lease_s = 366LL * 24 * 3600;  // longer needs "permanent": true
  // More series appended to GET /metrics (the tenant registry's); may be empty.
  std::function<std::string()> extra_metrics;
};

// Registers GET /v1/gpus, GET /v1/gpus/{ids}, GET /v1/gpus/{ids}/energy,
// PUT and DELETE /v1/gpus/{ids}/{setting}, GET /v1/leases, GET /metrics,
// GET /healthz and GET /readyz. REQUIRES: `manager` and `monitor` outlive
// the router's use.
void AddGpuRoutes(ApiRouter& router, GpuManager& manager, GpuMonitor& monitor,
                  const GpuRoutesOptions& options);

// "0", "0,2", a UUID (any case), "all" or a mix ("0,GPU-..."): GPU indexes in
// the order given, duplicates dropped. kNotFound names an unknown GPU,
// kInvalidArgument an empty or malformed element. The daemon's one selector
// grammar (ParseGpuSelector, daemon/gpu/gpu_selector.h) over `gpus`' UUIDs.
StatusOr<std::vector<uint32_t>> ParseGpuIds(std::string_view ids, const std::vector<GpuInfo>& gpus);

// The lease holder for a caller: "uid:<uid>" (Unix socket) or "tcp" (bearer
// token), plus "/<label>" when the client names one. kInvalidArgument for a
// label that is not 1-64 of [A-Za-z0-9._:-].
StatusOr<std::string> HolderFor(const Caller& caller, std::string_view label);

}  // namespace gpuslice::daemon
