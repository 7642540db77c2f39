// Prometheus text exposition (format 0.0.4) of a GPU snapshot: base units
// (bytes, watts, joules, hertz, ratios 0-1), HELP and TYPE for every family,
// labels gpu="<index>" and uuid="<UUID>". Pure function; thread-safe.
#pragma once

#include <string>

#include "daemon/gpu/gpu_monitor.h"

namespace gpuslice::daemon {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string FormatMetrics(const Snapshot& snapshot);

// Escapes a label value (backslash, double quote, newline).
std::string EscapeLabelValue(const std::string& value);

}  // namespace gpuslice::daemon
