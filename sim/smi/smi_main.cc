// nvidia-smi (simulated): loads libnvidia-ml.so.1 by soname and runs RunSmi.
#include <cstdio>
#include <string>
#include <vector>

#include "sim/smi/nvml_api.h"
#include "sim/smi/smi.h"

int main(int argc, char** argv) {
  using namespace gpuslice::smi;
  std::vector<std::string> args(argv + 1, argv + argc);
  SmiOptions options;
  SmiResult result;
  if (ParseSmiArgs(args, &options, &result)) {
    if (options.help) {
      result.out = options.memory_limits ? MemoryLimitsHelp() : SmiHelp();
    } else {
      NvmlApi nvml;
      std::string error;
      if (!nvml.Load("libnvidia-ml.so.1", &error)) {
        result.err =
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system.\n"
            "Please also try adding directory that contains libnvidia-ml.so to your system "
            "PATH.\n";
        result.exit_code = kExitLibraryNotFound;
      } else if (nvml.Call(&NvmlApi::nvmlInit_v2) != NVML_SUCCESS) {
        result.err =
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
            "sure that the latest NVIDIA driver is installed and running.\n\n";
        result.exit_code = kExitDriverNotLoaded;
      } else {
        result = RunSmi(options, nvml);
        nvml.Call(&NvmlApi::nvmlShutdown);
      }
    }
  }
  // Like the real tool, messages go to stdout too: scripts capture one stream.
  fputs(result.out.c_str(), stdout);
  fputs(result.err.c_str(), stdout);
  return result.exit_code;
}
