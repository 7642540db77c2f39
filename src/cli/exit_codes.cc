#include "cli/exit_codes.h"

#include <cstdio>
#include <cstdlib>

namespace gpuslice::cli {

void Fail(const std::string& message, int code) {
  fprintf(stderr, "gpuslice: %s\n", message.c_str());
  exit(code);
}

}  // namespace gpuslice::cli
