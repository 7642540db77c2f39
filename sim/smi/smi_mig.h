// The simulated nvidia-smi's MIG commands, on NVML's MIG API:
//
//   nvidia-smi [-i ID] -mig 0|1                   MIG mode (root)
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

// nvidia-smi -i ID -mig 0|1: sets each selected GPU's MIG mode; a GPU in use
// keeps the change pending (a warning, exit 0, as NVIDIA's tool does).
SmiResult RunMigMode(const SmiOptions& o, const NvmlApi& nvml, const std::vector<Gpu>& gpus);

// The lines -L prints under a GPU in MIG mode: one per MIG device.
std::string MigDeviceLines(const NvmlApi& nvml, const Gpu& gpu);

std::string MigHelp();

}  // namespace gpuslice::smi
