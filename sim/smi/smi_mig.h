// The simulated nvidia-smi's MIG commands, on NVML's MIG API:
//
//   nvidia-smi mig [-i ID] -lgip                  GPU-instance profiles (free/total each)
//   nvidia-smi mig [-i ID] -lgipp                 their possible placements
//   nvidia-smi mig [-i ID] -cgi P[,P...] [-C]     creates GPU instances of profiles P
//                                                 (names such as 1g.10gb, or ids), with -C a
//                                                 compute instance filling each
//   nvidia-smi mig [-i ID] -lgi | -lci            the GPU / compute instances
//   nvidia-smi mig [-i ID] -dci [-gi IDS] [-ci IDS]   destroys compute instances
//   nvidia-smi mig [-i ID] -dgi [-gi IDS]             destroys GPU instances
//
// Long forms as NVIDIA's (--list-gpu-instance-profiles, --create-gpu-instance,
// --default-compute-instance, ...). Only GPUs in MIG mode take part; with
// none, "No MIG-enabled devices found." and exit 6. A failed create or
// destroy is reported on stderr and the command goes on with the rest; the
// exit code is the last failure's.
#pragma once

#include <string>
#include <vector>

#include "sim/smi/nvml_api.h"
#include "sim/smi/smi.h"
#include "sim/smi/smi_text.h"

namespace gpuslice::smi {

// Parses `nvidia-smi mig ...` (args[0] == "mig").
bool ParseMigArgs(const std::vector<std::string>& args, SmiOptions* o, SmiResult* result);

SmiResult RunMig(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus);

// The lines -L prints under a GPU in MIG mode: one per MIG device.
std::string MigDeviceLines(const NvmlApi& nvml, const Gpu& gpu);

std::string MigHelp();

}  // namespace gpuslice::smi
