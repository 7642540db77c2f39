// `gpuslice sim ...`: runs the simulator's own tool, <sim dir>/bin/gpuslice-sim,
// with the same arguments (its commands: run, env, stats, reset; docs/sim.md).
// The product never links the simulator (DESIGN.md section 1); without one
// installed, the command says so.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

void AddSimCommand(CLI::App& app);

}  // namespace gpuslice::cli
