// Storage for option values that must live as long as the process: CLI11
// keeps pointers to the variables its options write, and the command
// callbacks read them after parsing. Owned here (freed at exit) rather than
// leaked, so LeakSanitizer has nothing to report.
//
// Not thread-safe: the CLI builds its commands on one thread, before parsing.
#pragma once

#include <memory>
#include <utility>
#include <vector>

namespace gpuslice::cli {

// A T made from `args`, kept until the process exits.
template <typename T, typename... Args>
T* ProcessLifetime(Args&&... args) {
  static std::vector<std::unique_ptr<T>> kept;
  kept.push_back(std::make_unique<T>(std::forward<Args>(args)...));
  return kept.back().get();
}

}  // namespace gpuslice::cli
