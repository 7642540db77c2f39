// Ground truth of a simulation, for `gpuslice sim stats`, benchmarks and
// external checks. The JSON field names are a stable interface, documented in
// docs/sim.md ("Ground truth"): add fields, never rename or remove them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/core/state.h"

namespace gpuslice::sim {

// {"clock_ns", "since_reset_ns", "devices": [...], "processes": [...]}; see docs/sim.md.
// REQUIRES: the caller holds the state (SimGpu::WithState), advanced to now_ns.
nlohmann::json StatsJson(const SimState& state, int64_t now_ns);

// The same as a table for people.
std::string StatsText(const SimState& state, int64_t now_ns);

}  // namespace gpuslice::sim
