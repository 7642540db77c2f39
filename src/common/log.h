// Leveled logging to stderr or a file: one write(2) per line, no allocation,
// safe in a preloaded library once InitLogging has run. Off until a binary
// chooses its level (InitLogging or SetLogLevel): the limiter, preloaded into
// someone else's program, says nothing unless asked (GPUSLICE_LOG_LEVEL),
// even before its initialisation has run.
//
// Thread-safe. Lines look like: "gpuslice[1234] WARN limiter: message".
#pragma once

#include <atomic>
#include <cstdarg>

namespace gpuslice {

enum class LogLevel : int { kOff = 0, kError, kWarn, kInfo, kDebug, kTrace };

// Reads GPUSLICE_LOG_LEVEL (off|error|warn|info|debug|trace or 0-5) and
// GPUSLICE_LOG_FILE (append; default stderr). `default_level` applies when the
// variable is unset or unreadable. Calls getenv: call it only where that is allowed.
void InitLogging(LogLevel default_level);
void SetLogLevel(LogLevel level);

namespace log_internal {
extern std::atomic<int> g_level;
void Write(LogLevel level, const char* component, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
}  // namespace log_internal

inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= log_internal::g_level.load(std::memory_order_relaxed);
}

}  // namespace gpuslice

// GS_LOG(kWarn, "limiter", "format %d", x): printf-style, evaluated only when enabled.
#define GS_LOG(level, component, ...)                                                       \
  do {                                                                                      \
    if (::gpuslice::LogEnabled(::gpuslice::LogLevel::level))                                \
      ::gpuslice::log_internal::Write(::gpuslice::LogLevel::level, component, __VA_ARGS__); \
  } while (0)
