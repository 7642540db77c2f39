#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice {
namespace log_internal {
std::atomic<int> g_level{static_cast<int>(LogLevel::kOff)};  // until a binary chooses
namespace {
std::atomic<int> g_fd{STDERR_FILENO};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kOff:
      break;
  }
  return "";
}
}  // namespace

void Write(LogLevel level, const char* component, const char* fmt, ...) {
  char line[1024];
  int n = snprintf(line, sizeof line, "gpuslice[%d] %s %s: ", static_cast<int>(getpid()),
                   LevelName(level), component);
  if (n < 0) return;
  va_list args;
  va_start(args, fmt);
  int m = vsnprintf(line + n, sizeof line - n, fmt, args);
  va_end(args);
  size_t len = m < 0 ? n : std::min<size_t>(n + m, sizeof line - 2);
  line[len++] = '\n';
  ssize_t ignored = write(g_fd.load(std::memory_order_relaxed), line, len);
  (void)ignored;
}
}  // namespace log_internal

namespace {
LogLevel ParseLevel(const char* s, LogLevel fallback) {
  static constexpr struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"off", LogLevel::kOff},     {"error", LogLevel::kError},
                 {"warn", LogLevel::kWarn},   {"info", LogLevel::kInfo},
                 {"debug", LogLevel::kDebug}, {"trace", LogLevel::kTrace}};
  if (s == nullptr || *s == '\0') return fallback;
  for (const auto& l : kLevels) {
    if (strcasecmp(s, l.name) == 0) return l.level;
  }
  if (s[0] >= '0' && s[0] <= '5' && s[1] == '\0') return static_cast<LogLevel>(s[0] - '0');
  return fallback;
}
}  // namespace

void SetLogLevel(LogLevel level) {
  log_internal::g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void InitLogging(LogLevel default_level) {
  SetLogLevel(ParseLevel(getenv("GPUSLICE_LOG_LEVEL"), default_level));
  if (const char* file = getenv("GPUSLICE_LOG_FILE"); file != nullptr && *file != '\0') {
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) log_internal::g_fd.store(fd, std::memory_order_relaxed);
  }
}

}  // namespace gpuslice
