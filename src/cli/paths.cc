#include "cli/paths.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "gpuslice/paths.h"

namespace gpuslice::cli {
namespace {
bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }
}  // namespace

std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

StatusOr<std::string> SimDir() {
  if (const char* dir = getenv("GPUSLICE_SIM_DIR"); dir != nullptr && *dir != '\0') {
    if (!Exists(std::string(dir) + "/lib/libcuda.so.1")) {
      return NotFound("GPUSLICE_SIM_DIR=" + std::string(dir) + " has no lib/libcuda.so.1");
    }
    return std::string(dir);
  }
  const std::string exe = ExecutableDir();
  for (const std::string& dir : {exe + "/../sim", exe + "/../lib/gpuslice/sim"}) {
    char real[PATH_MAX];
    if (Exists(dir + "/lib/libcuda.so.1") && realpath(dir.c_str(), real) != nullptr) {
      return std::string(real);
    }
  }
  return NotFound("cannot find the simulated GPU (lib/libcuda.so.1) next to " + exe +
                  "; build it, or set GPUSLICE_SIM_DIR");
}

StatusOr<std::string> LimiterPath() {
  std::string path;
  if (const char* p = getenv("GPUSLICE_LIMITER_PATH"); p != nullptr && *p != '\0') {
    path = p;
  } else {
    path = ExecutableDir() + "/../lib/libgpuslice.so";
  }
  char real[PATH_MAX];
  if (!Exists(path) || realpath(path.c_str(), real) == nullptr) {
    return NotFound("cannot find the limiter at " + path +
                    "; build it (target gpuslice_limiter), or set GPUSLICE_LIMITER_PATH");
  }
  return std::string(real);
}

std::string ShmDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* dir = getenv(kEnvShmDir); dir != nullptr && *dir != '\0') return dir;
  return kDefaultGroupSegmentDir;
}

}  // namespace gpuslice::cli
