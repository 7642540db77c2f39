// The preloaded entry point of libgpuslice-addpath.so: a constructor that
// applies the add-path rules to the process's own environment before main, so
// every later exec (and the dynamic loader of every child) sees the result.
//
// Contract: never fails, never aborts, never throws out, and writes nothing
// unless GPUSLICE_LOG_LEVEL asks for it. Nothing is exported (exports.map).
#include <sys/auxv.h>

#include <cstdlib>
#include <new>

#include "addpath/add_path.h"
#include "common/log.h"

namespace gpuslice::addpath {
namespace {

// The process environment. Constructors run single-threaded in practice;
// getenv/setenv are not safe against other threads anyway.
class ProcessEnvironment final : public Environment {
 public:
  const char* Get(const char* name) override { return getenv(name); }
  bool Set(const char* name, const char* value) override {
    return setenv(name, value, /*overwrite=*/1) == 0;
  }
};

__attribute__((constructor)) void AddPathConstructor() noexcept {
  // Secure-execution mode (setuid/setgid/capabilities): the loader already
  // ignores most of LD_PRELOAD there, and a privileged process must not take
  // paths (or a log file) from its caller's environment. Do nothing at all.
  if (getauxval(AT_SECURE) != 0) return;
  // Only touch logging when asked: InitLogging may open GPUSLICE_LOG_FILE,
  // which every process would otherwise do just by being preloaded.
  if (const char* level = getenv("GPUSLICE_LOG_LEVEL"); level != nullptr && *level != '\0') {
    InitLogging(LogLevel::kOff);
  } else {
    SetLogLevel(LogLevel::kOff);
  }
  try {
    ProcessEnvironment env;
    int written = ApplyPathRules(env);
    GS_LOG(kDebug, "addpath", "done, %d variable(s) written", written);
  } catch (const std::bad_alloc&) {
    GS_LOG(kError, "addpath", "out of memory; environment left partly edited");
  } catch (...) {
    GS_LOG(kError, "addpath", "unexpected exception; environment left partly edited");
  }
}

}  // namespace
}  // namespace gpuslice::addpath
