// `gpuslice sim …`: run programs on the simulated GPU and read its ground truth.
#pragma once

#include <CLI/CLI.hpp>

namespace gpuslice::cli {

// Registers `sim run | env | stats | reset` under `app`.
void AddSimCommands(CLI::App& app);

}  // namespace gpuslice::cli
