// How gpuslice commands end: exit codes and the one-line error they print.
#pragma once

#include <string>

namespace gpuslice::cli {

inline constexpr int kExitFailure = 1;  // the operation failed
inline constexpr int kExitUsage = 2;    // bad command line (flags, arguments)
// The daemon refused a change for the state it is in (HTTP 409): e.g. the
// requests on a GPU would sum above 100 % (`group set --request`).
inline constexpr int kExitConflict = 3;
// The daemon found a value invalid (HTTP 400) that the CLI could not check
// itself: e.g. a request above the group's compute limit on a GPU.
inline constexpr int kExitRejected = 4;
inline constexpr int kExitCannotRun = 127;  // the command to run cannot be executed

// Prints "gpuslice: <message>" on stderr and exits with `code`.
[[noreturn]] void Fail(const std::string& message, int code = kExitFailure);

}  // namespace gpuslice::cli
