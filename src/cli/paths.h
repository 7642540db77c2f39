// Where gpuslice's own files are, found relative to the running binary so that
// a build tree and an installed tree both work without configuration.
#pragma once

#include <string>

#include "common/status.h"

namespace gpuslice::cli {

// Directory of the running executable.
std::string ExecutableDir();

// The simulated GPU's directory (holding lib/libcuda.so.1 and bin/nvidia-smi):
// $GPUSLICE_SIM_DIR, else <exe>/../sim (build tree), else
// <exe>/../lib/gpuslice/sim (installed).
StatusOr<std::string> SimDir();

}  // namespace gpuslice::cli
