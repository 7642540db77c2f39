#include "tests/gpu/real_gpu.h"

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace gpuslice::gpu_tier {
namespace {

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

// A CUDA driver's libcuda.so.1 as this process would load it.
GpuPresence ProbeDriver(const std::string& build_dir) {
  GpuPresence p;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    p.reason = std::string("no CUDA driver: ") + dlerror();
    return p;
  }
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) p.driver = RealPath(map->l_name);
  if (IsFakeDriver(p.driver, build_dir)) {
    p.reason = "libcuda.so.1 is not a real driver: " + p.driver;
    dlclose(lib);
    return p;
  }
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
  int devices = 0;
  int rc = init == nullptr ? -1 : init(0);
  if (rc == 0 && count != nullptr) rc = count(&devices);
  // The driver stays loaded: unloading a CUDA driver is not supported.
  if (rc != 0 || devices < 1) {
    p.reason = "CUDA driver " + p.driver + ": cuInit/cuDeviceGetCount gave " + std::to_string(rc) +
               ", " + std::to_string(devices) + " devices";
    return p;
  }
  p.present = true;
  p.reason = std::to_string(devices) + " GPU(s), driver " + p.driver;
  return p;
}

// `nvidia-smi -L` from PATH, unless it is the simulator's.
GpuPresence ProbeSmi(const std::string& build_dir) {
  GpuPresence p;
  FILE* which = popen("command -v nvidia-smi 2>/dev/null", "r");
  std::array<char, PATH_MAX> buf{};
  std::string path;
  if (which != nullptr) {
    if (fgets(buf.data(), buf.size(), which) != nullptr) path = buf.data();
    pclose(which);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  if (path.empty()) {
    p.reason = "no nvidia-smi";
    return p;
  }
  path = RealPath(path);
  if (IsFakeDriver(path, build_dir)) {
    p.reason = "nvidia-smi is the simulator's: " + path;
    return p;
  }
  FILE* smi = popen((path + " -L 2>/dev/null").c_str(), "r");
  std::string out;
  if (smi != nullptr) {
    while (fgets(buf.data(), buf.size(), smi) != nullptr) out += buf.data();
    if (pclose(smi) != 0) out.clear();
  }
  if (out.find("GPU 0:") == std::string::npos) {
    p.reason = "nvidia-smi -L lists no GPU";
    return p;
  }
  p.present = true;
  p.reason = "nvidia-smi -L: " + out.substr(0, out.find('\n'));
  return p;
}

}  // namespace

bool IsFakeDriver(const std::string& library, const std::string& build_dir) {
  if (library.empty()) return true;
  if (library.find("/stubs/") != std::string::npos) return true;
  if (!build_dir.empty()) {
    const std::string sim = RealPath(build_dir) + "/sim/";
    if (library.starts_with(sim)) return true;
  }
  return false;
}

const GpuPresence& DetectGpu(const std::string& build_dir) {
  static const GpuPresence presence = [&] {
    GpuPresence driver = ProbeDriver(build_dir);
    if (driver.present) return driver;
    GpuPresence smi = ProbeSmi(build_dir);
    if (smi.present) return smi;
    smi.reason = driver.reason + "; " + smi.reason;
    return smi;
  }();
  return presence;
}

}  // namespace gpuslice::gpu_tier
