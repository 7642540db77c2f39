// The add-path rules (DESIGN.md section 6) applied to an environment: which
// TF_* variable edits which search path, and how. The environment is passed
// in so tests can use a fake; the preloaded library passes the process's own.
//
// Not thread-safe: the process environment is not (getenv/setenv race).
#pragma once

#include <string_view>

#include "addpath/path_list.h"

namespace gpuslice::addpath {

// Read/write access to a set of environment variables.
class Environment {
 public:
  virtual ~Environment() = default;
  // The value of `name`, or nullptr if unset. Valid until the next Set.
  virtual const char* Get(const char* name) = 0;
  // Sets `name` to `value`, replacing any old value. False on failure.
  virtual bool Set(const char* name, const char* value) = 0;
};

// One rule: add the entries of `source` to `target`.
struct PathRule {
  const char* source;
  const char* target;
  EditMode mode;
  std::string_view separators;
};

// The rules, in the order they are applied: all appends, then all prepends,
// so a variable named by both ends with the prepended entries first and the
// result is stable under re-application.
inline constexpr PathRule kPathRules[] = {
    {"TF_PATH", "PATH", EditMode::kAppend, kPathSeparators},
    {"TF_LD_PRELOAD", "LD_PRELOAD", EditMode::kAppend, kPreloadSeparators},
    {"TF_LD_LIBRARY_PATH", "LD_LIBRARY_PATH", EditMode::kAppend, kPathSeparators},
    {"TF_PREPEND_PATH", "PATH", EditMode::kPrepend, kPathSeparators},
    {"TF_PREPEND_LD_PRELOAD", "LD_PRELOAD", EditMode::kPrepend, kPreloadSeparators},
    {"TF_PREPEND_LD_LIBRARY_PATH", "LD_LIBRARY_PATH", EditMode::kPrepend, kPathSeparators},
};

// Applies every rule of kPathRules to `env`. A rule whose source is unset or
// holds no entry leaves its target untouched (not even normalized); otherwise
// the target (created if unset) becomes EditPathList(target, source, mode),
// written only if that differs from its current value. Logs each change at
// debug level. Returns the number of variables written.
//
// May throw std::bad_alloc; the caller decides what that means.
int ApplyPathRules(Environment& env);

}  // namespace gpuslice::addpath
