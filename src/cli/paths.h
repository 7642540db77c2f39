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

// The limiter, libgpuslice.so, as an absolute path: $GPUSLICE_LIMITER_PATH, else
// <exe>/../lib/libgpuslice.so (the build tree and an installed tree alike).
// kNotFound, naming where it looked, if the file does not exist.
StatusOr<std::string> LimiterPath();

// The directory of group segments: `flag` if non-empty, else
// $GPUSLICE_SHM_DIR if set and non-empty, else kDefaultGroupSegmentDir.
std::string ShmDir(const std::string& flag);

}  // namespace gpuslice::cli
