// How gpuslice commands end: exit codes and the one-line error they print.
#pragma once

#include <string>

namespace gpuslice::cli {

inline constexpr int kExitFailure = 1;      // the operation failed
inline constexpr int kExitUsage = 2;        // bad command line (flags, arguments)
inline constexpr int kExitCannotRun = 127;  // the command to run cannot be executed

// Prints "gpuslice: <message>" on stderr and exits with `code`.
[[noreturn]] void Fail(const std::string& message, int code = kExitFailure);

}  // namespace gpuslice::cli
