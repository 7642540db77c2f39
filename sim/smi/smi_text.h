// What the simulated nvidia-smi's commands share (smi.cc, smi_mig.cc): the
// selected GPUs, printf-style text, failures and exit codes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/smi/nvml_api.h"
#include "sim/smi/smi.h"

namespace gpuslice::smi {

// A GPU that -i selected (or every GPU).
struct Gpu {
  unsigned int index = 0;
  nvmlDevice_t handle = nullptr;
};

inline constexpr char kBadCombination[] =
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n";

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "a, b,c" -> {"a", "b", "c"} (spaces around each part dropped).
std::vector<std::string> SplitCommas(std::string_view s);
// A failed run: `message` on stderr, exit `code`.
SmiResult Fail(int code, std::string message);
// The real tool's exit code for an NVML error.
int ExitCodeFor(nvmlReturn_t r);

}  // namespace gpuslice::smi
